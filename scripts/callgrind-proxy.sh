#!/usr/bin/env bash
# User-space instructions per proxied request, for pier or for nginx as the proxy, counted the
# same way: the proxy (plain upstream, one worker) runs under callgrind with instrumentation
# off, a warm-up wrk run, then instrumentation on for exactly one `wrk -t1 -cCONNS -d10s`
# (CONNS=32 unless set), divided by the requests wrk completed. Instruction counts do not drift with the load of a shared
# machine the way req/s does, so data-plane changes show here first, and the two proxies'
# user-space work compares without noise (their kernel work, the loopback TCP of the same four
# syscalls per request, is not counted).
#
#   scripts/callgrind-proxy.sh                 # pier, target/release/pier
#   scripts/callgrind-proxy.sh pier PIER_BIN   # another pier binary
#   scripts/callgrind-proxy.sh nginx           # nginx 1 worker, the harness's proxy config
#   scripts/callgrind-proxy.sh relay           # HAProxy mode tcp (the L4 relay floor)
#   CLOSE=1 scripts/callgrind-proxy.sh ...     # a new client connection per request
#                                              # (wrk sends `Connection: close`)
#   MTLS=1 scripts/callgrind-proxy.sh ...      # the mTLS upstream (TLS 1.3, client certificate)
#   CONNS=256 scripts/callgrind-proxy.sh ...   # wrk's connections (default 32)
#
# Needs one earlier run of scripts/bench-peers.sh (it generates the origin's and nginx's configs
# and pier's manifests under target/bench-peers/), plus valgrind (apt-get installed when
# missing), wrk, nginx and curl. Prints requests, instructions and instructions per request, and
# leaves the profile in target/bench-peers/callgrind.out.<pid> for callgrind_annotate.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/scripts/proxy-common.sh" "$@"
if ! command -v valgrind >/dev/null; then
  apt-get install -y -q valgrind >/dev/null
fi
cd "$RUN"   # callgrind_control finds the task from here
rm -f "$RUN"/callgrind.out.*
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
taskset -c 1 nginx -p "$RUN/$ORIGIN/" -c "$RUN/$ORIGIN/nginx.conf" -e stderr >"$RUN/$ORIGIN/stderr.log" 2>&1 &
pids+=($!)
CG=(valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$RUN/callgrind.out.%p")
if [ "$WHO" = pier ]; then
  PIER_WORKER_THREADS=1 RUST_LOG=warn taskset -c 0 "${CG[@]}" "$BIN" run --manifests "$RUN/pier/manifests" \
    --listen-host 127.0.0.1 --admin "127.0.0.1:$P_ADMIN" >"$RUN/callgrind.log" 2>&1 &
elif [ "$WHO" = relay ]; then
  taskset -c 0 "${CG[@]}" haproxy -f "$RUN/haproxy.cfg" -db >"$RUN/callgrind.log" 2>&1 &
else
  # The harness's nginx proxy config, without the master process (callgrind follows one process).
  sed 's/^worker_processes 1; daemon off;/worker_processes 1; daemon off; master_process off;/' \
    "$RUN/nginx/nginx.conf" >"$RUN/nginx/nginx-callgrind.conf"
  taskset -c 0 "${CG[@]}" nginx -p "$RUN/nginx/" -c "$RUN/nginx/nginx-callgrind.conf" -e stderr \
    >"$RUN/callgrind.log" 2>&1 &
fi
pids+=($!)
url="http://127.0.0.1:$PORT/"
hdr=()
[ "${CLOSE:-0}" = 1 ] && hdr=(-H "Connection: close")
for _ in $(seq 100); do curl -sf -o /dev/null "$url" && break; sleep 0.3; done
taskset -c 1 wrk -t1 -c"${CONNS:-32}" -d3s "${hdr[@]}" "$url" >/dev/null
callgrind_control -i on >/dev/null
n=$(taskset -c 1 wrk -t1 -c"${CONNS:-32}" -d10s "${hdr[@]}" "$url" | awk '/requests in/ {print $1}')
callgrind_control -i off >/dev/null
callgrind_control -d >/dev/null
sleep 1
out=$(ls -S "$RUN"/callgrind.out.* | head -1)
ir=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
echo "proxy=$WHO close=${CLOSE:-0} mtls=${MTLS:-0} requests=$n instructions=$ir per_request=$((ir / n)) profile=$out"

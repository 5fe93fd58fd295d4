#!/usr/bin/env bash
# User-space instructions per proxied request: pier (plain upstream, one worker thread) under
# callgrind, counting only while wrk drives it. Instruction counts do not drift with the load
# of a shared machine the way req/s does, so small data-plane changes show here first.
#
#   scripts/callgrind-proxy.sh [PIER_BIN]     # default target/release/pier
#
# Needs one earlier run of scripts/bench-peers.sh (it generates the origin's nginx config and
# pier's manifests under target/bench-peers/), plus valgrind (apt-get installed when missing),
# wrk, nginx and curl. Prints requests, instructions and instructions per request, and leaves
# the profile in target/bench-peers/callgrind.out.<pid> for callgrind_annotate.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/target/release/pier}"
RUN="$ROOT/target/bench-peers"
PORT_BASE="${PORT_BASE:-19000}"
P_ORIGIN=$((PORT_BASE + 81)); P_PIER=$((PORT_BASE + 100)); P_ADMIN=$((PORT_BASE + 901))
[ -f "$RUN/origin/nginx.conf" ] && [ -d "$RUN/pier/manifests" ] || {
  echo "run scripts/bench-peers.sh once first (it writes $RUN)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "no pier binary at $BIN (cargo build --release)" >&2; exit 2; }
if ! command -v valgrind >/dev/null; then
  apt-get install -y -q valgrind >/dev/null
fi
cd "$RUN"   # callgrind_control finds the task from here
rm -f "$RUN"/callgrind.out.*
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
taskset -c 1 nginx -p "$RUN/origin/" -c "$RUN/origin/nginx.conf" -e stderr >"$RUN/origin/stderr.log" 2>&1 &
pids+=($!)
PIER_WORKER_THREADS=1 RUST_LOG=warn taskset -c 0 valgrind --tool=callgrind --instr-atstart=no \
  --callgrind-out-file="$RUN/callgrind.out.%p" "$BIN" run --manifests "$RUN/pier/manifests" \
  --listen-host 127.0.0.1 --admin "127.0.0.1:$P_ADMIN" >"$RUN/callgrind.log" 2>&1 &
pid=$!; pids+=("$pid")
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$P_PIER/" && break; sleep 0.3; done
requests() {
  curl -s "http://127.0.0.1:$P_ADMIN/metrics" | awk '/^pier_proxy_requests_total/{s+=$2} END{print s+0}'
}
taskset -c 1 wrk -t1 -c32 -d3s "http://127.0.0.1:$P_PIER/" >/dev/null
r0=$(requests)
callgrind_control -i on >/dev/null
taskset -c 1 wrk -t1 -c32 -d10s "http://127.0.0.1:$P_PIER/" >/dev/null
callgrind_control -i off >/dev/null
r1=$(requests)
callgrind_control -d >/dev/null
sleep 1
out=$(ls -S "$RUN"/callgrind.out.* | head -1)
ir=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
n=$((r1 - r0))
echo "requests=$n instructions=$ir per_request=$((ir / n)) profile=$out"

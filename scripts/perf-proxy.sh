#!/usr/bin/env bash
# Where a proxy's CPU goes per request, for pier or nginx as the proxy, measured the same way:
# the proxy alone on CPU 0, the plain origin and `wrk -t1 -cCONNS` on CPU 1 (the harness's
# pinning and configs), then
#   1. `perf record` (cpu-clock, 4999 Hz, call graphs) of the proxy process for 5 s: its time
#      split by kernel / user, and the kernel's part by what it was doing (TCP send, TCP
#      receive, epoll; the loopback delivery of what it sends runs in softirq inside its own
#      send, on its own CPU);
#   2. `perf stat -a` of software events for 4 s: system calls, context switches, wake-ups and
#      IPIs per request, on each CPU (these are counts, so they drift far less than req/s).
# The spin-before-sleep time of pier shows as user time in `[vdso]` (clock_gettime).
#
#   scripts/perf-proxy.sh [pier [PIER_BIN] | nginx | relay]   # CONNS=64 (default); MTLS=1:
#                                     # the mTLS upstream; relay: HAProxy mode tcp, the L4 floor
#
# Needs one earlier run of scripts/bench-peers.sh (configs under target/bench-peers/), wrk,
# nginx, curl, and perf (apt-get installs linux-perf when missing). Leaves perf.data in
# target/bench-peers/perf-<proxy>-c<CONNS>.data for `perf report -i`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONNS="${CONNS:-64}"
. "$ROOT/scripts/proxy-common.sh" "$@"
command -v perf >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
taskset -c 1 nginx -p "$RUN/$ORIGIN/" -c "$RUN/$ORIGIN/nginx.conf" -e stderr >"$RUN/$ORIGIN/stderr.log" 2>&1 &
pids+=($!)
if [ "$WHO" = pier ]; then
  PIER_WORKER_THREADS=1 RUST_LOG=warn taskset -c 0 "$BIN" run --manifests "$RUN/pier/manifests" \
    --listen-host 127.0.0.1 --admin "127.0.0.1:$P_ADMIN" >"$RUN/perf-proxy.log" 2>&1 &
  pids+=($!)
  target=$!
elif [ "$WHO" = relay ]; then
  taskset -c 0 haproxy -f "$RUN/haproxy.cfg" -db >"$RUN/perf-proxy.log" 2>&1 &
  pids+=($!)
  target=$!
else
  taskset -c 0 nginx -p "$RUN/nginx/" -c "$RUN/nginx/nginx.conf" -e stderr >"$RUN/perf-proxy.log" 2>&1 &
  pids+=($!)
  sleep 0.5
  target=$(pgrep -P "$!" | head -1)   # the one worker
fi
url="http://127.0.0.1:$PORT/"
for _ in $(seq 100); do curl -sf -o /dev/null "$url" && break; sleep 0.3; done
data="$RUN/perf-$WHO-c$CONNS.data"
load() { taskset -c 1 wrk -t1 -c"$CONNS" -d"$1"s "$url"; }
rate() { awk '/Requests\/sec/ {print $2}'; }

# 1. Profile.
load 2 >/dev/null
load 7 >"$RUN/perf-wrk.txt" &
sleep 1
perf record -q -F 4999 -g -p "$target" -o "$data" -- sleep 5 >/dev/null 2>&1
wait $!
rps=$(rate <"$RUN/perf-wrk.txt")
samples=$(perf report -i "$data" --stdio --no-children --sort dso -g none 2>/dev/null \
  | awk '/^# Samples:/ {s=$3; if (s ~ /K$/) {sub(/K/, "", s); s *= 1000}; print s; exit}')
echo "proxy=$WHO mtls=${MTLS:-0} conns=$CONNS req/s=$rps proxy_cpu_us_per_req=$(awk -v s="$samples" -v r="$rps" 'BEGIN {printf "%.1f", s / 4999 / (r * 5) * 1e6}')"
echo "time by object:"
perf report -i "$data" --stdio --no-children --sort dso -g none 2>/dev/null | awk '/%/ && !/^#/ {printf "  %s %s\n", $1, $2}' | head -6
echo "time in the kernel's work (callees included; softirq: delivering what the proxy sends):"
perf report -i "$data" --stdio --children --sort sym -g none 2>/dev/null \
  | awk '/\[k\] (entry_SYSCALL_64_after_hwframe|tcp_sendmsg|handle_softirqs|tcp_recvmsg|do_epoll_wait|__sys_getsockopt)$/ {
      sub(/entry_SYSCALL_64_after_hwframe/, "all system calls", $NF); printf "  %s %s\n", $1, $NF}' 

# 2. Events per request.
load 2 >/dev/null
load 6 >"$RUN/perf-wrk.txt" &
sleep 1
ev=context-switches,sched:sched_wakeup,irq_vectors:call_function_single_entry,irq_vectors:reschedule_entry
for s in epoll_wait epoll_ctl recvfrom read sendto write writev getsockopt splice; do ev="$ev,syscalls:sys_enter_$s"; done
perf stat -a -A -x, -e "$ev" -o "$RUN/perf-stat.txt" -- sleep 4
wait $!
rps=$(rate <"$RUN/perf-wrk.txt")
echo "per request over 4 s at $rps req/s (CPU 0: the proxy; CPU 1: wrk and the origin):"
awk -F, -v r="$rps" '/^CPU/ && $2 > 0 {n = $4; sub(/.*:/, "", n); printf "  %s %s %.2f\n", $1, n, $2 / (r * 4)}' "$RUN/perf-stat.txt"
echo "profile: $data"

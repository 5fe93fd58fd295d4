#!/usr/bin/env bash
# Quick pinned A/B of one proxy, for trying a change in minutes instead of the full harness:
# the plain origin (and the mTLS origin) from scripts/bench-peers.sh on CPU 1, the proxy on
# CPU 0, wrk -t1 on CPU 1; per concurrency a 2 s warm-up, then one run of D seconds. Prints
# req/s, p99, the proxy's CPU per request (its process and children) and how busy each CPU was
# (the spin-before-sleep A/B in BENCHMARKS.md reads these). Not a substitute for
# scripts/bench-peers.sh (no contention guard, one run): interleave the proxies you compare.
#
#   scripts/ab-quick.sh NAME URL COMMAND...      # CONNS="64 256" D=5
#
# Needs one earlier scripts/bench-peers.sh run (it writes the configs under target/bench-peers).
# Example, nginx then pier, plain upstream:
#   R=$PWD/target/bench-peers
#   scripts/ab-quick.sh nginx http://127.0.0.1:19090/ nginx -p $R/nginx/ -c $R/nginx/nginx.conf -e stderr
#   scripts/ab-quick.sh pier http://127.0.0.1:19100/ env PIER_WORKER_THREADS=1 RUST_LOG=warn \
#     target/release/pier run --manifests $R/pier/manifests --listen-host 127.0.0.1 --admin 127.0.0.1:19901
# (mTLS: ports 19091 and 19101.)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/scripts/bench-env.sh"
name=$1; url=$2; shift 2
origins_up
taskset -c 0 "$@" >"$RUN/ab-quick-$name.log" 2>&1 &
pid=$!
trap 'kill $pid "${ORIGIN_PIDS[@]}" 2>/dev/null; wait 2>/dev/null || true' EXIT
sleep 1.5
# busy share of CPU 0 and CPU 1 between two /proc/stat samples (does the proxy's core idle?)
cpus() { awk '/^cpu[01] / {print $1, $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
busy() { paste <(echo "$1") <(echo "$2") | awk '{printf "%s_busy=%.0f%% ", $1, 100 * ($5 - $2) / ($6 - $3)}'; }
cpu() { cat /proc/$pid/stat $(for c in $(pgrep -P $pid); do echo /proc/$c/stat; done) 2>/dev/null | awk '{s+=$14+$15} END {print s}'; }
for c in ${CONNS:-64 256}; do
  taskset -c 1 wrk -t1 -c"$c" -d2s "$url" >/dev/null 2>&1 || true
  t0=$(cpu); s0=$(cpus)
  out=$(taskset -c 1 wrk -t1 -c"$c" -d"${D:-5}"s --latency "$url")
  t1=$(cpu); s1=$(cpus)
  rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
  reqs=$(echo "$out" | awk '/requests in/{print $1}')
  p99=$(echo "$out" | awk '/ 99%/{print $2}')
  err=$(echo "$out" | grep -E "Non-2xx|Socket errors" | tr '\n' ' ' || true)
  echo "$name c=$c rps=$rps p99=$p99 cpu_us_per_req=$(awk -v a="$t0" -v b="$t1" -v n="$reqs" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", (b-a)/hz*1e6/n}') $(busy "$s0" "$s1")$err"
done

#!/usr/bin/env bash
# Tight-paired A/B of proxies on this drifting host: every proxy named is up at once on CPU 0
# (an idle one costs nothing), and wrk (CPU 1) alternates between them in D-second slices,
# the order rotating each round, so the runs compared are seconds apart. Prints each round
# and, per proxy, the median [min..max] over the rounds of its req/s over the first one's.
# For trying a change (two pier binaries, or a knob) in minutes; not a substitute for
# scripts/bench-peers.sh (no contention guard, no CPU or memory columns).
#
#   scripts/ab-pair.sh SPEC...        # N=12 rounds, D=3 s slices, C=64 connections, MTLS=0
#   SPEC: nginx | NAME:PORT[:ENV=VALUE,...[,BIN=path]]  (a pier on PORT, and PORT+1 for mTLS)
#
# Example, nginx against pier with and without the spin before sleep:
#   C=256 scripts/ab-pair.sh nginx pier20:19200:PIER_IDLE_SPIN_US=20 pier0:19300:PIER_IDLE_SPIN_US=0
# Needs one earlier scripts/bench-peers.sh run (its configs under target/bench-peers).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
(($#)) || { sed -n '2,14p' "$0" >&2; exit 2; }
. "$ROOT/scripts/bench-env.sh"
N="${N:-12}"; D="${D:-3}"; C="${C:-64}"; MTLS="${MTLS:-0}"
pids=()
trap 'kill "${pids[@]}" "${ORIGIN_PIDS[@]}" 2>/dev/null; wait 2>/dev/null || true' EXIT
bg() { local cpu="$1" log="$2"; shift 2; taskset -c "$cpu" "$@" >"$log" 2>&1 & pids+=($!); }
origins_up
names=(); urls=()
for spec in "$@"; do
  if [ "$spec" = nginx ]; then
    names+=(nginx); port=$P_NGINX
    bg 0 "$RUN/ab-pair-nginx.log" nginx -p "$RUN/nginx/" -c "$RUN/nginx/nginx.conf" -e stderr
  else
    IFS=: read -r name port opts <<<"$spec"
    [ -n "$name" ] && [[ "$port" =~ ^[0-9]+$ ]] || { echo "bad spec: $spec" >&2; exit 2; }
    names+=("$name")
    env_args=(PIER_WORKER_THREADS=1 RUST_LOG=warn); bin="$ROOT/target/release/pier"
    IFS=, read -ra kvs <<<"$opts"
    for kv in "${kvs[@]}"; do case "$kv" in BIN=*) bin="${kv#BIN=}" ;; ?*=*) env_args+=("$kv") ;; esac; done
    m="$RUN/ab-pair-$name"; rm -rf "$m"; mkdir -p "$m"; cp "$RUN/pier/manifests/"*.yaml "$m/"
    sed -i "s/port: $P_PIER}/port: $port}/; s/port: $((P_PIER + 1))}/port: $((port + 1))}/" "$m/gateway.yaml"
    bg 0 "$RUN/ab-pair-$name.log" env "${env_args[@]}" "$bin" run --manifests "$m" \
      --listen-host 127.0.0.1 --admin "127.0.0.1:$((port + 800))"
  fi
  [ "$MTLS" = 1 ] && port=$((port + 1))
  urls+=("http://127.0.0.1:$port/")
done
for u in "${urls[@]}"; do
  for _ in $(seq 1 50); do curl -sf -o /dev/null "$u" && break; sleep 0.1; done
  curl -sf -o /dev/null "$u" || { echo "no answer from $u" >&2; exit 1; }
  taskset -c 1 wrk -t1 -c256 -d2s "$u" >/dev/null
done
n=${#urls[@]}
out="$RUN/ab-pair.out"; : >"$out"
for i in $(seq 1 "$N"); do
  line="$i"
  for k in $(seq 0 $((n - 1))); do
    j=$(((i + k) % n)); [ $((i % 2)) = 0 ] && j=$(((i - k + 2 * n) % n))
    r=$(taskset -c 1 wrk -t1 -c"$C" -d"$D"s --latency "${urls[$j]}" |
      awk '/Requests\/sec/ {rps = $2} / 99%/ {p99 = $2} /Non-2xx|Socket errors/ {bad = 1} END {print rps, p99 (bad ? " ERRORS" : "")}')
    line="$line ${names[$j]}=$r"
  done
  echo "$line" | tee -a "$out"
done
awk -v ref="${names[0]}" '{ for (f = 2; f <= NF; f++) if ($f ~ /=/) { split($f, a, "="); v[a[1]] = a[2] }
    for (k in v) if (k != ref) s[k] = s[k] " " v[k] / v[ref] }
  END { for (k in s) { n = split(s[k], x, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] + 0 < x[i] + 0) { t = x[i]; x[i] = x[j]; x[j] = t }
      printf "%s / %s req/s: median %.3f [%.2f..%.2f] over %d rounds\n", k, ref, x[int((n + 1) / 2)], x[1], x[n], n } }' "$out"

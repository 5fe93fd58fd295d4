#!/usr/bin/env bash
# What a local rate limit (BackendTrafficPolicy rateLimit.local) costs and how exact it is, on
# this machine, against nginx's limit_req at the same limit:
#
#   scripts/bench-ratelimit.sh [PIER_BINARY]   # default target/release/pier; D=10 RUNS=3
#   CALLGRIND=0 scripts/bench-ratelimit.sh     # skip part 1 (valgrind)
#
# An nginx origin (CPU 1) answers 200. pier (CPU 0, one worker) serves four routes on one
# listener: /plain (no policy), /open (a limit of 10⁹ a second: every request checked, none
# refused), /limited (1000 a second, one bucket) and /per-key (100 a second per x-key value,
# Distinct). nginx as the comparison proxy (CPU 0, one worker) has the same /plain and
# /limited: `limit_req` at rate=1000r/s, burst=1000 nodelay, status 429 (the same bucket: a
# burst of 1000, then one request a millisecond). wrk runs on CPU 1, bounded in time.
#
# 1. Cost of the check: pier under callgrind, user-space instructions per request on /plain
#    and on /open (same process, one wrk run each, 5 s, c=32); the ratio.
# 2. Accuracy: /limited under wrk c=64 far above the limit: after a 2 s run that spends the
#    burst, a D-second run; admitted (2xx) per second against the limit (1000).
# 3. Against nginx: /limited at c=64 through pier and through nginx, interleaved RUNS times;
#    requests/s answered (admitted plus refused) and p99; the ratio pier/nginx. Then /per-key
#    through pier with 10 000 distinct keys (wrk script) for the Distinct table's figure.
# 4. Global (GLOBAL=1 by default; needs `scripts/ratelimit.sh build`): envoyproxy/ratelimit with
#    redis-server on CPU 1; /global has a global limit no request reaches (10⁹ a second, one
#    Distinct header); wrk c=GC (default 2: below the service's capacity here) on /plain and
#    /global, interleaved RUNS times: the p99 /global adds, and calls to the service per
#    request (pier_proxy_rate_limit_calls_total).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/scripts/bench-policy.sh"
PIER="${1:-$ROOT/target/release/pier}"
D="${D:-10}"
RUNS="${RUNS:-3}"
command -v wrk >/dev/null && command -v nginx >/dev/null || {
  echo "needs wrk and nginx (apt-get install wrk nginx)" >&2; exit 2; }
WORK="$(mktemp -d /tmp/pier-bench-ratelimit.XXXXXX)"
ORIGIN=19580 LISTEN=19581 ADMIN=19582 NGINX=19583
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT

mkdir -p "$WORK/origin/logs" "$WORK/proxy/logs" "$WORK/manifests"
cat >"$WORK/origin/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $WORK/origin/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
  access_log off;
  server { listen 127.0.0.1:$ORIGIN; keepalive_requests 1000000; location / { return 200 "ok\n"; } }
}
EOF
taskset -c 1 nginx -p "$WORK/origin/" -c "$WORK/origin/nginx.conf" >"$WORK/origin.log" 2>&1 &
PIDS+=($!)
cat >"$WORK/proxy/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $WORK/proxy/nginx.pid;
error_log stderr error;
events { worker_connections 4096; }
http {
  access_log off;
  upstream origin { server 127.0.0.1:$ORIGIN; keepalive 64; }
  # One bucket for every client (wrk is one address); an empty key would not be counted.
  limit_req_zone \$binary_remote_addr zone=limited:1m rate=1000r/s;
  server {
    listen 127.0.0.1:$NGINX;
    keepalive_requests 1000000;
    location /plain { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; }
    location /limited {
      limit_req zone=limited burst=1000 nodelay;
      limit_req_status 429;
      proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection "";
    }
  }
}
EOF

policy_manifests "$WORK/manifests/all.yaml" "$LISTEN" "$ORIGIN" plain open limited per-key global
policy() {
  cat >>"$WORK/manifests/all.yaml" <<EOF
---
apiVersion: pier.dev/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: $1, namespace: b}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: $1}]
  rateLimit:
    local:
      rules:
        - $2
EOF
}
policy open "limit: {requests: 1000000000, unit: Second}"
policy limited "limit: {requests: 1000, unit: Second}"
policy per-key "{clientSelectors: [{headers: [{name: x-key, type: Distinct}]}], limit: {requests: 100, unit: Second}}"
GLOBAL="${GLOBAL:-1}"
RL_FLAGS=()
if [ "$GLOBAL" = 1 ]; then
  eval "$("$ROOT/scripts/ratelimit.sh" env)"
  RL_GRPC=19584 RL_HTTP=19585 RL_DEBUG=19586 REDIS=19587
  mkdir -p "$WORK/runtime/ratelimit/config"
  cat >>"$WORK/manifests/all.yaml" <<EOF
---
apiVersion: pier.dev/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: global, namespace: b}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: global}]
  rateLimit:
    global:
      rules:
        - {clientSelectors: [{headers: [{name: x-tenant, type: Distinct}]}], limit: {requests: 1000000000, unit: Second}}
EOF
  RL_FLAGS=(--rate-limit-service "127.0.0.1:$RL_GRPC" --rate-limit-config "$WORK/runtime/ratelimit/config/pier.yaml")
fi

start_pier() {
  PIER_WORKER_THREADS=1 RUST_LOG=warn taskset -c 0 "$@" run --manifests "$WORK/manifests" \
    --listen-host 127.0.0.1 --admin "127.0.0.1:$ADMIN" "${RL_FLAGS[@]}" >"$WORK/pier.log" 2>&1 &
  pid=$!
  PIDS+=($pid)
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$ADMIN/readyz" >/dev/null && return; sleep 0.1; done
  echo "pier did not become ready" >&2; cat "$WORK/pier.log" >&2; exit 1
}
base="http://127.0.0.1:$LISTEN"

if [ "${CALLGRIND:-1}" = 1 ]; then
  command -v valgrind >/dev/null || { echo "needs valgrind (or CALLGRIND=0)" >&2; exit 2; }
  echo "# 1. instructions per request, /plain vs /open (every request checked), c=32, 5 s each"
  (cd "$WORK" && start_pier valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$WORK/callgrind.out" "$PIER"
   declare -A per
   for path in plain open; do
     line=$(instructions_per_request "$path" "$base/$path")
     echo "$line"
     per[$path]=${line##*per_request=}
   done
   echo "open/plain instructions per request: $(awk -v a="${per[open]}" -v b="${per[plain]}" 'BEGIN {printf "%.4f", a/b}')"
   kill "$pid"; wait "$pid" 2>/dev/null || true)
fi

start_pier "$PIER"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$base/limited")" = 200 ] || { echo "/limited is not 200" >&2; exit 1; }
taskset -c 0 nginx -p "$WORK/proxy/" -c "$WORK/proxy/nginx.conf" >"$WORK/proxy.log" 2>&1 &
PIDS+=($!)
nginx_base="http://127.0.0.1:$NGINX"
for _ in $(seq 50); do curl -sf -o /dev/null "$nginx_base/plain" && break; sleep 0.1; done

# one wrk run: prints "rps p99 requests non2xx seconds"
measure() {
  local c=$1 url=$2 d=$3; shift 3
  local out
  out=$(taskset -c 1 wrk -t1 -c"$c" -d"${d}s" --latency "$@" "$url")
  echo "$(echo "$out" | awk '/Requests\/sec/{print $2}') $(echo "$out" | awk '/ 99%/{print $2}') \
$(echo "$out" | awk '/requests in/{print $1, $4}' | tr -d 's,') \
$(echo "$out" | awk '/Non-2xx/{print $5}')"
}

echo "# 2. admitted per second on /limited (1000/s), c=64, after the burst is spent"
measure 64 "$base/limited" 2 >/dev/null
read -r rps p99 n secs non2xx < <(measure 64 "$base/limited" "$D")
non2xx=${non2xx:-0}
admitted=$((n - non2xx))
echo "answered=$n refused=$non2xx admitted=$admitted seconds=$secs admitted_per_s=$(awk -v a="$admitted" -v s="$secs" 'BEGIN {printf "%.1f", a/s}') vs_limit=$(awk -v a="$admitted" -v s="$secs" 'BEGIN {printf "%.4f", a/s/1000}')"

echo "# 3. /limited through pier and nginx limit_req (same limit), c=64, ${D}s, interleaved"
pier_rps=() nginx_rps=()
for i in $(seq "$RUNS"); do
  read -r rps p99 n secs non2xx < <(measure 64 "$base/limited" "$D")
  echo "pier  run=$i rps=$rps p99=$p99 refused=${non2xx:-0}"; pier_rps+=("$rps")
  read -r rps p99 n secs non2xx < <(measure 64 "$nginx_base/limited" "$D")
  echo "nginx run=$i rps=$rps p99=$p99 refused=${non2xx:-0}"; nginx_rps+=("$rps")
done
echo "pier/nginx requests/s (medians): $(awk -v p="$(median "${pier_rps[@]}")" -v n="$(median "${nginx_rps[@]}")" 'BEGIN {printf "%.3f", p/n}')"

cat >"$WORK/keys.lua" <<'EOF'
local i = 0
request = function()
  i = (i + 1) % 10000
  return wrk.format("GET", nil, { ["x-key"] = tostring(i) })
end
EOF
read -r rps p99 n secs non2xx < <(measure 64 "$base/per-key" "$D" -s "$WORK/keys.lua")
echo "per-key (10 000 keys, 100/s each) rps=$rps p99=$p99 refused=${non2xx:-0} rss_kb=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")"
m=$(curl -s "http://127.0.0.1:$ADMIN/metrics" | grep '^pier_proxy_rate_limited_total' || true)
echo "$m"

if [ "$GLOBAL" = 1 ]; then
  GC="${GC:-2}"
  echo "# 4. global limit through envoyproxy/ratelimit + Redis (CPU 1): /plain vs /global, c=$GC, ${D}s, interleaved"
  taskset -c 1 "$PIER_REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS" --save '' --appendonly no >/dev/null 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$REDIS") 2>/dev/null && break; sleep 0.05; done
  env -i PATH=/usr/bin:/bin HOST=127.0.0.1 PORT=$RL_HTTP GRPC_HOST=127.0.0.1 GRPC_PORT=$RL_GRPC \
    DEBUG_HOST=127.0.0.1 DEBUG_PORT=$RL_DEBUG REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:$REDIS \
    RUNTIME_ROOT="$WORK/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_APPDIRECTORY=config \
    RUNTIME_WATCH_ROOT=false RUNTIME_IGNOREDOTFILES=true USE_STATSD=false DISABLE_STATS=true \
    LOG_LEVEL=warn taskset -c 1 "$PIER_RATELIMIT" >"$WORK/ratelimit.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$RL_HTTP/healthcheck" >/dev/null && break; sleep 0.05; done
  echo 'wrk.headers["x-tenant"] = "acme"' >"$WORK/tenant.lua"
  ok_calls() { curl -s "http://127.0.0.1:$ADMIN/metrics" | awk '/^pier_proxy_rate_limit_calls_total\{result="ok"\}/{print $2}'; }
  before=$(ok_calls)
  total=0
  for i in $(seq "$RUNS"); do
    read -r rps p99 n secs non2xx < <(measure "$GC" "$base/plain" "$D")
    echo "plain  run=$i rps=$rps p99=$p99"
    read -r rps p99 n secs non2xx < <(measure "$GC" "$base/global" "$D" -s "$WORK/tenant.lua")
    echo "global run=$i rps=$rps p99=$p99 non2xx=${non2xx:-0}"
    total=$((total + n))
  done
  after=$(ok_calls)
  echo "ok calls to the service per /global request: $(awk -v a="${before:-0}" -v b="${after:-0}" -v n="$total" 'BEGIN {printf "%.3f", (b-a)/n}')"
  curl -s "http://127.0.0.1:$ADMIN/metrics" | grep '^pier_proxy_rate_limit_calls_total' || true
fi

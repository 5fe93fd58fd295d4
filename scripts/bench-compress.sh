#!/usr/bin/env bash
# Response compression (BackendTrafficPolicy `compressor`) on this machine, against nginx's
# gzip module at the same level on the same body:
#
#   scripts/bench-compress.sh [PIER_BINARY]   # default target/release/pier; D=10 RUNS=3 C=16
#
# An nginx origin (CPU 1) serves one page: the manual's markdown concatenated to SIZE bytes
# (default 64 KiB; text/html), with a Content-Length. pier (CPU 0, one worker) serves /gzip,
# /br and /zstd (a compressor each) and /plain (no policy) from it; nginx as the comparison
# proxy (CPU 0, one worker) serves /gzip with `gzip on; gzip_comp_level 5` (pier's gzip
# level) and /plain. wrk (CPU 1, bounded in time) sends `Accept-Encoding: gzip, br, zstd`.
#
# For each proxy and path, interleaved RUNS times: requests/s, p99, bytes per response on the
# wire, and CPU per MB of page served (the proxy's user+system time from /proc over the run,
# divided by requests × page size). Then the ratios pier/nginx on /gzip (medians).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/scripts/bench-policy.sh"
PIER="${1:-$ROOT/target/release/pier}"
D="${D:-10}"
RUNS="${RUNS:-3}"
C="${C:-16}"
SIZE="${SIZE:-65536}"
command -v wrk >/dev/null && command -v nginx >/dev/null || {
  echo "needs wrk and nginx (apt-get install wrk nginx)" >&2; exit 2; }
WORK="$(mktemp -d /tmp/pier-bench-compress.XXXXXX)"
ORIGIN=19590 LISTEN=19591 ADMIN=19592 NGINX=19593
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT

mkdir -p "$WORK/origin/logs" "$WORK/proxy/logs" "$WORK/manifests" "$WORK/www"
# A real text: the manual, repeated up to SIZE bytes.
while [ "$(stat -c %s "$WORK/www/page.html" 2>/dev/null || echo 0)" -lt "$SIZE" ]; do
  cat "$ROOT"/docs/src/*.md "$ROOT"/docs/src/edge/*.md >>"$WORK/www/page.html"
done
truncate -s "$SIZE" "$WORK/www/page.html"
# nginx's workers (not root) read the page.
chmod 755 "$WORK" "$WORK/www"
chmod 644 "$WORK/www/page.html"
for p in plain gzip br zstd; do ln -s page.html "$WORK/www/$p"; done
cat >"$WORK/origin/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $WORK/origin/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
  access_log off;
  types { text/html html; }
  default_type text/html;
  server { listen 127.0.0.1:$ORIGIN; keepalive_requests 1000000; root $WORK/www; etag off; }
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
  server {
    listen 127.0.0.1:$NGINX;
    keepalive_requests 1000000;
    location /plain { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; }
    location /gzip {
      gzip on; gzip_comp_level 5; gzip_types text/html; gzip_proxied any; gzip_min_length 30;
      gzip_vary on;
      proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection "";
    }
  }
}
EOF

policy_manifests "$WORK/manifests/all.yaml" "$LISTEN" "$ORIGIN" plain gzip br zstd
for r in gzip:Gzip br:Brotli zstd:Zstd; do
  cat >>"$WORK/manifests/all.yaml" <<EOF
---
apiVersion: pier.dev/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: ${r%%:*}, namespace: b}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: ${r%%:*}}]
  compressor: [{type: ${r##*:}}]
EOF
done

PIER_WORKER_THREADS=1 RUST_LOG=warn taskset -c 0 "$PIER" run --manifests "$WORK/manifests" \
  --listen-host 127.0.0.1 --admin "127.0.0.1:$ADMIN" >"$WORK/pier.log" 2>&1 &
pier_pid=$!
PIDS+=($pier_pid)
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$ADMIN/readyz" >/dev/null && break; sleep 0.1; done
taskset -c 0 nginx -p "$WORK/proxy/" -c "$WORK/proxy/nginx.conf" >"$WORK/proxy.log" 2>&1 &
PIDS+=($!)
base="http://127.0.0.1:$LISTEN"
nginx_base="http://127.0.0.1:$NGINX"
for _ in $(seq 50); do curl -sf -o /dev/null "$nginx_base/plain" && break; sleep 0.1; done
nginx_pid=$(cat "$WORK/proxy/nginx.pid")
# nginx's worker is the master's child.
nginx_worker=$(pgrep -P "$nginx_pid" | head -1)

# Each path decodes to the page, as curl sees it.
for u in "$base/gzip" "$base/br" "$base/zstd" "$nginx_base/gzip"; do
  cmp -s <(curl -s --compressed "$u") "$WORK/www/page.html" || { echo "$u does not decode to the page" >&2; exit 1; }
done
for p in gzip br zstd; do
  enc=$(curl -s -o /dev/null -D - -H "accept-encoding: $p" "$base/$p" | awk -F': ' 'tolower($1)=="content-encoding"{print $2}' | tr -d '\r')
  want=$p; [ "$p" = br ] && want=br
  [ "$enc" = "$want" ] || { echo "/$p answered content-encoding '$enc'" >&2; exit 1; }
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
echo 'wrk.headers["Accept-Encoding"] = "gzip, br, zstd"' >"$WORK/accept.lua"
# one run: prints "rps p99 bytes_per_response cpu_ms_per_mb"
measure() {
  local pid=$1 url=$2 out t0 t1 rps n bytes
  t0=$(cpu_ticks "$pid")
  out=$(taskset -c 1 wrk -t1 -c"$C" -d"${D}s" --latency -s "$WORK/accept.lua" "$url")
  t1=$(cpu_ticks "$pid")
  rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
  n=$(echo "$out" | awk '/requests in/{print $1}')
  bytes=$(echo "$out" | awk '/requests in/{print $5}')
  echo "$rps $(echo "$out" | awk '/ 99%/{print $2}') $bytes \
$(awk -v t=$((t1 - t0)) -v hz="$hz" -v n="$n" -v s="$SIZE" 'BEGIN {printf "%.3f", t / hz * 1000 / (n * s / 1048576)}')"
}

echo "# page $SIZE bytes; c=$C, ${D}s per run, $RUNS runs interleaved; wrk reads Transfer as the total"
declare -A rps cpu
for i in $(seq "$RUNS"); do
  for which in "pier plain $pier_pid $base/plain" "nginx plain $nginx_worker $nginx_base/plain" \
    "pier gzip $pier_pid $base/gzip" "nginx gzip $nginx_worker $nginx_base/gzip" \
    "pier br $pier_pid $base/br" "pier zstd $pier_pid $base/zstd"; do
    read -r proxy path pid url <<<"$which"
    read -r r p99 bytes c <<<"$(measure "$pid" "$url")"
    echo "$proxy $path run=$i rps=$r p99=$p99 transferred=$bytes cpu_ms_per_mb=$c"
    rps[$proxy.$path]+="$r "
    cpu[$proxy.$path]+="$c "
  done
done
for k in pier.plain nginx.plain pier.gzip nginx.gzip pier.br pier.zstd; do
  echo "median $k rps=$(median ${rps[$k]}) cpu_ms_per_mb=$(median ${cpu[$k]})"
done
echo "pier/nginx gzip requests/s: $(awk -v p="$(median ${rps[pier.gzip]})" -v n="$(median ${rps[nginx.gzip]})" 'BEGIN {printf "%.3f", p/n}')"
echo "pier/nginx gzip CPU per MB: $(awk -v p="$(median ${cpu[pier.gzip]})" -v n="$(median ${cpu[nginx.gzip]})" 'BEGIN {printf "%.3f", p/n}')"
for p in gzip br zstd; do
  echo "$p bytes on the wire for the page: $(curl -s -o /dev/null -w '%{size_download}' -H "accept-encoding: $p" "$base/$p") of $SIZE"
done
echo "nginx gzip bytes on the wire: $(curl -s -o /dev/null -w '%{size_download}' -H 'accept-encoding: gzip' "$nginx_base/gzip")"
curl -s "http://127.0.0.1:$ADMIN/metrics" | grep '^pier_proxy_compressed_responses_total' || true

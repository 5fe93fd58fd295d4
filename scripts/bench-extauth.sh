#!/usr/bin/env bash
# External authorization in HTTP mode, pier against nginx's auth_request, to the same
# authorizer (tests/extauthz's HTTP side, `Bearer good` allowed with x-user: alice) and the
# same backend (`pier echo`), in one run: the ratios of requests/s and p99 are what issue 38
# asks about (pier >= 1.3x nginx's requests/s, p99 <= nginx's).
#
#   scripts/bench-extauth.sh            # CONNS="64 256" D=10 ROUNDS=3 PIER=target/release/pier
#
# Pinned like scripts/ab-quick.sh: the proxy under test on CPU 0 (one worker each), the
# authorizer, the backend and wrk on CPU 1; the two proxies take turns ROUNDS times per
# concurrency (interleaved, so drift hits both), each run a 2 s warm-up then D seconds. Bounded:
# about 2 x ROUNDS x (2 + D) s per concurrency. Needs wrk, nginx (with auth_request, as
# Debian's is), taskset, and the authorizer (scripts/extauthz.sh build). Do not run it while
# anything else builds: the numbers would say more about the build than the proxies.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PIER=${PIER:-$ROOT/target/release/pier}
CONNS=${CONNS:-64 256}
D=${D:-10}
ROUNDS=${ROUNDS:-3}
for tool in wrk nginx taskset curl; do command -v "$tool" >/dev/null || { echo "bench-extauth: needs $tool" >&2; exit 2; }; done
[ -x "$PIER" ] || { echo "bench-extauth: no pier at $PIER (cargo build --release, or PIER=...)" >&2; exit 2; }
eval "$("$ROOT/scripts/extauthz.sh" env)"

RUN=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$RUN"; }
trap cleanup EXIT
start() { "$@" >>"$RUN/peers.log" 2>&1 & pids+=($!); }

# Peers on CPU 1: the authorizer (HTTP on 19192) and the backend (19181).
start taskset -c 1 "$PIER_EXTAUTHZ" -grpc 127.0.0.1:19191 -http 127.0.0.1:19192
start taskset -c 1 "$PIER" echo --listen 127.0.0.1:19181 --name shop

# nginx on 19280: auth_request to the authorizer, x-user from its answer to the backend.
mkdir -p "$RUN/nginx"
cat >"$RUN/nginx/nginx.conf" <<CONF
worker_processes 1;
pid $RUN/nginx/nginx.pid;
error_log $RUN/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  upstream authz { server 127.0.0.1:19192; keepalive 64; }
  upstream shop { server 127.0.0.1:19181; keepalive 64; }
  server {
    listen 127.0.0.1:19280 reuseport;
    location = /_authz {
      internal;
      proxy_pass http://authz\$request_uri;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
    }
    location / {
      auth_request /_authz;
      auth_request_set \$user \$upstream_http_x_user;
      proxy_set_header x-user \$user;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass http://shop;
    }
  }
}
CONF

# pier on 19380: the same through a SecurityPolicy extAuth (HTTP mode).
mkdir -p "$RUN/pier"
cat >"$RUN/pier/all.yaml" <<YAML
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: pier
  listeners: [{name: http, protocol: HTTP, port: 19380}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pier}
spec: {controllerName: pier.dev/gateway-controller}
$(for s in shop:19181 authz:19192; do cat <<SVC
---
apiVersion: v1
kind: Service
metadata: {name: ${s%:*}, namespace: default}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: ${s%:*}-1, namespace: default, labels: {kubernetes.io/service-name: ${s%:*}}}
addressType: IPv4
ports: [{name: http, port: ${s#*:}}]
endpoints: [{addresses: ["127.0.0.1"]}]
SVC
done)
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: shop, port: 80}]}]
---
apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {name: authz, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: shop}]
  extAuth:
    http:
      backendRefs: [{name: authz, port: 80}]
      headersToBackend: [x-user]
YAML

run_proxy() { # name url command...: one warm-up and one measured run per call
  local name=$1 url=$2 c=$3; shift 3
  taskset -c 0 "$@" >>"$RUN/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 50); do curl -sf -o /dev/null -H 'authorization: Bearer good' "$url" && break; sleep 0.1; done
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'authorization: Bearer good' "$url")" = 200 ] || { echo "bench-extauth: $name does not answer 200" >&2; cat "$RUN/$name.log" >&2; exit 1; }
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'authorization: Bearer bad' "$url")" = 403 ] || { echo "bench-extauth: $name lets a bad token in" >&2; exit 1; }
  taskset -c 1 wrk -t1 -c"$c" -d2s -H 'authorization: Bearer good' "$url" >/dev/null 2>&1 || true
  local out
  out=$(taskset -c 1 wrk -t1 -c"$c" -d"${D}s" --latency -H 'authorization: Bearer good' "$url")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local non2xx
  non2xx=$(echo "$out" | awk '/Non-2xx/{print $NF}')
  echo "$name c=$c rps=$(echo "$out" | awk '/Requests\/sec/{print $2}') p99=$(echo "$out" | awk '/ 99%/{print $2}') non2xx=${non2xx:-0}"
}

for c in $CONNS; do
  for r in $(seq "$ROUNDS"); do
    run_proxy nginx http://127.0.0.1:19280/ "$c" nginx -p "$RUN/nginx/" -c "$RUN/nginx/nginx.conf" -g 'daemon off;' -e stderr
    run_proxy pier http://127.0.0.1:19380/ "$c" env PIER_WORKER_THREADS=1 RUST_LOG=warn \
      "$PIER" run --manifests "$RUN/pier" --listen-host 127.0.0.1 --admin 127.0.0.1:19901
  done
done | tee "$RUN/results"
# Ratios: pier's median over nginx's, per concurrency.
awk '
  function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
  { split($2, cs, "="); split($3, r, "="); split($4, p, "=");
    key = $1 " " cs[2]; n[key]++; rps[key, n[key]] = r[2]; p99[key, n[key]] = ms(p[2]); conns[cs[2]] = 1 }
  function median(key, arr,   i, j, t, m, v) {
    m = n[key]; for (i = 1; i <= m; i++) v[i] = arr[key, i]
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return v[int((m + 1) / 2)]
  }
  END { for (cc in conns) printf "c=%s rps pier/nginx=%.2f p99 pier/nginx=%.2f\n", cc,
          median("pier " cc, rps) / median("nginx " cc, rps), median("pier " cc, p99) / median("nginx " cc, p99) }
' "$RUN/results"

#!/usr/bin/env bash
# pier's GRPCRoute and TLSRoute data paths against nginx and HAProxy, 1-core proxies on
# 127.0.0.1, the same method as scripts/bench-peers.sh (proxy pinned to PROXY_CPU, load and
# origin on LOAD_CPU, interleaved rounds, the median per scenario, ratios within one run).
#
#   scripts/bench-streams.sh                  # every scenario, REPS rounds
#   scripts/bench-streams.sh grpc-pier        # only these scenarios
#
# Scenarios:
#   grpc-direct   h2load -> gRPC origin (`pier echo`, any method answered with grpc-status 0)
#   grpc-pier     h2load -> pier (GRPCRoute, h2c upstream) -> origin
#   grpc-nginx    h2load -> nginx (`grpc_pass`) -> origin
#     unary calls: POST /bench.Echo/Hello, a 64-byte framed message, C connections x M streams
#   tls-direct    wrk (HTTPS) -> nginx TLS origin (1 MiB file, keep-alive): the hop's limit
#   tls-pier      wrk -> pier TLS listener (Passthrough, TLSRoute) -> TLS origin
#   tls-haproxy   wrk -> HAProxy `mode tcp` (ClientHello inspected, as pier does) -> TLS origin
#     throughput of the client's own TLS through the relay, MB/s
#   tlsconn-*     the same three with `Connection: close` and a 13-byte body: new TLS
#                 connections per second through the relay (handshake with the origin)
#   h2-pier       h2load over TLS, ALPN h2, CONNS connections x H2_STREAMS streams, GET of a
#                 13-byte body -> pier (HTTPS listener, HTTPRoute) -> HTTP/1.1 origin (nginx)
#   h2-nginx      the same through nginx (`listen ssl http2`, upstream keep-alive)
#   h2-haproxy    the same through HAProxy (`bind ssl alpn h2,http/1.1`, mode http)
#     requests/s, and the p99 of the request times h2load logs (--log-file), over the whole run
#     and over the requests started after its first second (no warm-up runs before: the first
#     second is when each proxy opens its ~CONNS x H2_STREAMS upstream connections)
#     (h2-* are not in the default set: name them)
#   h3-pier       HTTP/3: scripts/h3-load (quinn + h3; h2load has no HTTP/3 in Debian), CONNS
#                 connections x H3_STREAMS streams, GET of a 13-byte body -> pier (the h2-pier
#                 listener with ClientTrafficPolicy `http3`, its port over UDP) -> the same origin
#   h3-caddy      the same through Caddy (Debian's 2.6, `reverse_proxy`, HTTP/3 on, GOMAXPROCS=1)
#     requests/s and p99 (h3-load's own percentiles); h3-* are not in the default set either
#
# CALLGRIND=N (h2-pier and h2-haproxy only): instead of the rounds, each proxy runs under
#   callgrind (instrumentation off), one warm-up h2load of N requests, then instrumentation on
#   for exactly N more (CONNS x H2_STREAMS as above): user-space instructions per request, which
#   do not drift with the machine's speed the way req/s does (kernel work is not counted).
#   Prints "scenario requests instructions per_request profile" lines; callgrind_annotate
#   reads the profile.
#
# Knobs (env): DURATION=8 (s) REPS=5 CONNS=32 STREAMS=10 PROXY_CPU=0 LOAD_CPU=1
#   H2_STREAMS=100 H3_STREAMS=10 PIER_BIN=target/release/pier RUN_DIR=target/bench-streams
#   PORT_BASE=19500
# Needs: h2load (nghttp2-client) wrk nginx haproxy openssl curl taskset caddy (installed with
# apt-get when missing), a release build of pier, and for h3-* scripts/h3-load (built here with
# cargo when missing). The table goes to stdout and RUN_DIR/results.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DURATION="${DURATION:-8}"
REPS="${REPS:-5}"
CONNS="${CONNS:-32}"
STREAMS="${STREAMS:-10}"
H2_STREAMS="${H2_STREAMS:-100}"
H3_STREAMS="${H3_STREAMS:-10}"
PROXY_CPU="${PROXY_CPU:-0}"
LOAD_CPU="${LOAD_CPU:-1}"
PIER_BIN="${PIER_BIN:-$ROOT/target/release/pier}"
RUN="${RUN_DIR:-$ROOT/target/bench-streams}"
PORT_BASE="${PORT_BASE:-19500}"
P_GRPC_ORIGIN=$((PORT_BASE + 1)); P_TLS_ORIGIN=$((PORT_BASE + 2)); P_HTTP_ORIGIN=$((PORT_BASE + 3))
P_PIER_GRPC=$((PORT_BASE + 11)); P_PIER_TLS=$((PORT_BASE + 12)); P_PIER_H2=$((PORT_BASE + 13)); P_ADMIN=$((PORT_BASE + 19))
P_NGINX_GRPC=$((PORT_BASE + 21)); P_NGINX_H2=$((PORT_BASE + 23)); P_HAPROXY_TLS=$((PORT_BASE + 32)); P_HAPROXY_H2=$((PORT_BASE + 33))
P_CADDY_H3=$((PORT_BASE + 43))
ALL="grpc-direct grpc-pier grpc-nginx tls-direct tls-pier tls-haproxy tlsconn-direct tlsconn-pier tlsconn-haproxy"
EXTRA="h2-pier h2-nginx h2-haproxy h3-pier h3-caddy"
SCENARIOS="${*:-$ALL}"
for sc in $SCENARIOS; do
  case " $ALL $EXTRA " in *" $sc "*) ;; *) echo "unknown scenario: $sc (known: $ALL $EXTRA)" >&2; exit 2 ;; esac
done

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

need=()
for t in h2load wrk nginx haproxy openssl curl taskset caddy; do
  command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] || need+=("$t")
done
if ((${#need[@]})); then
  pkgs=()
  for t in "${need[@]}"; do
    case "$t" in h2load) pkgs+=(nghttp2-client) ;; taskset) pkgs+=(util-linux) ;; *) pkgs+=("$t") ;; esac
  done
  log "installing ${pkgs[*]} (apt-get)"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}" >&2
fi
export PATH="$PATH:/usr/sbin"
[ -x "$PIER_BIN" ] || { echo "no pier binary at $PIER_BIN: cargo build --release first" >&2; exit 1; }
H3_LOAD="$ROOT/scripts/h3-load/target/release/h3-load"
case " $SCENARIOS " in *" h3-"*)
  [ -x "$H3_LOAD" ] || cargo build --release --manifest-path "$ROOT/scripts/h3-load/Cargo.toml" >&2 ;;
esac

OUT="$RUN/results/$(date +%Y%m%d-%H%M%S)"
RAW="$OUT/raw.tsv"
mkdir -p "$OUT" "$RUN/tls-origin/tmp" "$RUN/nginx/tmp" "$RUN/pier" "$RUN/www"

PIDS=()
stop_pid() {
  local i
  kill -TERM "$1" 2>/dev/null || true
  for i in $(seq 1 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
cleanup() { local p; for p in "${PIDS[@]:-}"; do [ -n "$p" ] && stop_pid "$p"; done; return 0; }
trap cleanup EXIT
trap 'exit 130' INT TERM
start_bg() { # cpu logfile cmd...
  local cpu="$1" lf="$2"; shift 2
  taskset -c "$cpu" "$@" >"$lf" 2>&1 &
  LAST_PID=$!; PIDS+=("$LAST_PID")
}
wait_port() { local i; for i in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "nothing on port $1" >&2; return 1; }
family() { echo "$1"; pgrep -P "$1" 2>/dev/null || true; } # pid and its children (nginx workers)
ticks() { local p t=0 v; for p in "$@"; do v=$(awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$p/stat" 2>/dev/null || echo 0); t=$((t + ${v:-0})); done; echo "$t"; }

# ---------- certificates, payloads, configs ----------
C="$RUN/certs"; mkdir -p "$C"
if [ ! -f "$C/origin.crt" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 -subj "/CN=bench" \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$C/origin.key" -out "$C/origin.crt" 2>/dev/null
fi
cat "$C/origin.crt" "$C/origin.key" >"$C/origin.pem"
head -c 1048576 /dev/urandom >"$RUN/www/1m"
printf 'hello, world\n' >"$RUN/www/small"
# One gRPC message: flag 0, length 64 (big-endian), 64 bytes.
{ printf '\x00\x00\x00\x00\x40'; head -c 64 /dev/zero | tr '\0' 'x'; } >"$RUN/grpc.bin"

temps="client_body_temp_path tmp/body; proxy_temp_path tmp/proxy; fastcgi_temp_path tmp/fastcgi; uwsgi_temp_path tmp/uwsgi; scgi_temp_path tmp/scgi;"
cat >"$RUN/tls-origin/nginx.conf" <<EOF
worker_processes 1; daemon off; pid nginx.pid; error_log stderr warn;
events { worker_connections 8192; }
http {
  access_log off; default_type application/octet-stream; keepalive_requests 10000000; $temps
  server {
    listen 127.0.0.1:$P_TLS_ORIGIN ssl backlog=4096;
    ssl_certificate $C/origin.crt; ssl_certificate_key $C/origin.key; ssl_session_cache off; ssl_session_tickets off;
    root $RUN/www;
  }
  # the HTTP/1.1 origin of the h2-* scenarios
  server { listen 127.0.0.1:$P_HTTP_ORIGIN backlog=4096; keepalive_timeout 75s; location / { return 200 "hello, world\n"; } }
}
EOF
cat >"$RUN/nginx/nginx.conf" <<EOF
worker_processes 1; daemon off; pid nginx.pid; error_log stderr warn;
events { worker_connections 8192; }
http {
  access_log off; keepalive_requests 10000000; http2_max_concurrent_streams 1000; $temps
  upstream grpc_origin { server 127.0.0.1:$P_GRPC_ORIGIN; keepalive 64; }
  server { listen 127.0.0.1:$P_NGINX_GRPC http2 backlog=4096; location / { grpc_pass grpc://grpc_origin; } }
  upstream h1_origin { server 127.0.0.1:$P_HTTP_ORIGIN; keepalive 64; }
  server { listen 127.0.0.1:$P_NGINX_H2 ssl http2 backlog=4096; ssl_certificate $C/origin.crt; ssl_certificate_key $C/origin.key;
    location / { proxy_pass http://h1_origin; proxy_http_version 1.1; proxy_set_header Connection ""; } }
}
EOF
cat >"$RUN/haproxy.cfg" <<EOF
global
  nbthread 1
  maxconn 8000
defaults
  mode tcp
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend tls
  bind 127.0.0.1:$P_HAPROXY_TLS
  tcp-request inspect-delay 5s
  tcp-request content accept if { req_ssl_hello_type 1 }
  default_backend origin
backend origin
  server origin 127.0.0.1:$P_TLS_ORIGIN
frontend h2
  mode http
  bind 127.0.0.1:$P_HAPROXY_H2 ssl crt $C/origin.pem alpn h2,http/1.1
  default_backend h1_origin
backend h1_origin
  mode http
  http-reuse always
  server origin 127.0.0.1:$P_HTTP_ORIGIN
EOF
mkdir -p "$RUN/caddy"
cat >"$RUN/caddy/Caddyfile" <<EOF
{
  admin off
  auto_https off
  servers {
    protocols h1 h2 h3
  }
}
https://localhost:$P_CADDY_H3, https://127.0.0.1:$P_CADDY_H3 {
  tls $C/origin.crt $C/origin.key
  reverse_proxy 127.0.0.1:$P_HTTP_ORIGIN
}
EOF
# A Service NAME (port PORT named PORTNAME) and its EndpointSlice: 127.0.0.1:TARGET.
service_yaml() { # name portname port target
  cat <<EOF
---
apiVersion: v1
kind: Service
metadata: {name: $1, namespace: demo}
spec: {ports: [{name: $2, port: $3}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: $1-1, namespace: demo, labels: {kubernetes.io/service-name: $1}}
addressType: IPv4
ports: [{name: $2, port: $4, protocol: TCP}]
endpoints: [{addresses: ["127.0.0.1"], conditions: {ready: true}}]
EOF
}
{
  cat <<EOF
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pier}
spec: {controllerName: pier.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: bench, namespace: demo}
spec:
  gatewayClassName: pier
  listeners:
    - {name: grpc, protocol: HTTP, port: $P_PIER_GRPC}
    - {name: tls, protocol: TLS, port: $P_PIER_TLS, tls: {mode: Passthrough}}
    - {name: h2, protocol: HTTPS, port: $P_PIER_H2, tls: {certificateRefs: [{name: origin}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: h2, namespace: demo}
spec:
  parentRefs: [{name: bench, sectionName: h2}]
  rules: [{backendRefs: [{name: http-origin, port: 80}]}]
---
apiVersion: pier.dev/v1alpha1
kind: ClientTrafficPolicy
metadata: {name: h3, namespace: demo}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: bench, sectionName: h2}]
  http3: {}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: grpc, namespace: demo}
spec:
  parentRefs: [{name: bench, sectionName: grpc}]
  rules: [{backendRefs: [{name: grpc-origin, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: tls, namespace: demo}
spec:
  parentRefs: [{name: bench, sectionName: tls}]
  hostnames: []
  rules: [{backendRefs: [{name: tls-origin, port: 443}]}]
EOF
  service_yaml http-origin http 80 "$P_HTTP_ORIGIN"
  service_yaml grpc-origin grpc 80 "$P_GRPC_ORIGIN"
  service_yaml tls-origin tls 443 "$P_TLS_ORIGIN"
  echo "---"
  echo "apiVersion: v1"; echo "kind: Secret"; echo "metadata: {name: origin, namespace: demo}"
  echo "type: kubernetes.io/tls"; echo "stringData:"
  echo "  tls.crt: |"; sed 's/^/    /' "$C/origin.crt"
  echo "  tls.key: |"; sed 's/^/    /' "$C/origin.key"
} >"$RUN/pier/bench.yaml"

# ---------- origins (on LOAD_CPU, for the whole run) ----------
start_bg "$LOAD_CPU" "$RUN/grpc-origin.log" "$PIER_BIN" echo --listen "127.0.0.1:$P_GRPC_ORIGIN" --name origin
wait_port "$P_GRPC_ORIGIN"
start_bg "$LOAD_CPU" "$RUN/tls-origin/stderr.log" nginx -p "$RUN/tls-origin/" -c "$RUN/tls-origin/nginx.conf" -e stderr
wait_port "$P_TLS_ORIGIN"

PROXY_PID=""; PROXY_KIND=""
proxy_up() { # none|pier|nginx|haproxy|caddy
  [ "$PROXY_KIND" = "$1" ] && return 0
  [ -n "$PROXY_PID" ] && stop_pid "$PROXY_PID"; PROXY_PID=""; PROXY_KIND="$1"
  case "$1" in
    none) return 0 ;;
    pier) start_bg "$PROXY_CPU" "$RUN/pier.log" env PIER_WORKER_THREADS=1 RUST_LOG=warn "${CG[@]}" "$PIER_BIN" run \
            --manifests "$RUN/pier" --listen-host 127.0.0.1 --admin "127.0.0.1:$P_ADMIN"
          PROXY_PID=$LAST_PID; wait_port "$P_PIER_GRPC"; wait_port "$P_PIER_TLS"; wait_port "$P_PIER_H2" ;;
    nginx) start_bg "$PROXY_CPU" "$RUN/nginx/stderr.log" nginx -p "$RUN/nginx/" -c "$RUN/nginx/nginx.conf" -e stderr
           PROXY_PID=$LAST_PID; wait_port "$P_NGINX_GRPC"; wait_port "$P_NGINX_H2" ;;
    haproxy) start_bg "$PROXY_CPU" "$RUN/haproxy.log" "${CG[@]}" haproxy -f "$RUN/haproxy.cfg" -db
             PROXY_PID=$LAST_PID; wait_port "$P_HAPROXY_TLS"; wait_port "$P_HAPROXY_H2" ;;
    caddy) start_bg "$PROXY_CPU" "$RUN/caddy.log" env GOMAXPROCS=1 HOME="$RUN/caddy" XDG_DATA_HOME="$RUN/caddy" \
             XDG_CONFIG_HOME="$RUN/caddy" caddy run --config "$RUN/caddy/Caddyfile" --adapter caddyfile
           PROXY_PID=$LAST_PID; wait_port "$P_CADDY_H3" ;;
  esac
}
kind_of() { case "$1" in *-direct) echo none ;; *-pier) echo pier ;; *-nginx) echo nginx ;; *-haproxy) echo haproxy ;; *-caddy) echo caddy ;; esac; }
port_of() {
  case "$1" in
    grpc-direct) echo "$P_GRPC_ORIGIN" ;; grpc-pier) echo "$P_PIER_GRPC" ;; grpc-nginx) echo "$P_NGINX_GRPC" ;;
    h2-pier) echo "$P_PIER_H2" ;; h2-nginx) echo "$P_NGINX_H2" ;; h2-haproxy) echo "$P_HAPROXY_H2" ;;
    h3-pier) echo "$P_PIER_H2" ;; h3-caddy) echo "$P_CADDY_H3" ;;
    *-direct) echo "$P_TLS_ORIGIN" ;; *-pier) echo "$P_PIER_TLS" ;; *-haproxy) echo "$P_HAPROXY_TLS" ;;
  esac
}

# One run: prints "value errors p99" (calls/s or MB/s or conn/s or req/s, failed requests, p99
# in ms or -).
run_one() { # scenario
  local sc="$1" port; port=$(port_of "$sc")
  case "$sc" in
    grpc-*)
      taskset -c "$LOAD_CPU" h2load -D "$DURATION" -c "$CONNS" -m "$STREAMS" -t 1 \
        -d "$RUN/grpc.bin" -H 'content-type: application/grpc' -H 'te: trailers' \
        "http://127.0.0.1:$port/bench.Echo/Hello" >"$OUT/$sc.last" 2>&1 || true
      awk '/^finished in/ { for (i = 1; i <= NF; i++) if ($i ~ /req\/s/) { v = $(i - 1) } }
           /^requests:/ { e = $10 + $12 } END { printf "%s %s -\n", v + 0, e + 0 }' "$OUT/$sc.last" ;;
    h2-*)
      taskset -c "$LOAD_CPU" h2load -D "$DURATION" -c "$CONNS" -m "$H2_STREAMS" -t 1 --log-file "$OUT/$sc.times" \
        "https://127.0.0.1:$port/small" >"$OUT/$sc.last" 2>&1 || true
      local p99 p99s t0
      pct99() { sort -n | awk '{ a[NR] = $1 } END { i = int(NR * 0.99); if (i < 1) i = 1; if (NR) printf "%.2f", a[i] / 1000; else print "-" }'; }
      p99=$(awk -F'\t' '{ print $3 }' "$OUT/$sc.times" | pct99)
      # The same past the first second (requests started then): the steady state, without
      # the ramp in which every proxy opens its upstream connections.
      t0=$(awk -F'\t' 'NR == 1 || $1 < m { m = $1 } END { printf "%.0f", m }' "$OUT/$sc.times")
      p99s=$(awk -F'\t' -v t0="$t0" '$1 - t0 > 1000000 { print $3 }' "$OUT/$sc.times" | pct99)
      awk -v p99="$p99" -v p99s="$p99s" '/^finished in/ { for (i = 1; i <= NF; i++) if ($i ~ /req\/s/) { v = $(i - 1) } }
           /^requests:/ { e = $10 + $12 } /^status codes:/ { e += $7 + $9 } END { printf "%s %s %s %s\n", v + 0, e + 0, p99, p99s }' "$OUT/$sc.last" ;;
    h3-*)
      # SNI localhost: Caddy's QUIC handshake fails without a name (no SNI for an IP).
      taskset -c "$LOAD_CPU" "$H3_LOAD" -c "$CONNS" -m "$H3_STREAMS" -d "$DURATION" --sni localhost \
        "https://127.0.0.1:$port/small" >"$OUT/$sc.last" 2>&1 || true
      awk '/^finished in/ { for (i = 1; i <= NF; i++) if ($i ~ /req\/s/) { v = $(i - 1) } }
           /^requests:/ { e = $10 + $12 } /^latency ms:/ { p = $8 } END { printf "%s %s %s\n", v + 0, e + 0, p }' "$OUT/$sc.last" ;;
    tls-*)
      taskset -c "$LOAD_CPU" wrk -t 1 -c "$CONNS" -d "${DURATION}s" "https://127.0.0.1:$port/1m" >"$OUT/$sc.last" 2>&1 || true
      awk '/^Transfer\/sec/ { v = $2; if (v ~ /GB/) m = 1024; else if (v ~ /MB/) m = 1; else m = 1 / 1024; sub(/[A-Za-z]+$/, "", v); t = v * m }
           /Non-2xx|Socket errors/ { e += $NF } END { printf "%.1f %s -\n", t, e + 0 }' "$OUT/$sc.last" ;;
    tlsconn-*)
      taskset -c "$LOAD_CPU" wrk -t 1 -c "$CONNS" -d "${DURATION}s" -H 'Connection: close' "https://127.0.0.1:$port/small" >"$OUT/$sc.last" 2>&1 || true
      awk '/^Requests\/sec/ { v = $2 } /Non-2xx/ { e += $NF } END { printf "%s %s -\n", v + 0, e + 0 }' "$OUT/$sc.last" ;;
  esac
}

if [ -n "${CALLGRIND:-}" ]; then
  command -v valgrind >/dev/null || { echo "CALLGRIND needs valgrind (apt-get install valgrind)" >&2; exit 2; }
  cd "$RUN"   # callgrind_control finds the process from here
  rm -f "$RUN"/callgrind.out.*
  for sc in $SCENARIOS; do
    case "$sc" in h2-pier | h2-haproxy) ;; *) echo "CALLGRIND: h2-pier and h2-haproxy only, not $sc" >&2; exit 2 ;; esac
    CG=(valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$RUN/callgrind.out.%p")
    proxy_up "$(kind_of "$sc")"
    url="https://127.0.0.1:$(port_of "$sc")/small"
    taskset -c "$LOAD_CPU" h2load -n "$CALLGRIND" -c "$CONNS" -m "$H2_STREAMS" -t 1 "$url" >/dev/null 2>&1
    callgrind_control -i on >/dev/null
    n=$(taskset -c "$LOAD_CPU" h2load -n "$CALLGRIND" -c "$CONNS" -m "$H2_STREAMS" -t 1 "$url" 2>&1 |
      awk '/^status codes:/ { print $3 + 0 }')
    callgrind_control -i off >/dev/null
    callgrind_control -d >/dev/null
    sleep 1
    out="$RUN/callgrind.out.$PROXY_PID.1"
    ir=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
    proxy_up none
    CG=()
    echo "$sc requests=$n instructions=$ir per_request=$((ir / n)) profile=$out"
  done
  exit 0
fi
CG=()
printf 'round\tscenario\tvalue\terrors\tproxy_cpu_ms_per_1k\tp99_ms\tp99_after_1s_ms\n' >"$RAW"
hz=$(getconf CLK_TCK)
for r in $(seq 1 "$REPS"); do
  order="$SCENARIOS"
  [ $((r % 2)) -eq 0 ] && order=$(echo "$SCENARIOS" | tr ' ' '\n' | tac | tr '\n' ' ')
  for sc in $order; do
    proxy_up "$(kind_of "$sc")"
    sleep 1
    pids=""; [ -n "$PROXY_PID" ] && pids=$(family "$PROXY_PID" | tr '\n' ' ')
    t0=$( [ -n "$pids" ] && ticks $pids || echo 0 )
    read -r value errors p99 p99s < <(run_one "$sc")
    t1=$( [ -n "$pids" ] && ticks $pids || echo 0 )
    cpu=$(awk -v a="$t0" -v b="$t1" -v hz="$hz" -v d="$DURATION" 'BEGIN { printf "%.0f", 1000 * (b - a) / hz / d }')
    p99s="${p99s:--}"
    log "round $r $sc: $value (errors $errors, proxy CPU ${cpu} ms/s, p99 $p99 ms, after the first second $p99s ms)"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$sc" "$value" "$errors" "$cpu" "$p99" "$p99s" >>"$RAW"
  done
done
proxy_up none

# ---------- the table: median per scenario, ratios to pier ----------
{
  echo "scenario | median | unit | errors | proxy CPU (ms per s) | pier / this | p99 median (ms) | p99 after the first second (ms)"
  echo "---|---|---|---|---|---|---|---"
  awk -F'\t' 'NR > 1 { v[$2] = v[$2] " " $3; e[$2] += $4; c[$2] = c[$2] " " $5; if ($6 != "-" && $6 != "") q[$2] = q[$2] " " $6
      if ($7 != "-" && $7 != "") w[$2] = w[$2] " " $7 }
    function median(s,   a, n, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }; return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    END {
      for (s in v) m[s] = median(v[s])
      for (s in v) {
        split(s, p, "-"); pier = m[p[1] "-pier"]
        unit = (p[1] == "grpc") ? "calls/s" : (p[1] == "tls") ? "MB/s" : (p[1] == "h2" || p[1] == "h3") ? "req/s" : "conn/s"
        ratio = (pier > 0 && m[s] > 0) ? sprintf("%.2f", pier / m[s]) : "-"
        printf "%s | %s | %s | %d | %s | %s | %s | %s\n", s, m[s], unit, e[s], median(c[s]), ratio, (s in q) ? median(q[s]) : "-", (s in w) ? median(w[s]) : "-"
      }
    }' "$RAW" | sort
} | tee "$OUT/table.md"
log "raw: $RAW"

# Sourced by scripts/bench-ratelimit.sh, scripts/bench-compress.sh and scripts/bench-auth.sh
# (not run on its own): what their policy benchmarks share.

# policy_manifests FILE LISTEN ORIGIN ROUTE...: a Gateway `b/gw` with one HTTP listener on
# LISTEN, a Service `b/origin` whose one endpoint is 127.0.0.1:ORIGIN, and an HTTPRoute `b/ROUTE`
# for each ROUTE sending the prefix /ROUTE to it (the caller appends its policies to FILE).
policy_manifests() {
  local file=$1 listen=$2 origin=$3 r
  shift 3
  cat >"$file" <<YAML
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pier}
spec: {controllerName: pier.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: b}
spec:
  gatewayClassName: pier
  listeners: [{name: http, protocol: HTTP, port: $listen}]
---
apiVersion: v1
kind: Service
metadata: {name: origin, namespace: b}
spec: {ports: [{name: http, port: 80, targetPort: $origin}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: origin-1, namespace: b, labels: {kubernetes.io/service-name: origin}}
addressType: IPv4
ports: [{name: http, port: $origin, protocol: TCP}]
endpoints: [{addresses: ["127.0.0.1"]}]
YAML
  for r in "$@"; do
    cat >>"$file" <<YAML
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: $r, namespace: b}
spec:
  parentRefs: [{name: gw}]
  rules: [{matches: [{path: {type: PathPrefix, value: /$r}}], backendRefs: [{name: origin, port: 80}]}]
YAML
  done
}

# median VALUE...: the middle value (the upper one of two).
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# instructions_per_request LABEL WRK_ARGS...: for the process callgrind runs from the current
# directory (started with --instr-atstart=no, dumping to ./callgrind.out*), a 3 s warm-up wrk
# run, then one 5 s run (c=32, CPU 1) with instrumentation on; prints
# "LABEL requests=N instructions=I per_request=P".
instructions_per_request() {
  local label=$1 n ir out
  shift
  taskset -c 1 wrk -t1 -c32 -d3s "$@" >/dev/null
  callgrind_control -z >/dev/null
  callgrind_control -i on >/dev/null
  n=$(taskset -c 1 wrk -t1 -c32 -d5s "$@" | awk '/requests in/ {print $1}')
  callgrind_control -i off >/dev/null
  callgrind_control -d "$label" >/dev/null
  sleep 1
  out=$(ls -t callgrind.out* | head -1)
  ir=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
  echo "$label requests=$n instructions=$ir per_request=$((ir / n))"
}

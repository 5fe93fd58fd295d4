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

#!/usr/bin/env bash
# Runs the upstream Gateway API conformance suite (sigs.k8s.io/gateway-api/conformance) against
# pier, in a network namespace of its own, on a control plane with no kubelet: etcd,
# kube-apiserver and kube-controller-manager (scripts/control-plane.sh), and pier's node agent
# (tests/node-agent), which schedules the suite's Pods and runs upstream's echo-basic for them,
# each in its own network namespace. See docs/src/conformance.md.
#
#   scripts/conformance.sh [run]    build what is missing, run the suite, tear everything down;
#                                   writes docs/conformance/report-v$GATEWAY_API_VERSION.yaml
#                                   (report-v$GATEWAY_API_VERSION-experimental.yaml for the
#                                   experimental channel)
#   scripts/conformance.sh build    only build (control plane, echo-basic, the suite, the node
#                                   agent, pier)
#   scripts/conformance.sh selftest the harness's own test: the node agent's `go test`, against
#                                   a real control plane inside a network namespace
#   scripts/conformance.sh up       start the cluster and pier, print how to reach it, and wait
#                                   (Ctrl-C tears down): for running single tests by hand
#   scripts/conformance.sh cluster  the same without pier
#
# Needs root (network namespaces), Go >= 1.21 (it fetches the Go 1.27 toolchain the suite needs,
# GOTOOLCHAIN=go1.27.3, from the Go module proxy) and cargo; installs iproute2, openssl, curl and
# util-linux with apt-get when missing (kubectl is built with the control plane). Builds go to
# ${PIER_CONFORMANCE_CACHE:-$HOME/.cache/pier/conformance}, outside the repository.
# Environment: PIER_CONFORMANCE_ARGS adds flags to the suite (e.g. "-run-test HTTPRouteSimpleSameNamespace"),
# PIER_CONFORMANCE_TIMEOUT bounds the suite (default 60m), PIER_CONFORMANCE_KEEP=1 keeps the
# run directory (logs) after a successful run (it is always kept after a failure).
# PIER_CONFORMANCE_CHANNEL=experimental installs the experimental-channel CRDs instead of the
# standard ones (the standard CRDs prune experimental fields such as HTTPRoute `retry`, so the
# tests of those features run only on this channel), e.g. just the retry test:
#   PIER_CONFORMANCE_CHANNEL=experimental PIER_CONFORMANCE_ARGS="-run-test HTTPRouteRetry \
#     -supported-features Gateway,HTTPRoute,HTTPRouteRetry" scripts/conformance.sh
# (-run-test turns off reading the supported features from the GatewayClass: name them.)
# PIER_CONFORMANCE_REPORT writes the report there instead (CI's partial runs).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

# Pinned: the newest release of the suite and its CRDs (v1.7.0, 2026-10-29).
GATEWAY_API_VERSION=${PIER_GATEWAY_API_VERSION:-1.7.0}
# v1.7's conformance module is Go 1.27 code: the go command fetches this toolchain itself.
export GOTOOLCHAIN=${PIER_CONFORMANCE_GOTOOLCHAIN:-go1.27.3}
# Since v1.7 echo-basic (the suite's backend, and the gRPC/TCP echo packages its tests import)
# lives in its own module. The suite's go.mod asks for v0.2.0, which the Go module proxy here
# does not serve; v0.1.0 is served and has every server and environment variable the v1.7
# manifests use (HTTP with succeedAfter/delayRetry, gRPC with TLS_SERVER_PRIV_KEY, TCP, UDP), so
# the wrapper module replaces the one with the other (docs/src/conformance.md).
ECHO_IMAGES_VERSION=${PIER_ECHO_IMAGES_VERSION:-0.1.0}
GATEWAY_CLASS=pier
CONTROLLER_NAME=pier.dev/gateway-controller

CACHE=${PIER_CONFORMANCE_CACHE:-$HOME/.cache/pier/conformance}
CACHE=$(realpath -m "$CACHE")
BIN_DIR=$CACHE/v$GATEWAY_API_VERSION
ECHO_BASIC=$BIN_DIR/echo-basic
SUITE=$BIN_DIR/conformance.test
# The CRD channel: standard (default) or experimental, each in a cache directory of its own.
CHANNEL=${PIER_CONFORMANCE_CHANNEL:-standard}
case "$CHANNEL" in
standard | experimental) ;;
*)
  echo "conformance: error: PIER_CONFORMANCE_CHANNEL must be standard or experimental, not $CHANNEL" >&2
  exit 2
  ;;
esac
CRD_DIR=$BIN_DIR/crd-$CHANNEL
AGENT=$CACHE/node-agent
# PIER_CONFORMANCE_BIN: run this pier binary instead of building target/release/pier.
PIER=${PIER_CONFORMANCE_BIN:-$REPO/target/release/pier}

# The run's network: Pods on a bridge in the harness namespace; the Gateway address on it too.
POD_CIDR=10.244.0.0/24
BRIDGE=pier0
GATEWAY_ADDRESS=10.244.1.1
# Every address of this range is local in the namespace (a `local` route on lo): room for one
# address per Gateway, which the suite's base Gateways (three HTTP listeners on port 80, no
# hostname) need.
GATEWAY_ADDRESS_POOL=10.244.1.0/24
APISERVER_PORT=6443
# The node agent test's own Node (tests/node-agent TestAgentLifecycle: bridge 10.246.0.0/24).
SELFTEST_NODE_IP=10.246.0.1

log() { printf 'conformance: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}
elapsed() { echo "$(($(date +%s) - $1))s"; }

ensure_tools() {
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, veth pairs, bind mounts)"
  command -v go >/dev/null || die "go is not on PATH (needs Go >= 1.26)"
  command -v cargo >/dev/null || die "cargo is not on PATH"
  local need=()
  command -v ip >/dev/null || need+=(iproute2)
  command -v openssl >/dev/null || need+=(openssl)
  command -v curl >/dev/null || need+=(curl)
  command -v setpriv >/dev/null && command -v flock >/dev/null || need+=(util-linux)
  command -v timeout >/dev/null || need+=(coreutils)
  if ((${#need[@]})); then
    log "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
  fi
}

go_env() {
  export GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build
  export GOFLAGS=-modcacherw GO111MODULE=on CGO_ENABLED=0
  GO=(nice -n "${PIER_GO_NICE:-10}" go)
}

# echo-basic and the suite, from a wrapper module: the conformance module's own go.mod
# replaces sigs.k8s.io/gateway-api with `../`, which only applies when it is the main module.
# WHAT: "echo" (echo-basic and the CRDs) or "all" (also the suite).
build_gateway_api() {
  local what=$1 src=$CACHE/src/gateway-api-v$GATEWAY_API_VERSION t0
  mkdir -p "$src" "$BIN_DIR"
  if [ -x "$ECHO_BASIC" ] && [ -f "$CRD_DIR/.complete" ] && { [ "$what" = echo ] || [ -x "$SUITE" ]; }; then
    return
  fi
  t0=$(date +%s)
  cat >"$src/go.mod" <<EOF
// Generated by pier's scripts/conformance.sh: builds the Gateway API conformance suite and echo-basic.
module example.invalid/pier-gateway-api-conformance

go 1.27.0

require (
	sigs.k8s.io/gateway-api v$GATEWAY_API_VERSION
	sigs.k8s.io/gateway-api/conformance v$GATEWAY_API_VERSION
	sigs.k8s.io/gateway-api-conformance-images v$ECHO_IMAGES_VERSION
)

replace sigs.k8s.io/gateway-api-conformance-images => sigs.k8s.io/gateway-api-conformance-images v$ECHO_IMAGES_VERSION
EOF
  cat >"$src/tools.go" <<'EOF'
//go:build tools

package tools

import (
	_ "sigs.k8s.io/gateway-api/conformance"
	_ "sigs.k8s.io/gateway-api-conformance-images/echo-basic"
)
EOF
  [ -f "$src/go.sum" ] || (cd "$src" && "${GO[@]}" mod tidy) || die "go mod tidy failed for the conformance wrapper"
  # The suite's test files import packages tidy does not see from here.
  (cd "$src" && "${GO[@]}" get -t "sigs.k8s.io/gateway-api/conformance@v$GATEWAY_API_VERSION") ||
    die "go get -t failed for the conformance suite"
  log "gateway-api v$GATEWAY_API_VERSION modules resolved in $(elapsed "$t0")"
  if ! [ -x "$ECHO_BASIC" ]; then
    t0=$(date +%s)
    (cd "$src" && "${GO[@]}" build -trimpath -o "$ECHO_BASIC.tmp" sigs.k8s.io/gateway-api-conformance-images/echo-basic) ||
      die "go build failed for echo-basic"
    mv -f "$ECHO_BASIC.tmp" "$ECHO_BASIC"
    log "echo-basic built in $(elapsed "$t0")"
  fi
  if [ "$what" = all ] && ! [ -x "$SUITE" ]; then
    t0=$(date +%s)
    (cd "$src" && "${GO[@]}" test -c -trimpath -o "$SUITE.tmp" sigs.k8s.io/gateway-api/conformance) ||
      die "go test -c failed for the conformance suite"
    mv -f "$SUITE.tmp" "$SUITE"
    log "conformance suite built in $(elapsed "$t0")"
  fi
  [ -f "$CRD_DIR/.complete" ] && return
  local dir
  dir=$(cd "$src" && go list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api) || die "no sigs.k8s.io/gateway-api module"
  rm -rf "$CRD_DIR"
  mkdir -p "$CRD_DIR"
  # The channel's manifests (not its kustomization.yaml, which is not an object to apply).
  cp "$dir"/config/crd/"$CHANNEL"/gateway.networking.*.yaml "$CRD_DIR/"
  chmod -R u+w "$CRD_DIR"
  touch "$CRD_DIR/.complete"
}

# Rebuilt every time (incremental: seconds), so edits to tests/node-agent are picked up.
build_agent() {
  local t0
  t0=$(date +%s)
  (cd tests/node-agent && "${GO[@]}" build -trimpath -o "$AGENT.tmp" .) || die "go build failed for the node agent"
  mv -f "$AGENT.tmp" "$AGENT"
  log "node agent built in $(elapsed "$t0")"
}

build_pier() {
  local t0
  if [ -n "${PIER_CONFORMANCE_BIN:-}" ]; then
    log "using $PIER_CONFORMANCE_BIN"
    return
  fi
  t0=$(date +%s)
  nice -n "${PIER_GO_NICE:-10}" cargo build --release --locked --bin pier >&2 || die "cargo build failed"
  log "pier built in $(elapsed "$t0")"
}

# ARG: "no-pier" builds neither pier nor the suite (selftest, cluster).
build() {
  ensure_tools
  eval "$(scripts/control-plane.sh build)"
  mkdir -p "$CACHE"
  go_env
  exec 8>"$CACHE/.lock"
  flock 8
  if [ "${1:-}" = no-pier ]; then build_gateway_api echo; else build_gateway_api all; fi
  build_agent
  flock -u 8
  [ "${1:-}" = no-pier ] || build_pier
}

# === the run ===

RUN=""
NS=""
PIDS=()          # every background process, in start order
declare -A PID=() # name -> pid

# Everything in the harness's network namespace, dying with this script.
in_ns() { ip netns exec "$NS" setpriv --pdeathsig KILL "$@"; }

start_bg() { # NAME CMD...: starts CMD in the namespace, logging to $RUN/NAME.log
  local name=$1
  shift
  # A simple command, so $! is the process itself (ip and setpriv exec it).
  ip netns exec "$NS" setpriv --pdeathsig KILL "$@" >"$RUN/$name.log" 2>&1 &
  PIDS+=("$!")
  PID[$name]=$!
}

teardown() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  log "tearing down"
  # Reverse order: pier and the agent first (the agent stops the Pods' processes and netns).
  local i pid
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    pid=${PIDS[i]}
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  if [ -n "$NS" ]; then
    # Pods the agent could not stop, then the harness namespace itself.
    for n in $(ip netns list 2>/dev/null | awk -v p="${NS}p-" 'index($1, p) == 1 { print $1 }'); do
      ip netns pids "$n" 2>/dev/null | xargs -r kill -KILL
      ip netns del "$n"
    done
    ip netns pids "$NS" 2>/dev/null | xargs -r kill -KILL
    ip netns del "$NS" 2>/dev/null
  fi
  if [ -n "$RUN" ]; then
    if [ "$rc" -eq 0 ] && [ "${PIER_CONFORMANCE_KEEP:-0}" != 1 ]; then
      rm -rf "$RUN"
    else
      log "logs kept in $RUN"
    fi
  fi
  exit "$rc"
}

wait_for() { # DESCRIPTION SECONDS CMD...: polls CMD every 0.5 s
  local what=$1 secs=$2 t0
  shift 2
  t0=$(date +%s)
  until "$@" >/dev/null 2>&1; do
    if (($(date +%s) - t0 >= secs)); then
      log "timed out after ${secs}s waiting for $what"
      return 1
    fi
    sleep 0.5
  done
  log "$what after $(elapsed "$t0")"
}

alive() { # NAME: fails (showing its log) if the process started as NAME has exited
  kill -0 "${PID[$1]}" 2>/dev/null && return 0
  log "$1 exited; last lines of $RUN/$1.log:"
  tail -n 30 "$RUN/$1.log" >&2
  return 1
}

make_pki() {
  local d=$RUN/pki
  mkdir -p "$d"
  (
    cd "$d"
    umask 077
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=pier-conformance-ca \
      -keyout ca.key -out ca.crt 2>/dev/null
    leaf() { # NAME SUBJ EXT
      openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
      printf '%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    }
    leaf serving /CN=kube-apiserver "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
    leaf admin "/O=system:masters/CN=pier-conformance-admin" "extendedKeyUsage=clientAuth"
    # The node agent's container log endpoint, as a kubelet's (the Node's InternalIP: the
    # bridge address here, the selftest's bridge address there), and the API server's client
    # certificate for it: `pods/log` (kubectl logs, the suite's mirror tests) goes
    # API server -> node agent, verified both ways.
    leaf kubelet /CN=system:node:pier-node "subjectAltName=IP:${POD_CIDR%.*}.1,IP:$SELFTEST_NODE_IP
extendedKeyUsage=serverAuth"
    leaf kubelet-client /CN=kube-apiserver-kubelet-client "extendedKeyUsage=clientAuth"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out sa.key 2>/dev/null
    openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
  )
  KUBECONFIG_ADMIN=$RUN/admin.kubeconfig
  cat >"$KUBECONFIG_ADMIN" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: conformance
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $d/ca.crt
users:
- name: admin
  user:
    client-certificate: $d/admin.crt
    client-key: $d/admin.key
contexts:
- name: conformance
  context: {cluster: conformance, user: admin}
current-context: conformance
EOF
}

# Discovery cache in the run directory, never in the user's ~/.kube.
kc() { in_ns "$PIER_KUBECTL" --kubeconfig "$KUBECONFIG_ADMIN" --cache-dir "$RUN/kube-cache" "$@"; }

# Polled by wait_for.
apiserver_ready() {
  kill -0 "${PID[kube-apiserver]}" && in_ns curl -fsS --max-time 2 --cacert "$RUN/pki/ca.crt" \
    --cert "$RUN/pki/admin.crt" --key "$RUN/pki/admin.key" "https://127.0.0.1:$APISERVER_PORT/readyz"
}
pier_ready() { kill -0 "${PID[pier]}" && in_ns curl -fsS --max-time 2 http://127.0.0.1:9901/readyz; }
condition_true() { # KIND NAME CONDITION
  [ "$(kc get "$1" "$2" -o jsonpath="{.status.conditions[?(@.type==\"$3\")].status}")" = True ]
}

# Network namespace, control plane, node agent. Sets RUN, NS, KUBECONFIG_ADMIN.
up_cluster() {
  local with_agent=$1
  RUN=$(mktemp -d /tmp/pier-conformance.XXXXXX)
  NS=pierconf$$
  trap teardown EXIT
  trap 'exit 130' INT TERM
  log "run directory $RUN, network namespace $NS"
  ip netns add "$NS"
  ip -n "$NS" link set lo up
  ip -n "$NS" link add "$BRIDGE" type bridge
  ip -n "$NS" addr add "${POD_CIDR%.*}.1/${POD_CIDR#*/}" dev "$BRIDGE"
  ip -n "$NS" addr add "$GATEWAY_ADDRESS/32" dev "$BRIDGE"
  ip -n "$NS" link set "$BRIDGE" up
  ip -n "$NS" route add local "$GATEWAY_ADDRESS_POOL" dev lo
  make_pki
  local t0
  t0=$(date +%s)
  start_bg etcd "$PIER_ETCD" --name=conformance --data-dir="$RUN/etcd" \
    --listen-client-urls=http://127.0.0.1:2379 --advertise-client-urls=http://127.0.0.1:2379 \
    --listen-peer-urls=http://127.0.0.1:2380 --initial-advertise-peer-urls=http://127.0.0.1:2380 \
    --initial-cluster=conformance=http://127.0.0.1:2380 --unsafe-no-fsync=true --log-level=warn
  start_bg kube-apiserver "$PIER_KUBE_APISERVER" --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
    --cert-dir="$RUN/apiserver-certs" --tls-cert-file="$RUN/pki/serving.crt" \
    --tls-private-key-file="$RUN/pki/serving.key" --client-ca-file="$RUN/pki/ca.crt" \
    --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-signing-key-file="$RUN/pki/sa.key" --service-account-key-file="$RUN/pki/sa.pub" \
    --service-cluster-ip-range=10.96.0.0/16 --endpoint-reconciler-type=none --allow-privileged=true \
    --feature-gates=ClusterTrustBundle=true \
    --runtime-config=certificates.k8s.io/v1beta1/clustertrustbundles=true \
    --kubelet-client-certificate="$RUN/pki/kubelet-client.crt" --kubelet-client-key="$RUN/pki/kubelet-client.key" \
    --kubelet-certificate-authority="$RUN/pki/ca.crt" --kubelet-preferred-address-types=InternalIP
  # ClusterTrustBundle as in tests/support/apiserver.rs: pier watches it (mesh trust bundles).
  wait_for "kube-apiserver ready" 120 apiserver_ready ||
    {
      alive etcd
      alive kube-apiserver
      die "kube-apiserver did not become ready"
    }
  # Without --secure-port=0 it would serve on 10257; nothing here scrapes it.
  start_bg kube-controller-manager "$PIER_KUBE_CONTROLLER_MANAGER" --kubeconfig="$KUBECONFIG_ADMIN" \
    --authentication-kubeconfig="$KUBECONFIG_ADMIN" --authorization-kubeconfig="$KUBECONFIG_ADMIN" \
    --controllers='*' --use-service-account-credentials=false --leader-elect=false \
    --service-account-private-key-file="$RUN/pki/sa.key" --root-ca-file="$RUN/pki/ca.crt" \
    --cluster-name=pier-conformance --bind-address=127.0.0.1 --secure-port=0 \
    --concurrent-deployment-syncs=10 --concurrent-replicaset-syncs=10 --concurrent-namespace-syncs=10
  # The ServiceAccount admission plugin is on: Pods wait for their namespace's `default`
  # ServiceAccount, which the controller manager creates.
  wait_for "default ServiceAccount" 120 kc get serviceaccount default -n default ||
    {
      alive kube-controller-manager
      die "kube-controller-manager did not create the default ServiceAccount"
    }
  if [ "$with_agent" = 1 ]; then
    start_bg node-agent "$AGENT" --kubeconfig="$KUBECONFIG_ADMIN" --echo-basic="$ECHO_BASIC" \
      --node-name=pier-node --pod-cidr="$POD_CIDR" --bridge="$BRIDGE" --netns-prefix="${NS}p-" \
      --state-dir="$RUN/node-agent" --kubelet-cert="$RUN/pki/kubelet.crt" --kubelet-key="$RUN/pki/kubelet.key" \
      --kubelet-client-ca="$RUN/pki/ca.crt"
    wait_for "node Ready" 60 condition_true node pier-node Ready ||
      {
        alive node-agent
        die "the node agent did not register a Ready node"
      }
  fi
  log "cluster up in $(elapsed "$t0")"
}

install_crds() {
  local t0
  t0=$(date +%s)
  kc apply --server-side -f "$CRD_DIR" >&2
  kc wait --for condition=Established --timeout=60s crd --all >&2
  log "Gateway API v$GATEWAY_API_VERSION $CHANNEL CRDs installed in $(elapsed "$t0")"
  kc apply --server-side -f - >&2 <<EOF
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: $GATEWAY_CLASS
spec:
  controllerName: $CONTROLLER_NAME
---
apiVersion: v1
kind: Namespace
metadata:
  name: pier-system
EOF
}

start_pier() {
  # Cluster mode as a user runs it; listeners bind inside the namespace only.
  # Each Gateway gets an address of its own from 10.244.1.0/24 (bindable in the namespace).
  start_bg pier "$PIER" run --kubeconfig "$KUBECONFIG_ADMIN" --listen-host 0.0.0.0 --admin 127.0.0.1:9901 \
    --gateway-address-pool 10.244.1.0/24
  wait_for "pier ready" 60 pier_ready ||
    {
      alive pier
      die "pier did not become ready"
    }
  wait_for "GatewayClass $GATEWAY_CLASS Accepted" 60 condition_true gatewayclass "$GATEWAY_CLASS" Accepted ||
    log "GatewayClass $GATEWAY_CLASS not Accepted by pier (continuing: the suite reports it)"
}

# Tests to skip: none. (The three mirror tests read the mirror backends' Pod logs through
# the API server's pods/log, which the node agent serves as a kubelet does; since v1.7
# HTTPRoute `retry` is in the standard CRDs, so the retry tests run on both channels.)
SKIP_TESTS=${PIER_CONFORMANCE_SKIP:-}

# The report's implementation fields. pier has no public repository or issue tracker yet, so
# nothing here invents one: the contact is the maintainers' role (upstream's report schema takes
# any list of strings), and the url, which the suite (v1.7) requires to be an absolute http(s)
# URL with a host, is the reserved `.invalid` name (RFC 2606) until pier has a public home: set
# PIER_CONFORMANCE_URL (and PIER_CONFORMANCE_CONTACT) to it before submitting a report upstream.
REPORT_CONTACT=${PIER_CONFORMANCE_CONTACT:-pier maintainers}
REPORT_URL=${PIER_CONFORMANCE_URL:-https://pier.invalid/}

run_suite() {
  mkdir -p "$REPO/docs/conformance"
  local report=$REPO/docs/conformance/report-v$GATEWAY_API_VERSION.yaml t0 rc=0
  [ "$CHANNEL" = standard ] || report=${report%.yaml}-$CHANNEL.yaml
  report=${PIER_CONFORMANCE_REPORT:-$report}
  local version
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
  # GatewayStaticAddresses: a usable address (a free one of the Gateway address pool; pier
  # hands no pool address that a Gateway names to another Gateway) and an unusable one
  # (outside the pool). Flags override the file's other fields.
  cat >"$RUN/options.yaml" <<EOF
usableNetworkAddresses:
- type: IPAddress
  value: ${GATEWAY_ADDRESS_POOL%.*}.200
unusableNetworkAddresses:
- type: IPAddress
  value: 10.244.2.1
EOF
  t0=$(date +%s)
  log "running the suite (bounded by ${PIER_CONFORMANCE_TIMEOUT:-60m}); log: $RUN/suite.log"
  # shellcheck disable=SC2086 # PIER_CONFORMANCE_ARGS is a list of flags
  (cd "$RUN" && KUBECONFIG=$KUBECONFIG_ADMIN timeout --kill-after=30s "${PIER_CONFORMANCE_TIMEOUT:-60m}" \
    ip netns exec "$NS" setpriv --pdeathsig KILL "$SUITE" -test.run '^TestConformance$' -test.v \
    -test.timeout "${PIER_CONFORMANCE_TIMEOUT:-60m}" \
    -gateway-class "$GATEWAY_CLASS" -conformance-profiles "${PIER_CONFORMANCE_PROFILES:-GATEWAY-HTTP,GATEWAY-GRPC,GATEWAY-TLS,GATEWAY-TCP,GATEWAY-UDP}" \
    -organization pier -project pier -url "$REPORT_URL" -version "v$version" \
    -contact "$REPORT_CONTACT" -report-output "$report" -conformance-options-file "$RUN/options.yaml" \
    -skip-tests "$SKIP_TESTS" ${PIER_CONFORMANCE_ARGS:-} 2>&1 | tee "$RUN/suite.log" >&2) || rc=$?
  log "suite finished in $(elapsed "$t0") with exit code $rc"
  if [ -f "$report" ]; then log "report: $report"; else log "no report written"; fi
  return "$rc"
}

selftest() {
  build no-pier
  local testbin=$CACHE/node-agent.test
  (cd tests/node-agent && "${GO[@]}" test -c -o "$testbin" .) || die "go test -c failed for the node agent"
  up_cluster 0
  log "node agent test (inside $NS)"
  PIER_NODE_AGENT_KUBECONFIG=$KUBECONFIG_ADMIN PIER_ECHO_BASIC=$ECHO_BASIC \
    PIER_NODE_AGENT_KUBELET_CERT=$RUN/pki/kubelet.crt PIER_NODE_AGENT_KUBELET_KEY=$RUN/pki/kubelet.key \
    PIER_NODE_AGENT_KUBELET_CLIENT_CA=$RUN/pki/ca.crt \
    timeout 300 ip netns exec "$NS" "$testbin" -test.v -test.timeout 280s
}

case "${1:-run}" in
build) build ;;
selftest) selftest ;;
run)
  build
  up_cluster 1
  install_crds
  start_pier
  run_suite
  ;;
cluster)
  build no-pier
  up_cluster 1
  log "cluster up (no pier): KUBECONFIG=$KUBECONFIG_ADMIN; run commands inside with: ip netns exec $NS ...; Ctrl-C tears down"
  while alive node-agent; do sleep 5; done
  ;;
up)
  build
  up_cluster 1
  install_crds
  start_pier
  log "up: KUBECONFIG=$KUBECONFIG_ADMIN; run commands inside with: ip netns exec $NS ...; Ctrl-C tears down"
  while alive pier && alive node-agent; do sleep 5; done
  ;;
*)
  sed -n '2,32p' "$0" >&2
  exit 2
  ;;
esac

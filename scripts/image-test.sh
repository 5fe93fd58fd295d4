#!/usr/bin/env bash
# pier's container image as a user runs it (CI runs this after scripts/package-test.sh, as
# root, reusing its binary): builds the image with podman from the stripped binary of the .deb
# (no registry, no second release build), then runs it twice, each time --read-only, with no
# capabilities and as its own user (uid 65532):
#
#  0. the manual's "Run the container" command (docs/src/operations/container.md): `pier demo`
#     in the container (its echo backends inside too), a request through the published port
#     must reach echo-a.
#  1. standalone: the quickstart manifests mounted at the default CMD's directory, the
#     container's port 8080 published on loopback, the three echo backends in containers of
#     the same image sharing its network namespace; requests through the published port must
#     reach the backend each route names.
#  2. cluster mode: `pier run --kubeconfig` against a real etcd + kube-apiserver
#     (scripts/control-plane.sh's binaries) in a network namespace this script creates, with
#     the least-privilege kubeconfig of config/rbac/make-kubeconfig.sh; pier must become
#     ready, serve a Gateway it read from the API server (a request reaches the backend) and
#     write that Gateway's status (Programmed=True).
#
# Then it removes its containers, the network namespace, the processes, its files and the
# image. Needs root (network namespaces, podman's storage); installs podman, runc,
# slirp4netns, openssl, curl, iproute2 with apt-get if missing.
#
# Which podman configuration runs here: `podman run` is tried with the defaults first. Where
# that fails (this CI's sandbox: no CAP_SYS_RESOURCE even for root, and a cgroup v1/v2 hybrid
# that crun refuses) it runs with runc and explicit --ulimit values no higher than podman's
# own limits; see docs/src/operations/container.md for why. Environment: PIER_IMAGE_BINARY
# (default: the newest target/deb/pier_*.deb if newer than target/dist/pier, else
# target/dist/pier).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
t_start=$(date +%s)
[ "$(id -u)" -eq 0 ] || { echo "image-test: needs root (network namespaces, podman storage)" >&2; exit 1; }
log() { printf 'image-test: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
command -v slirp4netns >/dev/null || need+=(slirp4netns)
command -v openssl >/dev/null || need+=(openssl)
command -v curl >/dev/null || need+=(curl)
command -v ip >/dev/null || need+=(iproute2)
command -v objcopy >/dev/null || need+=(binutils)
if ((${#need[@]})); then
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

# The binary: the package's (scripts/package-test.sh just built it) when it is current.
bin=${PIER_IMAGE_BINARY:-}
if [ -z "$bin" ]; then
  deb=$(ls -t target/deb/pier_*.deb 2>/dev/null | head -1 || true)
  if [ -n "$deb" ] && [ -f target/dist/pier ] && [ "$deb" -nt target/dist/pier ]; then
    bin=$deb
  else
    [ -x target/dist/pier ] || cargo build --profile dist --locked
    bin=target/dist/pier
  fi
fi

# Everything this run makes is named after it, so cleanup touches nothing else.
id=pier-image-test-$$
IMAGE=localhost/$id:latest
NS=pierimg$$
RUN=$(mktemp -d "/tmp/$id.XXXXXX")
declare -A PID=()
cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    for c in $(podman ps -a --filter "name=^$id-" --format '{{.Names}}' 2>/dev/null); do
      log "logs of $c:"
      podman logs --tail 30 "$c" >&2 2>&1 || true
    done
    for f in "$RUN"/*.log; do [ -f "$f" ] && { log "tail of $f:"; tail -20 "$f" >&2; }; done
  fi
  podman ps -a --filter "name=^$id-" --format '{{.Names}}' 2>/dev/null |
    xargs -r podman rm -f --depend -t 2 >/dev/null 2>&1 || true
  # SIGKILL: kube-apiserver's graceful shutdown can wait minutes on an etcd already gone.
  for p in "${PID[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${PID[@]}"; do wait "$p" 2>/dev/null || true; done
  ip netns del "$NS" 2>/dev/null || true
  podman image unmount "$IMAGE" >/dev/null 2>&1 || true
  podman rmi -f "$IMAGE" >/dev/null 2>&1 || true
  rm -rf "$RUN"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_for() { # DESCRIPTION SECONDS CMD...: polls CMD every 0.25 s
  local what=$1 n=$(($2 * 4))
  shift 2
  for _ in $(seq "$n"); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.25
  done
  die "timed out waiting for $what"
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# ANSWER EXPECTED_BACKEND: the echo backend's JSON names the backend that answered.
expect_backend() {
  local body=$1 want=$2
  printf '%s' "$body" | grep -q "\"backend\":\"$want\"" || die "expected an answer from $want, got: ${body:-nothing}"
}

# --- build -----------------------------------------------------------------------------------
t0=$(date +%s)
scripts/image-build.sh "$bin" "$IMAGE" >/dev/null
t_build=$(($(date +%s) - t0))
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
# The budget: the stripped binary is ~40 MB (2026-11-30; 57 MB before manifests were decoded
# from one tree, src/translate/manifest/tree.rs), glibc and CA roots ~3.5 MB. 50 MB catches an
# unstripped binary (~240 MB) or a base image sneaking in; a binary that outgrows it is a
# regression to find (BENCHMARKS.md, "package and image"), not a budget to raise.
budget=$((50 * 1000 * 1000))
((size <= budget)) || die "image is $size bytes, over its budget of $budget"
# The image's metadata as the Dockerfile sets it.
test "$(podman image inspect --format '{{.Config.User}}' "$IMAGE")" = 65532:65532 || die "image user is not 65532:65532"
podman image inspect --format '{{json .Config.Entrypoint}}' "$IMAGE" | grep -qx '\["/usr/local/bin/pier"\]' ||
  die "unexpected ENTRYPOINT"
log "built $IMAGE from $bin in ${t_build}s: $size bytes (budget $budget)"
# Its root filesystem: what pier needs and nothing to log in or shell out with.
root=$(podman image mount "$IMAGE")
grep -qx 'pier:x:65532:65532:pier:/nonexistent:/usr/sbin/nologin' "$root/etc/passwd" || die "no pier entry in /etc/passwd"
grep -q 'BEGIN CERTIFICATE' "$root/etc/ssl/certs/ca-certificates.crt" || die "no CA roots"
[ ! -e "$root/bin/sh" ] && [ ! -e "$root/usr/bin/sh" ] || die "the image has a shell"
! readelf -S "$root/usr/local/bin/pier" | grep -q '\.debug_info' || die "the image's binary has debug symbols"
podman image unmount "$IMAGE" >/dev/null

# --- a podman configuration that runs here -----------------------------------------------------
# Podman asks the runtime for RLIMIT_NOFILE and RLIMIT_NPROC of 1048576 (or what --ulimit
# says); raising a hard limit needs CAP_SYS_RESOURCE. Where root lacks it, ask for no more than
# podman holds itself: its hard RLIMIT_NOFILE is ours (it fails to raise it), its RLIMIT_NPROC
# it has lowered to kernel.pid_max when that is smaller (measured: 32768 here, below our 96364).
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
pid_max=$(cat /proc/sys/kernel/pid_max)
[ "$nproc" = unlimited ] || ((nproc <= pid_max)) || nproc=$pid_max
[ "$nproc" != unlimited ] || nproc=$pid_max
[ "$nofile" != unlimited ] || nofile=1048576
RUNTIME=()
if podman run --rm "$IMAGE" --version >"$RUN/probe.log" 2>&1; then
  log "podman run works with its defaults"
else
  log "podman run with its defaults failed: $(tail -1 "$RUN/probe.log")"
  RUNTIME=(--runtime runc --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
  podman run --rm "${RUNTIME[@]}" "$IMAGE" --version >"$RUN/probe.log" 2>&1 ||
    die "podman run fails with ${RUNTIME[*]} too: $(tail -1 "$RUN/probe.log") (docs/src/operations/container.md)"
  log "podman run works with ${RUNTIME[*]}"
fi
grep -q "^pier " "$RUN/probe.log" || die "pier --version in the container printed: $(cat "$RUN/probe.log")"
# Every container: a read-only root filesystem, no capabilities, no privilege gain.
HARDEN=(--read-only --cap-drop=all --security-opt=no-new-privileges)

# --- 0. the manual's command: the demo ----------------------------------------------------------
# As docs/src/operations/container.md "Run the container" gives it, with a free host port and
# the runtime options found above. podman's --read-only mounts a tmpfs on /tmp, where the demo
# writes its manifests.
t0=$(date +%s)
port=$(free_port)
podman run -d --name "$id-demo" "${RUNTIME[@]}" --read-only --network slirp4netns \
  -p "127.0.0.1:$port:8080" "$IMAGE" demo --listen-host 0.0.0.0 >/dev/null
demo_a() { curl -fsS --max-time 2 "http://127.0.0.1:$port/a" | grep -q '"backend":"echo-a"'; }
wait_for "the demo to answer /a from echo-a" 30 demo_a
podman rm -f -t 5 "$id-demo" >/dev/null
log "the README's demo command served /a from echo-a in $(($(date +%s) - t0))s"

# --- 1. standalone: the quickstart ---------------------------------------------------------------
t0=$(date +%s)
port=$(free_port)
admin=$(free_port)
# slirp4netns: a network namespace of the container's own, reached only through the ports
# published on 127.0.0.1, with no bridge or firewall rule added to the host.
podman run -d --name "$id-qs" "${RUNTIME[@]}" "${HARDEN[@]}" --network slirp4netns \
  -p "127.0.0.1:$port:8080" -p "127.0.0.1:$admin:9901" \
  -v "$REPO/config/examples/quickstart:/etc/pier/manifests:ro" "$IMAGE" >/dev/null
# The quickstart's backends: echo servers on the loopback of the same network namespace.
for n in 1 2 3; do
  name=echo-$(echo abc | cut -c$n)
  podman run -d --name "$id-$name" "${RUNTIME[@]}" "${HARDEN[@]}" --network "container:$id-qs" \
    "$IMAGE" echo --listen "127.0.0.1:1808$n" --name "$name" >/dev/null
done
wait_for "the quickstart to be ready" 30 curl -fsS "http://127.0.0.1:$admin/readyz"
expect_backend "$(curl -sS --max-time 5 "http://127.0.0.1:$port/a")" echo-a
body=$(curl -sS --max-time 5 "http://127.0.0.1:$port/b")
expect_backend "$body" echo-b
printf '%s' "$body" | grep -q '"x-demo":\["added-by-pier"\]' || die "the /b route did not add x-demo: $body"
expect_backend "$(curl -sS --max-time 5 -H 'host: c.example.com' "http://127.0.0.1:$port/")" echo-c
# The process is pier, as uid 65532, not root.
test "$(podman top "$id-qs" huser | tail -1 | tr -d ' ')" = 65532 || die "pier does not run as uid 65532"
# --depend: the echo containers share its network namespace and go first.
podman rm -f --depend -t 5 "$id-qs" >/dev/null
t_qs=$(($(date +%s) - t0))
log "standalone: the quickstart served through the published port in ${t_qs}s"

# --- 2. cluster mode -----------------------------------------------------------------------------
t0=$(date +%s)
eval "$(scripts/control-plane.sh build)" # PIER_KUBE_APISERVER, PIER_ETCD, PIER_KUBECTL
ip netns add "$NS"
ip -n "$NS" link set lo up
# The backend's address: EndpointSlices may not hold loopback addresses (API validation).
ip -n "$NS" addr add 192.0.2.10/32 dev lo
in_ns() { ip netns exec "$NS" "$@"; }
bg() { # NAME CMD...: in the namespace, dies with this script, log in $RUN/NAME.log
  local name=$1
  shift
  ip netns exec "$NS" setpriv --pdeathsig KILL "$@" >"$RUN/$name.log" 2>&1 &
  PID[$name]=$!
}
pki=$RUN/pki
mkdir -p "$pki"
(
  cd "$pki"
  umask 077
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=pier-image-test-ca \
    -keyout ca.key -out ca.crt 2>/dev/null
  leaf() { # NAME SUBJECT EXTENSIONS
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
    printf '%b\n' "$3" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  }
  leaf serving /CN=kube-apiserver 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth'
  leaf admin /O=system:masters/CN=pier-image-test-admin extendedKeyUsage=clientAuth
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out sa.key 2>/dev/null
  openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
)
admin_kc=$RUN/admin.kubeconfig
cat >"$admin_kc" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "https://127.0.0.1:6443", certificate-authority: $pki/ca.crt}}]
users: [{name: admin, user: {client-certificate: $pki/admin.crt, client-key: $pki/admin.key}}]
contexts: [{name: test, context: {cluster: test, user: admin}}]
current-context: test
EOF
bg etcd "$PIER_ETCD" --name=image-test --data-dir="$RUN/etcd" \
  --listen-client-urls=http://127.0.0.1:2379 --advertise-client-urls=http://127.0.0.1:2379 \
  --listen-peer-urls=http://127.0.0.1:2380 --initial-advertise-peer-urls=http://127.0.0.1:2380 \
  --initial-cluster=image-test=http://127.0.0.1:2380 --unsafe-no-fsync=true --log-level=warn
# As tests/support/apiserver.rs starts it: RBAC on, no controller-manager, ClusterTrustBundle
# served (pier watches it).
bg kube-apiserver "$PIER_KUBE_APISERVER" --etcd-servers=http://127.0.0.1:2379 \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=6443 \
  --cert-dir="$RUN/apiserver-certs" --tls-cert-file="$pki/serving.crt" \
  --tls-private-key-file="$pki/serving.key" --client-ca-file="$pki/ca.crt" --authorization-mode=RBAC \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-signing-key-file="$pki/sa.key" --service-account-key-file="$pki/sa.pub" \
  --service-cluster-ip-range=10.0.0.0/24 --disable-admission-plugins=ServiceAccount \
  --endpoint-reconciler-type=none --feature-gates=ClusterTrustBundle=true \
  --runtime-config=certificates.k8s.io/v1beta1/clustertrustbundles=true
kc() { in_ns "$PIER_KUBECTL" --kubeconfig "$admin_kc" --cache-dir "$RUN/kube-cache" "$@"; }
wait_for "kube-apiserver" 120 in_ns curl -fsS --max-time 2 --cacert "$pki/ca.crt" \
  --cert "$pki/admin.crt" --key "$pki/admin.key" https://127.0.0.1:6443/readyz
wait_for "the default namespace" 60 kc get namespace default
kc apply --server-side -f config/crds/ >/dev/null
kc wait --for condition=Established --timeout=60s crd --all >/dev/null
# pier's identity as an operator makes it: config/rbac and a TokenRequest token.
kc apply -f config/rbac/ >/dev/null
kubectl_dir=$RUN/kubectl-bin
mkdir -p "$kubectl_dir"
ln -s "$PIER_KUBECTL" "$kubectl_dir/kubectl"
pier_kc=$RUN/pier.kubeconfig
in_ns env PATH="$kubectl_dir:$PATH" KUBECONFIG="$admin_kc" KUBECACHEDIR="$RUN/kube-cache" \
  config/rbac/make-kubeconfig.sh -o "$pier_kc" -d 1h 2>/dev/null
# The container's user reads it through a read-only bind mount.
chown 65532:65532 "$pier_kc"
kc apply -f - >/dev/null <<'EOF'
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pier}
spec: {controllerName: pier.dev/gateway-controller}
---
apiVersion: v1
kind: Namespace
metadata: {name: edge}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: edge}
spec:
  gatewayClassName: pier
  listeners: [{name: http, protocol: HTTP, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: edge}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: edge, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 18081}]
endpoints: [{addresses: ["192.0.2.10"], conditions: {ready: true}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: edge}
spec:
  parentRefs: [{name: edge}]
  rules: [{backendRefs: [{name: web, port: 80}]}]
EOF
# Both containers join the namespace: the API server is 127.0.0.1:6443 for them as for kubectl.
podman run -d --name "$id-cluster-echo" "${RUNTIME[@]}" "${HARDEN[@]}" --network "ns:/run/netns/$NS" \
  "$IMAGE" echo --listen 192.0.2.10:18081 --name in-cluster >/dev/null
podman run -d --name "$id-cluster" "${RUNTIME[@]}" "${HARDEN[@]}" --network "ns:/run/netns/$NS" \
  -v "$pier_kc:/etc/pier/kubeconfig:ro" \
  "$IMAGE" run --kubeconfig /etc/pier/kubeconfig --admin 127.0.0.1:9901 >/dev/null
wait_for "pier (cluster mode) to be ready" 60 in_ns curl -fsS --max-time 2 http://127.0.0.1:9901/readyz
expect_backend "$(in_ns curl -sS --max-time 5 http://127.0.0.1:8080/)" in-cluster
programmed() {
  [ "$(kc -n edge get gateway edge -o 'jsonpath={.status.conditions[?(@.type=="Programmed")].status}')" = True ]
}
wait_for "Gateway edge/edge Programmed=True (status written by pier)" 30 programmed
podman logs "$id-cluster" >"$RUN/pier-cluster.log" 2>&1
grep -q "ready" "$RUN/pier-cluster.log" || die "no ready line in pier's log"
t_cluster=$(($(date +%s) - t0))
log "cluster mode: ready, served a Gateway from the API server and wrote its status in ${t_cluster}s"

log "passed in $(($(date +%s) - t_start))s (build ${t_build}s, standalone ${t_qs}s, cluster ${t_cluster}s)"

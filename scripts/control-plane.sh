#!/usr/bin/env bash
# Builds a real kube-apiserver, kube-controller-manager, kubectl and etcd for pier's cluster-mode
# tests and the conformance harness (scripts/conformance.sh), from the Go module proxy. kubectl
# comes from the same k8s.io/kubernetes module: Debian has no kubectl package (its
# kubernetes-client is too old for `kubectl create token`).
#
#   scripts/control-plane.sh build   build into the cache unless already there; print the paths
#   scripts/control-plane.sh env     print the paths, failing if they have not been built
#
# Both print `export PIER_KUBE_APISERVER=...` / `export PIER_KUBE_CONTROLLER_MANAGER=...` /
# `export PIER_KUBECTL=...` / `export PIER_ETCD=...` on stdout (logs go to stderr), so callers can
# `eval "$(scripts/control-plane.sh build)"`.
#
# Binaries land in ${PIER_CONTROL_PLANE_CACHE:-$HOME/.cache/pier/control-plane}/v$KUBE_VERSION/,
# outside the repository. The same cache holds the generated wrapper modules (src/) and, while
# building, a private Go module and build cache (go/, ~3.4 GB). go/ is deleted after a
# successful build unless PIER_CONTROL_PLANE_KEEP_GO_CACHE=1: the binaries are what is reused.
# `rm -rf` of the cache directory undoes everything.
# See docs/src/control-plane.md for why it is done this way and what it costs.
set -euo pipefail

# Pinned versions. tests/support/apiserver.rs reads KUBE_VERSION from this line to find the
# cache directory: keep the `KUBE_VERSION=${PIER_KUBE_VERSION:-X.Y.Z}` shape.
KUBE_VERSION=${PIER_KUBE_VERSION:-1.36.4}
ETCD_VERSION=${PIER_ETCD_VERSION:-3.6.16}

CACHE=${PIER_CONTROL_PLANE_CACHE:-$HOME/.cache/pier/control-plane}
CACHE=$(realpath -m "$CACHE") # absolute: the build runs from the wrapper module's directory
BIN_DIR=$CACHE/v$KUBE_VERSION
APISERVER=$BIN_DIR/kube-apiserver
CONTROLLER_MANAGER=$BIN_DIR/kube-controller-manager
KUBECTL=$BIN_DIR/kubectl
ETCD=$BIN_DIR/etcd

log() { printf 'control-plane: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

print_env() {
  printf 'export PIER_KUBE_APISERVER=%q\n' "$APISERVER"
  printf 'export PIER_KUBE_CONTROLLER_MANAGER=%q\n' "$CONTROLLER_MANAGER"
  printf 'export PIER_KUBECTL=%q\n' "$KUBECTL"
  printf 'export PIER_ETCD=%q\n' "$ETCD"
}

# A binary counts as present only if it runs and reports the pinned version. Not `grep -q`:
# it exits at the first match, and under pipefail the binary's SIGPIPE (etcd prints more lines
# after its version) would fail the check at random.
kube_ok() { [ -x "$1" ] && "$1" --version 2>/dev/null | grep -x "Kubernetes v$KUBE_VERSION" >/dev/null; }
apiserver_ok() { kube_ok "$APISERVER"; }
controller_manager_ok() { kube_ok "$CONTROLLER_MANAGER"; }
kubectl_ok() {
  [ -x "$KUBECTL" ] && "$KUBECTL" version --client 2>/dev/null | grep -x "Client Version: v$KUBE_VERSION" >/dev/null
}
kube_all_ok() { apiserver_ok && controller_manager_ok && kubectl_ok; }
etcd_ok() { [ -x "$ETCD" ] && "$ETCD" --version 2>/dev/null | grep -x "etcd Version: $ETCD_VERSION" >/dev/null; }

go_env() {
  command -v go >/dev/null || die "go is not on PATH (needs Go >= 1.26.0)"
  # A private module and build cache: measurable, and removable with the rest of the cache.
  export GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build
  # Never fetch another toolchain: fail loudly if a dependency needs a newer Go.
  export GOTOOLCHAIN=local
  # Static binaries, as upstream builds them (kube-apiserver is in KUBE_STATIC_BINARIES).
  export CGO_ENABLED=0
  # Module cache files are read-only by default, which makes `rm -rf` of the cache fail.
  export GOFLAGS=-modcacherw
  export GO111MODULE=on
  # nice: the build takes minutes on two cores shared with other work.
  GO=(nice -n "${PIER_GO_NICE:-10}" go)
}

elapsed() { echo "$(($(date +%s) - $1))s"; }

# The staging modules (k8s.io/api, k8s.io/client-go, ...) are required by k8s.io/kubernetes at
# the placeholder v0.0.0 and replaced with ./staging/src/... paths, which only apply when
# k8s.io/kubernetes is the main module. A consumer must replace each with its published
# v0.X.Y tag. The list changes between minor releases, so read it from the tagged go.mod.
staging_modules() {
  local gomod=$1
  awk '$2 == "=>" && $3 ~ /^\.\/staging\/src\// { print $1 }' "$gomod"
}

# One wrapper module for the kube binaries: they share the module graph and the build cache,
# so each build after the first only compiles what the others did not.
KUBE_CMDS=(kube-apiserver kube-controller-manager kubectl)

build_kube() {
  local src=$CACHE/src/kube-v$KUBE_VERSION t0
  local staging_version=0.${KUBE_VERSION#1.}
  local minor
  minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
  mkdir -p "$src"
  t0=$(date +%s)
  log "downloading k8s.io/kubernetes@v$KUBE_VERSION"
  local json gomod
  # Run outside any module (no go.mod in $src yet), so this only fetches.
  rm -f "$src/go.mod" "$src/go.sum"
  json=$(cd "$src" && "${GO[@]}" mod download -json "k8s.io/kubernetes@v$KUBE_VERSION") ||
    die "could not download k8s.io/kubernetes@v$KUBE_VERSION: $(echo "$json" | grep '"Error"')"
  gomod=$(echo "$json" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
  [ -f "$gomod" ] || die "no go.mod for k8s.io/kubernetes@v$KUBE_VERSION in: $json"
  local mods
  mods=$(staging_modules "$gomod")
  [ -n "$mods" ] || die "no staging replaces found in $gomod"
  log "$(echo "$mods" | wc -l) staging modules, replaced at v$staging_version"

  # The go directive of the main module sets the binary's GODEBUG defaults: match upstream's.
  local upstream_go
  upstream_go=$(awk '$1 == "go" { print $2; exit }' "$gomod")
  {
    echo "// Generated by pier's scripts/control-plane.sh: a wrapper that builds ${KUBE_CMDS[*]}."
    echo "module example.invalid/pier-kube"
    echo
    echo "go $upstream_go"
    grep '^godebug ' "$gomod" || true
    echo
    echo "require k8s.io/kubernetes v$KUBE_VERSION"
    echo
    echo "replace ("
    for m in $mods; do printf '\t%s => %s v%s\n' "$m" "$m" "$staging_version"; done
    echo ")"
  } >"$src/go.mod"
  # Keeps the main packages (and so their dependencies) in the module graph for `go mod tidy`.
  {
    echo "//go:build tools"
    echo
    echo "package tools"
    echo
    echo "import ("
    for c in "${KUBE_CMDS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
    echo ")"
  } >"$src/tools.go"
  (cd "$src" && "${GO[@]}" mod tidy) || die "go mod tidy failed for the kube wrapper"
  log "kube modules resolved in $(elapsed "$t0")"

  # Version stamping as hack/lib/version.sh does; without it /version says v0.0.0-master.
  local ldflags="-s -w" p date c
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=v$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=$date"
  done
  for c in "${KUBE_CMDS[@]}"; do
    case $c in
    kubectl) kubectl_ok && continue ;;
    *) kube_ok "$BIN_DIR/$c" && continue ;;
    esac
    t0=$(date +%s)
    log "building $c v$KUBE_VERSION (takes several minutes)"
    (cd "$src" && "${GO[@]}" build -trimpath -ldflags "$ldflags" -o "$BIN_DIR/$c.tmp" \
      "k8s.io/kubernetes/cmd/$c") || die "go build failed for $c"
    mv -f "$BIN_DIR/$c.tmp" "$BIN_DIR/$c"
    log "$c built in $(elapsed "$t0")"
  done
}

build_etcd() {
  local src=$CACHE/src/etcd-v$ETCD_VERSION t0
  mkdir -p "$src"
  t0=$(date +%s)
  # The etcd server's `main` package is the root of module go.etcd.io/etcd/server/v3. Its
  # go.mod has relative replaces, so `go install ...@v3.6.N` refuses it; from a wrapper module
  # those replaces are ignored and the sibling modules resolve at their published tags.
  # A separate wrapper from kube-apiserver's, so MVS doesn't move kube's etcd client.
  cat >"$src/go.mod" <<EOF
// Generated by pier's scripts/control-plane.sh: a wrapper that builds etcd.
module example.invalid/pier-etcd

go 1.26.0

require go.etcd.io/etcd/server/v3 v$ETCD_VERSION
EOF
  cat >"$src/tools.go" <<'EOF'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
EOF
  rm -f "$src/go.sum"
  (cd "$src" && "${GO[@]}" mod tidy) || die "go mod tidy failed for etcd"
  log "etcd modules resolved in $(elapsed "$t0")"
  t0=$(date +%s)
  log "building etcd v$ETCD_VERSION"
  (cd "$src" && "${GO[@]}" build -trimpath -ldflags "-s -w" -o "$ETCD.tmp" go.etcd.io/etcd/server/v3) ||
    die "go build failed for etcd"
  mv -f "$ETCD.tmp" "$ETCD"
  log "etcd built in $(elapsed "$t0")"
}

build() {
  mkdir -p "$BIN_DIR"
  # Serialise concurrent builds (two worktrees running their tests at once).
  exec 9>"$CACHE/.lock"
  flock 9
  if kube_all_ok && etcd_ok; then
    log "up to date: $BIN_DIR"
  else
    go_env
    local t0
    t0=$(date +%s)
    kube_all_ok || build_kube
    etcd_ok || build_etcd
    apiserver_ok || die "$APISERVER does not report Kubernetes v$KUBE_VERSION"
    controller_manager_ok || die "$CONTROLLER_MANAGER does not report Kubernetes v$KUBE_VERSION"
    kubectl_ok || die "$KUBECTL does not report Client Version: v$KUBE_VERSION"
    etcd_ok || die "$ETCD does not report etcd Version: $ETCD_VERSION"
    log "done in $(elapsed "$t0"): $BIN_DIR"
    if [ "${PIER_CONTROL_PLANE_KEEP_GO_CACHE:-0}" != 1 ]; then
      log "removing the Go module and build cache ($(du -sh "$CACHE/go" | cut -f1))"
      rm -rf "$CACHE/go"
    fi
  fi
  print_env
}

case "${1:-}" in
build) build ;;
env)
  if ! kube_all_ok || ! etcd_ok; then
    die "no control plane in $BIN_DIR: run scripts/control-plane.sh build"
  fi
  print_env
  ;;
*)
  echo "usage: $0 build|env" >&2
  exit 2
  ;;
esac

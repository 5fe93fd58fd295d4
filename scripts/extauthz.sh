#!/usr/bin/env bash
# Builds pier's test external authorizer (tests/extauthz: Envoy's ext_authz gRPC service from
# github.com/envoyproxy/go-control-plane/envoy, and an HTTP authorizer with the same decision)
# for tests/ext_auth.rs and the manual's ext-auth chapter, from the Go module proxy at the
# versions tests/extauthz/go.mod and go.sum pin.
#
#   scripts/extauthz.sh build   build into the cache unless already there; print the path
#   scripts/extauthz.sh env     print the path, failing if it has not been built
#
# Both print `export PIER_EXTAUTHZ=...` on stdout (logs go to stderr), so callers can
# `eval "$(scripts/extauthz.sh build)"`.
#
# The binary lands in ${PIER_EXTAUTHZ_CACHE:-$HOME/.cache/pier/extauthz}/v$EXTAUTHZ_VERSION/,
# outside the repository, with a private Go module and build cache (go/) that is deleted
# after a successful build unless PIER_EXTAUTHZ_KEEP_GO_CACHE=1. `rm -rf` of the cache undoes
# it.
set -euo pipefail

# Pinned version: tests/support/extauthz.rs reads it from this line to find the cache
# directory; keep the `EXTAUTHZ_VERSION=${PIER_EXTAUTHZ_VERSION:-X.Y.Z}` shape, and
# tests/extauthz/version.go in step.
EXTAUTHZ_VERSION=${PIER_EXTAUTHZ_VERSION:-0.1.0}

HERE=$(cd "$(dirname "$0")" && pwd)
SRC_DIR=$HERE/../tests/extauthz
CACHE=${PIER_EXTAUTHZ_CACHE:-$HOME/.cache/pier/extauthz}
CACHE=$(realpath -m "$CACHE")
BIN_DIR=$CACHE/v$EXTAUTHZ_VERSION
BIN=$BIN_DIR/extauthz

log() { printf 'extauthz: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

print_env() { printf 'export PIER_EXTAUTHZ=%q\n' "$BIN"; }

# Present: it runs and reports the pinned version, and was built from the sources as they
# are now (a checksum of them sits next to the binary).
sources_sum() { cat "$SRC_DIR"/*.go "$SRC_DIR/go.mod" "$SRC_DIR/go.sum" | sha256sum | cut -d' ' -f1; }
ok() {
  [ -x "$BIN" ] && "$BIN" -version 2>/dev/null | grep -x "extauthz $EXTAUTHZ_VERSION" >/dev/null &&
    [ "$(cat "$BIN.sources" 2>/dev/null)" = "$(sources_sum)" ]
}

build() {
  mkdir -p "$BIN_DIR"
  exec 9>"$CACHE/.lock"
  flock 9
  if ok; then
    log "up to date: $BIN"
    print_env
    return
  fi
  command -v go >/dev/null || die "go is not on PATH (needs Go >= 1.26.0)"
  export GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build GOTOOLCHAIN=local CGO_ENABLED=0 \
    GOFLAGS=-modcacherw GO111MODULE=on
  local src=$CACHE/src t0
  t0=$(date +%s)
  rm -rf "$src"
  mkdir -p "$src"
  cp "$SRC_DIR"/*.go "$SRC_DIR/go.mod" "$SRC_DIR/go.sum" "$src/"
  log "building extauthz v$EXTAUTHZ_VERSION into $BIN_DIR (a minute or two cold)"
  (cd "$src" && nice -n "${PIER_GO_NICE:-10}" go build -mod=readonly -trimpath -ldflags='-s -w' -o "$BIN.tmp" .)
  mv "$BIN.tmp" "$BIN"
  sources_sum >"$BIN.sources"
  ok || die "$BIN does not report version $EXTAUTHZ_VERSION"
  log "done in $(($(date +%s) - t0))s: $BIN ($(du -h "$BIN" | cut -f1))"
  if [ "${PIER_EXTAUTHZ_KEEP_GO_CACHE:-0}" != 1 ]; then
    log "removing the Go module and build cache ($(du -sh "$CACHE/go" | cut -f1))"
    rm -rf "$CACHE/go"
  fi
  print_env
}

case "${1:-}" in
build) build ;;
env)
  ok || die "no extauthz in $BIN_DIR (or built from other sources): run scripts/extauthz.sh build"
  print_env
  ;;
*)
  echo "usage: $0 build|env" >&2
  exit 2
  ;;
esac

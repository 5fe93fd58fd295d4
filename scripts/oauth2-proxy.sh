#!/usr/bin/env bash
# Builds oauth2-proxy (github.com/oauth2-proxy/oauth2-proxy/v7) from the Go module proxy, as a
# second real HTTP external authorizer for tests/ext_auth.rs (its `/oauth2/auth` endpoint, in
# front of which nginx's auth_request and Envoy's ext_authz are commonly put).
#
#   scripts/oauth2-proxy.sh build   build into the cache unless already there; print the path
#   scripts/oauth2-proxy.sh env     print the path, failing if it has not been built
#
# Both print `export PIER_OAUTH2_PROXY=...` on stdout (logs go to stderr), so callers can
# `eval "$(scripts/oauth2-proxy.sh build)"`.
#
# The binary lands in ${PIER_OAUTH2_PROXY_CACHE:-$HOME/.cache/pier/oauth2-proxy}/v$OAUTH2_PROXY_VERSION/,
# outside the repository, with a private Go module and build cache (go/) that is deleted after
# a successful build unless PIER_OAUTH2_PROXY_KEEP_GO_CACHE=1. `go install module@version`:
# the module's own go.mod and go.sum pin its dependencies. `rm -rf` of the cache undoes it.
set -euo pipefail

# Pinned version: tests/support/extauthz.rs reads it from this line to find the cache
# directory; keep the `OAUTH2_PROXY_VERSION=${PIER_OAUTH2_PROXY_VERSION:-X.Y.Z}` shape.
OAUTH2_PROXY_VERSION=${PIER_OAUTH2_PROXY_VERSION:-7.15.6}

CACHE=${PIER_OAUTH2_PROXY_CACHE:-$HOME/.cache/pier/oauth2-proxy}
CACHE=$(realpath -m "$CACHE")
BIN_DIR=$CACHE/v$OAUTH2_PROXY_VERSION
BIN=$BIN_DIR/oauth2-proxy

log() { printf 'oauth2-proxy: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

print_env() { printf 'export PIER_OAUTH2_PROXY=%q\n' "$BIN"; }

ok() { [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -F "v$OAUTH2_PROXY_VERSION" >/dev/null; }

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
    GOFLAGS=-modcacherw GO111MODULE=on GOBIN=$BIN_DIR
  local t0
  t0=$(date +%s)
  log "building oauth2-proxy v$OAUTH2_PROXY_VERSION into $BIN_DIR (minutes cold)"
  nice -n "${PIER_GO_NICE:-10}" go install -trimpath \
    -ldflags="-s -w -X github.com/oauth2-proxy/oauth2-proxy/v7/pkg/version.VERSION=v$OAUTH2_PROXY_VERSION" \
    "github.com/oauth2-proxy/oauth2-proxy/v7@v$OAUTH2_PROXY_VERSION"
  ok || die "$BIN does not report version v$OAUTH2_PROXY_VERSION"
  log "done in $(($(date +%s) - t0))s: $BIN ($(du -h "$BIN" | cut -f1))"
  if [ "${PIER_OAUTH2_PROXY_KEEP_GO_CACHE:-0}" != 1 ]; then
    log "removing the Go module and build cache ($(du -sh "$CACHE/go" | cut -f1))"
    rm -rf "$CACHE/go"
  fi
  print_env
}

case "${1:-}" in
build) build ;;
env)
  ok || die "no oauth2-proxy in $BIN_DIR: run scripts/oauth2-proxy.sh build"
  print_env
  ;;
*)
  echo "usage: $0 build|env" >&2
  exit 2
  ;;
esac

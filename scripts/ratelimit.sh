#!/usr/bin/env bash
# Builds Envoy's global rate-limit service (github.com/envoyproxy/ratelimit, main package
# src/service_cmd) from the Go module proxy, as the real peer pier speaks
# envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit to in the global rate-limit
# tests, and makes sure redis-server (its counter store; Debian package redis-server) is
# installed.
#
#   scripts/ratelimit.sh build   build into the cache unless already there, apt-get install
#                                redis-server if missing; print the paths
#   scripts/ratelimit.sh env     print the paths, failing if either is missing
#
# Both print `export PIER_RATELIMIT=...` and `export PIER_REDIS_SERVER=...` on stdout (logs go
# to stderr), so callers can `eval "$(scripts/ratelimit.sh build)"`.
#
# The binary (named ratelimit, as upstream's Dockerfile names it) lands in
# ${PIER_RATELIMIT_CACHE:-$HOME/.cache/pier/ratelimit}/$RATELIMIT_VERSION/, outside the
# repository, with a private Go module and build cache (go/) that is deleted after a successful
# build unless PIER_RATELIMIT_KEEP_GO_CACHE=1. `go install module/src/service_cmd@version`: the
# module's own go.mod and go.sum pin its dependencies. `rm -rf` of the cache undoes it.
# A cold build (empty module and build cache, under nice -n 19 on a busy 2-core machine) took
# 143 s (plus about a minute for apt-get install redis-server the first time); the binary is
# 23 MB and the deleted Go cache 472 MB.
#
# The Go module proxy lists no versions for it (`go list -m -versions` is empty; v1.4.0 can be
# asked for by name but is from 2020), so it is pinned at the pseudo-version that
# `go list -m github.com/envoyproxy/ratelimit@latest` resolved to: main of 2026-01-22.
#
# redis-server comes from apt (with sudo unless root), like scripts/test's packages. Nothing is
# started here: the tests run their own redis-server and ratelimit on free loopback ports
# (`redis-server --port P --save '' --appendonly no`). On a machine with systemd, Debian's
# package starts its own redis on 127.0.0.1:6379 when installed; the tests do not use it.
set -euo pipefail

# Pinned version: tests read it from this line to find the cache directory; keep the
# `RATELIMIT_VERSION=${PIER_RATELIMIT_VERSION:-vX.Y.Z-...}` shape (a Go module version, with
# its v).
RATELIMIT_VERSION=${PIER_RATELIMIT_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}

MODULE=github.com/envoyproxy/ratelimit
CACHE=${PIER_RATELIMIT_CACHE:-$HOME/.cache/pier/ratelimit}
CACHE=$(realpath -m "$CACHE")
BIN_DIR=$CACHE/$RATELIMIT_VERSION
BIN=$BIN_DIR/ratelimit

log() { printf 'ratelimit: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

redis_server() {
  command -v redis-server 2>/dev/null || { [ -x /usr/bin/redis-server ] && echo /usr/bin/redis-server; }
}

print_env() {
  printf 'export PIER_RATELIMIT=%q\n' "$BIN"
  printf 'export PIER_REDIS_SERVER=%q\n' "$(redis_server)"
}

# Present: executable, and built from the pinned module version (checked with `go version -m`
# when it was built; the version is kept next to the binary, as the service has no -version).
ok() { [ -x "$BIN" ] && [ "$(cat "$BIN.version" 2>/dev/null)" = "$RATELIMIT_VERSION" ]; }

install_redis() {
  [ -n "$(redis_server)" ] && return
  log "redis-server is not installed: apt-get install redis-server"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends redis-server >&2 ||
    die "could not install redis-server with apt-get"
  [ -n "$(redis_server)" ] || die "redis-server is still not on PATH after apt-get install"
}

build() {
  mkdir -p "$BIN_DIR"
  exec 9>"$CACHE/.lock"
  flock 9
  install_redis
  if ok; then
    log "up to date: $BIN"
    print_env
    return
  fi
  command -v go >/dev/null || die "go is not on PATH (needs Go >= 1.25.6)"
  export GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build GOTOOLCHAIN=local CGO_ENABLED=0 \
    GOFLAGS=-modcacherw GO111MODULE=on GOBIN=$BIN_DIR/.tmp
  local t0
  t0=$(date +%s)
  rm -rf "$BIN_DIR/.tmp" "$BIN.version"
  log "building $MODULE@$RATELIMIT_VERSION into $BIN_DIR (minutes cold)"
  nice -n "${PIER_GO_NICE:-10}" go install -trimpath -ldflags='-s -w' \
    "$MODULE/src/service_cmd@$RATELIMIT_VERSION"
  mv "$BIN_DIR/.tmp/service_cmd" "$BIN"
  rmdir "$BIN_DIR/.tmp"
  go version -m "$BIN" | grep -E "^[[:space:]]+mod[[:space:]]+$MODULE[[:space:]]+$RATELIMIT_VERSION([[:space:]]|$)" >/dev/null ||
    die "$BIN was not built from $MODULE@$RATELIMIT_VERSION"
  echo "$RATELIMIT_VERSION" >"$BIN.version"
  log "done in $(($(date +%s) - t0))s: $BIN ($(du -h "$BIN" | cut -f1))"
  if [ "${PIER_RATELIMIT_KEEP_GO_CACHE:-0}" != 1 ]; then
    log "removing the Go module and build cache ($(du -sh "$CACHE/go" | cut -f1))"
    rm -rf "$CACHE/go"
  fi
  print_env
}

case "${1:-}" in
build) build ;;
env)
  ok || die "no ratelimit $RATELIMIT_VERSION in $BIN_DIR: run scripts/ratelimit.sh build"
  [ -n "$(redis_server)" ] || die "redis-server is not installed: run scripts/ratelimit.sh build"
  print_env
  ;;
*)
  echo "usage: $0 build|env" >&2
  exit 2
  ;;
esac

#!/usr/bin/env bash
# Builds zitadel/oidc's example OpenID Provider (github.com/zitadel/oidc/v3/example/server: an
# in-memory OP with discovery, a JWKS, the authorization code flow with PKCE, refresh tokens,
# end_session, and an HTML login form) for pier's OIDC login test (tests/oidc.rs), from the Go
# module proxy at the version pinned below (`go install pkg@version` checks the module's own
# go.sum; no sources of ours).
#
#   scripts/oidc-provider.sh build   build into the cache unless already there; print the path
#   scripts/oidc-provider.sh env     print the path, failing if it has not been built
#
# Both print `export PIER_OIDC_PROVIDER=...` on stdout (logs go to stderr), so callers can
# `eval "$(scripts/oidc-provider.sh build)"`. The server reads PORT and REDIRECT_URI (comma
# separated) from its environment; its issuer is http://localhost:$PORT/, its users
# test-user@localhost / verysecure, its confidential client `web` with secret `secret`.
#
# The binary lands in ${PIER_OIDC_PROVIDER_CACHE:-$HOME/.cache/pier/oidc-provider}/v$VERSION/,
# outside the repository, with a private Go module and build cache that is deleted after a
# successful build unless PIER_OIDC_PROVIDER_KEEP_GO_CACHE=1. `rm -rf` of the cache undoes it.
set -euo pipefail

# Pinned version: tests/oidc.rs reads it from this line to find the cache directory; keep the
# `OIDC_PROVIDER_VERSION=${PIER_OIDC_PROVIDER_VERSION:-X.Y.Z}` shape.
OIDC_PROVIDER_VERSION=${PIER_OIDC_PROVIDER_VERSION:-3.52.0}

CACHE=${PIER_OIDC_PROVIDER_CACHE:-$HOME/.cache/pier/oidc-provider}
CACHE=$(realpath -m "$CACHE")
BIN_DIR=$CACHE/v$OIDC_PROVIDER_VERSION
BIN=$BIN_DIR/oidc-provider
PKG=github.com/zitadel/oidc/v3/example/server

log() { printf 'oidc-provider: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

print_env() { printf 'export PIER_OIDC_PROVIDER=%q\n' "$BIN"; }

# The build records the module version; `go version -m` reads it back.
ok() { [ -x "$BIN" ] && go version -m "$BIN" 2>/dev/null | grep -E "^\s+mod\s+github.com/zitadel/oidc/v3\s+v$OIDC_PROVIDER_VERSION\b" >/dev/null; }

build() {
  command -v go >/dev/null || die "go is not on PATH (needs Go >= 1.24)"
  mkdir -p "$BIN_DIR"
  exec 9>"$CACHE/.lock"
  flock 9
  if ok; then
    log "up to date: $BIN"
    print_env
    return
  fi
  export GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build GOTOOLCHAIN=local CGO_ENABLED=0 \
    GOFLAGS=-modcacherw GO111MODULE=on GOBIN=$CACHE/go/bin
  local t0
  t0=$(date +%s)
  log "building $PKG@v$OIDC_PROVIDER_VERSION into $BIN_DIR"
  nice -n "${PIER_GO_NICE:-10}" go install -trimpath -ldflags='-s -w' "$PKG@v$OIDC_PROVIDER_VERSION"
  mv "$GOBIN/server" "$BIN"
  ok || die "$BIN does not report github.com/zitadel/oidc/v3 v$OIDC_PROVIDER_VERSION"
  log "done in $(($(date +%s) - t0))s: $BIN ($(du -h "$BIN" | cut -f1))"
  if [ "${PIER_OIDC_PROVIDER_KEEP_GO_CACHE:-0}" != 1 ]; then
    log "removing the Go module and build cache ($(du -sh "$CACHE/go" | cut -f1))"
    rm -rf "$CACHE/go"
  fi
  print_env
}

case "${1:-}" in
build) build ;;
env)
  ok || die "no OIDC provider in $BIN_DIR: run scripts/oidc-provider.sh build"
  print_env
  ;;
*)
  echo "usage: $0 build|env" >&2
  exit 2
  ;;
esac

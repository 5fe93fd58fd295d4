#!/usr/bin/env bash
# Builds a minimal OpenTelemetry Collector (the OTLP receiver and the file exporter) for pier's
# tracing tests (tests/tracing.rs), from the Go module proxy, at the versions that
# scripts/otelcol/go.mod and go.sum pin.
#
#   scripts/otelcol.sh build   build into the cache unless already there; print the path
#   scripts/otelcol.sh env     print the path, failing if it has not been built
#
# Both print `export PIER_OTELCOL=...` on stdout (logs go to stderr), so callers can
# `eval "$(scripts/otelcol.sh build)"`.
#
# The binary lands in ${PIER_OTELCOL_CACHE:-$HOME/.cache/pier/otelcol}/v$OTELCOL_VERSION/,
# outside the repository, with a private Go module and build cache (go/, ~1.2 GB) that is
# deleted after a successful build unless PIER_OTELCOL_KEEP_GO_CACHE=1. Cold: ~4.5 min on two
# busy cores (~40 s of it downloading), a 38 MB binary. `rm -rf` of the cache undoes it.
set -euo pipefail

# Pinned version: tests/tracing.rs reads it from this line to find the cache directory; keep
# the `OTELCOL_VERSION=${PIER_OTELCOL_VERSION:-X.Y.Z}` shape, and go.mod in step.
OTELCOL_VERSION=${PIER_OTELCOL_VERSION:-0.165.0}

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${PIER_OTELCOL_CACHE:-$HOME/.cache/pier/otelcol}
CACHE=$(realpath -m "$CACHE")
BIN_DIR=$CACHE/v$OTELCOL_VERSION
BIN=$BIN_DIR/otelcol

log() { printf 'otelcol: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

print_env() { printf 'export PIER_OTELCOL=%q\n' "$BIN"; }

ok() { [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -F "version $OTELCOL_VERSION" >/dev/null; }

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
  cp "$HERE/otelcol/main.go" "$HERE/otelcol/go.mod" "$HERE/otelcol/go.sum" "$src/"
  log "building the collector v$OTELCOL_VERSION into $BIN_DIR (a few minutes cold)"
  (cd "$src" && nice -n "${PIER_GO_NICE:-10}" go build -mod=readonly -trimpath -ldflags='-s -w' -o "$BIN.tmp" .)
  mv "$BIN.tmp" "$BIN"
  ok || die "$BIN does not report version $OTELCOL_VERSION"
  log "done in $(($(date +%s) - t0))s: $BIN ($(du -h "$BIN" | cut -f1))"
  if [ "${PIER_OTELCOL_KEEP_GO_CACHE:-0}" != 1 ]; then
    log "removing the Go module and build cache ($(du -sh "$CACHE/go" | cut -f1))"
    rm -rf "$CACHE/go"
  fi
  print_env
}

case "${1:-}" in
build) build ;;
env)
  ok || die "no collector in $BIN_DIR: run scripts/otelcol.sh build"
  print_env
  ;;
*)
  echo "usage: $0 build|env" >&2
  exit 2
  ;;
esac

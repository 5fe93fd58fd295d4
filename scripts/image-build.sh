#!/usr/bin/env bash
# Builds pier's container image with podman from a pier binary built beforehand, with no
# registry: docker/Dockerfile's `ROOTFS=context` path, on a context directory holding only the
# root filesystem docker/rootfs.sh makes (the binary, the libraries it links, CA roots, passwd).
#
#   cargo build --profile dist --locked
#   scripts/image-build.sh [BINARY|DEB] [TAG]
#
# Defaults: ${CARGO_TARGET_DIR:-target}/release/pier, localhost/pier:latest. A BINARY with
# debug symbols (a release build) is stripped here as scripts/package-deb.sh does, the symbols
# kept in ${CARGO_TARGET_DIR:-target}/image/pier_<version>_<arch>.debug (named by
# .gnu_debuglink); an already stripped BINARY goes in as it is; a DEB (scripts/package-deb.sh's)
# gives its own stripped /usr/bin/pier, whose symbols are the .debug file beside the .deb: CI
# does this, so the image holds the very binary of the package. The label org.opencontainers.image.version is pier's
# version. Prints the image's name (stdout) and size (stderr). Needs podman (Debian: apt-get
# install podman) and, for a BINARY with symbols, objcopy (binutils).
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-${CARGO_TARGET_DIR:-target}/release/pier}
tag=${2:-localhost/pier:latest}
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
command -v podman >/dev/null || { echo "image-build: podman not found (Debian: apt-get install podman)" >&2; exit 1; }
[ -f "$src" ] || { echo "image-build: no binary at $src: cargo build --profile dist --locked" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
bin=$stage/pier
case "$src" in
*.deb)
  dpkg-deb --fsys-tarfile "$src" | tar -x -C "$stage" ./usr/bin/pier
  mv "$stage/usr/bin/pier" "$bin"
  ;;
*)
  if readelf -S "$src" | grep -q '\.debug_info'; then
    mkdir -p "${CARGO_TARGET_DIR:-target}/image"
    debug=${CARGO_TARGET_DIR:-target}/image/pier_${version}_${arch}.debug
    objcopy --only-keep-debug "$src" "$debug"
    objcopy --strip-debug --strip-unneeded --add-gnu-debuglink="$debug" "$src" "$bin"
    echo "image-build: debug symbols in $debug" >&2
  else
    cp "$src" "$bin"
  fi
  ;;
esac
if readelf -S "$bin" | grep -q '\.debug_info'; then
  echo "image-build: $src still carries debug symbols" >&2
  exit 1
fi

docker/rootfs.sh "$bin" "$stage/context"
# Nothing but rootfs/ in the context: the Dockerfile's `rootfs-context` stage copies it whole.
rm -f "$bin"
podman build --quiet -f docker/Dockerfile --build-arg ROOTFS=context \
  --label org.opencontainers.image.version="$version" \
  -t "$tag" "$stage/context" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "image-build: $tag (pier $version), $((size / 1000000)) MB ($size bytes)" >&2
echo "$tag"

#!/usr/bin/env bash
# Builds the Debian package of pier from a release binary:
#
#   cargo build --profile dist --locked
#   scripts/package-deb.sh [BINARY] [OUT_DIR]     # default target/dist/pier, target/deb
#
# Out: OUT_DIR/pier_<version>_<arch>.deb (the binary stripped of debug symbols) and
# OUT_DIR/pier_<version>_<arch>.debug (the symbols, linked by .gnu_debuglink, for
# `gdb`/`perf` on a crash or a profile of the shipped binary). Needs dpkg-deb and objcopy
# (Debian: dpkg, binutils). The package installs:
#   /usr/bin/pier
#   /lib/systemd/system/pier.service   (config/systemd/pier.service: hardened, user pier)
#   /etc/pier/pier.env                 (a conffile: PIER_ARGS, the arguments of `pier run`)
#   /etc/pier/manifests/               (empty; for --manifests)
#   /usr/share/doc/pier/               (README, RBAC manifests for cluster mode)
# and creates the system user and group `pier`. It does not start the service: set PIER_ARGS,
# then `systemctl enable --now pier`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/dist/pier}
out=${2:-target/deb}
[ -x "$bin" ] || { echo "no binary at $bin: cargo build --profile dist --locked" >&2; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
name="pier_${version}_${arch}"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/$name"
mkdir -p "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/pier/manifests" \
  "$root/usr/share/doc/pier/rbac" "$out"

# The binary without its debug symbols; the symbols beside the package.
objcopy --only-keep-debug "$bin" "$out/$name.debug"
objcopy --strip-debug --strip-unneeded --add-gnu-debuglink="$out/$name.debug" "$bin" "$root/usr/bin/pier"
chmod 0755 "$root/usr/bin/pier"

install -m 0644 config/systemd/pier.service "$root/lib/systemd/system/pier.service"
install -m 0640 config/systemd/pier.env "$root/etc/pier/pier.env"
install -m 0644 README.md "$root/usr/share/doc/pier/README.md"
install -m 0644 config/rbac/*.yaml "$root/usr/share/doc/pier/rbac/"

cat > "$root/DEBIAN/control" <<CONTROL
Package: pier
Version: $version
Architecture: $arch
Maintainer: pier developers <pier@localhost>
Section: net
Priority: optional
Depends: adduser
Installed-Size: $(du -sk "$root" | cut -f1)
Description: out-of-cluster Gateway API gateway speaking mesh mTLS to pods
 pier runs outside the Kubernetes cluster, reads Gateway API objects through a
 kubeconfig (or from a directory of manifests), serves the Gateways' listeners
 and sends traffic straight to pod IPs, with mTLS to meshed workloads.
CONTROL
echo /etc/pier/pier.env > "$root/DEBIAN/conffiles"

cat > "$root/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  if ! getent passwd pier >/dev/null; then
    adduser --system --group --home /nonexistent --no-create-home --quiet pier
  fi
  # The configuration may hold a kubeconfig or keys: root writes it, pier reads it.
  chown root:pier /etc/pier /etc/pier/pier.env /etc/pier/manifests
  chmod 0750 /etc/pier /etc/pier/manifests
  chmod 0640 /etc/pier/pier.env
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
  fi
fi
POSTINST
cat > "$root/DEBIAN/prerm" <<'PRERM'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
  systemctl stop pier.service >/dev/null 2>&1 || true
fi
PRERM
cat > "$root/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
fi
POSTRM
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"

dpkg-deb --root-owner-group --build "$root" "$out/$name.deb" >/dev/null
echo "$out/$name.deb"

#!/bin/sh
# Assembles the root filesystem of pier's container image from a pier binary, with nothing
# else in it: no shell, no package manager.
#
#   docker/rootfs.sh BINARY OUT_DIR
#
# OUT_DIR/rootfs/ then holds:
#   /usr/local/bin/pier            BINARY (strip it first: docker/Dockerfile and
#                                  scripts/package-deb.sh do, with objcopy)
#   the ELF interpreter and the shared libraries BINARY needs (glibc, libgcc_s: `ldd`),
#                                  at the paths the dynamic linker looks them up at
#   /etc/ssl/certs/ca-certificates.crt   CA roots (Debian's ca-certificates), for tools and
#                                  libraries that read the system store
#   /etc/passwd, /etc/group        root and pier (uid/gid 65532, no shell, no home)
#   /etc/nsswitch.conf             hosts: files, then DNS (the runtime mounts /etc/hosts and
#                                  /etc/resolv.conf)
#   /etc/pier/manifests/           empty: the default CMD's --manifests; mount yours over it
#   /tmp                           mode 1777, for a run without --read-only (nothing of pier's
#                                  writes there)
#
# Both image builds use it: docker/Dockerfile's `build` stage on the binary it compiles, and
# scripts/image-test.sh on the host, on the stripped binary of the Debian package CI builds.
# Runs with POSIX sh and coreutils on a Debian-like system (ldd from libc-bin).
set -eu
bin=$1
out=$2
[ -x "$bin" ] || { echo "rootfs.sh: no executable at $bin" >&2; exit 1; }
root="$out/rootfs"
rm -rf "$root"
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/etc/pier/manifests" "$root/tmp"
chmod 1777 "$root/tmp"
cp "$bin" "$root/usr/local/bin/pier"
chmod 0755 "$root/usr/local/bin/pier"

# Every library ldd resolves (`name => /path (addr)`) and the interpreter (`/path (addr)`),
# copied to the same path, symlinks resolved. A library ldd cannot find fails the build.
libs=$(ldd "$bin")
if printf '%s\n' "$libs" | grep -q 'not found'; then
  echo "rootfs.sh: unresolved libraries:" >&2
  printf '%s\n' "$libs" >&2
  exit 1
fi
printf '%s\n' "$libs" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' |
  while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
# The interpreter must be there, or the kernel reports the binary itself as "not found".
interp=$(printf '%s\n' "$libs" | awk '$1 ~ /^\// { print $1 }')
[ -n "$interp" ] && [ -f "$root$interp" ] || { echo "rootfs.sh: no ELF interpreter in ldd's output" >&2; exit 1; }

ca=/etc/ssl/certs/ca-certificates.crt
[ -s "$ca" ] || { echo "rootfs.sh: no CA bundle at $ca (Debian: apt-get install ca-certificates)" >&2; exit 1; }
cp "$ca" "$root$ca"

cat > "$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/usr/sbin/nologin
pier:x:65532:65532:pier:/nonexistent:/usr/sbin/nologin
PASSWD
cat > "$root/etc/group" <<'GROUP'
root:x:0:
pier:x:65532:
GROUP
echo 'hosts: files dns' > "$root/etc/nsswitch.conf"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf" "$root$ca"

#!/usr/bin/env bash
# The Debian package as an operator installs it (CI runs this; it installs and then purges the
# package on this machine, as root): build the shipped binary (profile `dist`) and the .deb, `dpkg -i` it,
# check the unit with `systemd-analyze verify`, then start the unit's own ExecStart line as
# its User with a PIER_ARGS of manifests on loopback, and see a request through it, a reload
# (SIGHUP) and a clean stop (SIGTERM).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
need=()
command -v objcopy >/dev/null || need+=(binutils)
command -v adduser >/dev/null || need+=(adduser)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v curl >/dev/null || need+=(curl)
if ((${#need[@]})); then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# The shipped binary's profile (Cargo.toml `dist`: whole-program LTO, for size).
cargo build --profile dist --locked
deb=$(scripts/package-deb.sh target/dist/pier target/deb)
echo "package: $deb ($(du -h "$deb" | cut -f1)); binary $(du -h target/dist/pier | cut -f1) before stripping"
$SUDO dpkg -i "$deb"
trap '$SUDO dpkg --purge pier >/dev/null 2>&1 || true' EXIT
unit=/lib/systemd/system/pier.service
$SUDO systemd-analyze verify "$unit"
test "$(stat -c %U:%G:%a /etc/pier/pier.env)" = root:pier:640
/usr/bin/pier --version
# The shipped binary's size budget (issue 41: 35 MiB with HTTP/3; BENCHMARKS.md).
size=$(stat -c %s /usr/bin/pier)
budget=$((35 * 1024 * 1024))
echo "package: /usr/bin/pier is $size bytes (budget $budget)"
[ "$size" -le "$budget" ] || { echo "package: the binary is over its budget" >&2; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port); admin=$(free_port); backend=$(free_port)
dir=$(mktemp -d)
chmod 0755 "$dir"
cat > "$dir/all.yaml" <<YAML
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pier}
spec: {controllerName: pier.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: default}
spec:
  gatewayClassName: pier
  listeners: [{name: http, protocol: HTTP, port: $port}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: $backend}]
endpoints: [{addresses: ["127.0.0.1"], conditions: {ready: true}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: default}
spec:
  parentRefs: [{name: edge}]
  rules: [{backendRefs: [{name: web, port: 80}]}]
YAML
chmod 0644 "$dir/all.yaml"

/usr/bin/pier echo --listen "127.0.0.1:$backend" --name packaged >/dev/null 2>&1 &
echo_pid=$!
# The unit's ExecStart, as systemd would run it: its User, PIER_ARGS from the environment.
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
user=$(sed -n 's/^User=//p' "$unit")
PIER_ARGS="--manifests $dir --listen-host 127.0.0.1 --admin 127.0.0.1:$admin"
$SUDO runuser -u "$user" -- env PIER_ARGS="$PIER_ARGS" sh -c "exec $exec_start" 2>"$dir/pier.log" &
pier_pid=$!
cleanup() {
  kill "$echo_pid" 2>/dev/null || true
  $SUDO pkill -TERM -u "$user" -x pier 2>/dev/null || true
  $SUDO dpkg --purge pier >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null && break
  sleep 0.2
done
body=$(curl -sf "http://127.0.0.1:$port/hello")
echo "$body" | grep -q '"packaged"' || { echo "unexpected answer: $body" >&2; cat "$dir/pier.log" >&2; exit 1; }
# The process runs as the unit's user.
test "$(ps -o user= -p "$(pgrep -u "$user" -x pier | head -1)")" = "$user"
# systemctl reload: SIGHUP re-reads, pier keeps serving.
$SUDO pkill -HUP -u "$user" -x pier
sleep 1
curl -sf "http://127.0.0.1:$port/hello" >/dev/null
$SUDO pkill -TERM -u "$user" -x pier
wait "$pier_pid"
grep -q "SIGHUP" "$dir/pier.log" || { echo "no SIGHUP line in the log" >&2; cat "$dir/pier.log" >&2; exit 1; }
if grep -q $'\e\[' "$dir/pier.log"; then echo "colour codes in a log that is not a terminal" >&2; exit 1; fi
echo "package test: installed, verified, served, reloaded and stopped"

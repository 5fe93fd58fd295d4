#!/usr/bin/env bash
# What a SecurityPolicy costs, and what a flood of wrong passwords does, on this machine:
#
#   scripts/bench-auth.sh [PIER_BINARY]      # default target/release/pier; D=10 RUNS=3
#   CALLGRIND=1 scripts/bench-auth.sh        # part 0 first (valgrind)
#
# One pier (pinned to CPU 0, one worker) in front of an nginx origin (CPU 1) that answers 200,
# with four routes on one listener: /plain (no policy), /jwt (a SecurityPolicy with an ES256
# JSON Web Token, the key set inline: config/examples/security-policy), /fresh (the same with a
# key made for the run, part 2) and /basic (basic auth,
# one bcrypt cost-10 user). wrk runs on CPU 1, bounded in time.
#
# 0. (CALLGRIND=1) pier under callgrind: user-space instructions per request on /plain and on
#    /jwt with the cached token (same process, one wrk run each, 5 s, c=32); the ratio. Unlike
#    CPU time per request, instruction counts do not move with the machine's other load.
# 1. JWT: wrk -c64 on /plain and on /jwt with a valid token, interleaved RUNS times; pier's CPU
#    per request (its process, from /proc) for each; the ratio jwt/plain.
# 2. A new token on every request (the verified-token cache never hits): /fresh, a second JWT
#    policy whose key signed NEW distinct tokens (python3-cryptography); wrk sends them in turn
#    (a Lua script), so each request is one ES256 verification. CPU per request against /plain.
#    NEW tokens (default 150000) must outnumber the cache's 10 000 entries, or they hit it.
# 3. bcrypt flood: /plain alone (-c16), then /plain (-c16) while a second wrk (-c64) sends a
#    wrong password to /basic on every request; /plain's requests/s and p99 in both, and what
#    the flood got (401: hashed and refused; 503: no turn to hash within 500 ms).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/scripts/bench-policy.sh"
PIER="${1:-$ROOT/target/release/pier}"
D="${D:-10}"
RUNS="${RUNS:-3}"
command -v wrk >/dev/null && command -v nginx >/dev/null || {
  echo "needs wrk and nginx (apt-get install wrk nginx)" >&2; exit 2; }
WORK="$(mktemp -d /tmp/pier-bench-auth.XXXXXX)"
ORIGIN=19480 LISTEN=19481 ADMIN=19482
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null || true; [ "${KEEP:-0}" = 1 ] && echo "kept $WORK" || rm -rf "$WORK"' EXIT

mkdir -p "$WORK/origin/logs" "$WORK/manifests"
cat >"$WORK/origin/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $WORK/origin/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
  access_log off;
  server { listen 127.0.0.1:$ORIGIN; keepalive_requests 1000000; location / { return 200 "ok\n"; } }
}
EOF
taskset -c 1 nginx -p "$WORK/origin/" -c "$WORK/origin/nginx.conf" >"$WORK/origin.log" 2>&1 &
PIDS+=($!)

EX="$ROOT/config/examples/security-policy"
JWKS=$(grep -o '{"keys".*}' "$EX/30-policies.yaml")
# Alice's token from docs/src/edge/security-policy.md (valid until 2100, scope orders:read).
TOKEN=$(grep -o '^ALICE=.*' "$ROOT/docs/src/edge/security-policy.md" | cut -d= -f2)
HTPASSWD=$(grep -o 'carol:\$2y\$10\$[^ ]*' "$EX/30-policies.yaml")
# Distinct ES256 tokens and their key set, for part 2.
NEW="${NEW:-150000}"
python3 - "$WORK/tokens.txt" "$NEW" >"$WORK/fresh-jwks.json" <<'PY'
import base64, json, sys, time
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
key = ec.generate_private_key(ec.SECP256R1())
nums = key.public_key().public_numbers()
header = b64(json.dumps({"alg": "ES256", "typ": "JWT", "kid": "fresh"}).encode())
exp = int(time.time()) + 3600
with open(sys.argv[1], "w") as out:
    for i in range(int(sys.argv[2])):
        claims = b64(json.dumps({"iss": "https://fresh.example", "sub": f"u{i}", "exp": exp}).encode())
        r, s = decode_dss_signature(key.sign(f"{header}.{claims}".encode(), ec.ECDSA(hashes.SHA256())))
        out.write(f"{header}.{claims}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}\n")
print(json.dumps({"keys": [{"kty": "EC", "crv": "P-256", "kid": "fresh", "alg": "ES256",
    "x": b64(nums.x.to_bytes(32, "big")), "y": b64(nums.y.to_bytes(32, "big"))}]}))
PY
cat >"$WORK/fresh.lua" <<LUA
local tokens = {}
for line in io.lines("$WORK/tokens.txt") do tokens[#tokens + 1] = "Bearer " .. line end
local i = 0
request = function()
  i = i % #tokens + 1
  return wrk.format(nil, nil, {["authorization"] = tokens[i]})
end
LUA
policy_manifests "$WORK/manifests/all.yaml" "$LISTEN" "$ORIGIN" plain jwt fresh basic
cat >>"$WORK/manifests/all.yaml" <<EOF
---
apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {name: jwt, namespace: b}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: jwt}]
  jwt:
    providers:
      - name: issuer-example
        issuer: https://issuer.example
        audiences: [shop]
        localJWKS: {type: Inline, inline: '$JWKS'}
---
apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {name: fresh, namespace: b}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: fresh}]
  jwt:
    providers:
      - name: fresh
        issuer: https://fresh.example
        localJWKS: {type: Inline, inline: '$(cat "$WORK/fresh-jwks.json")'}
---
apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {name: basic, namespace: b}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: basic}]
  basicAuth: {users: {name: users}}
---
apiVersion: v1
kind: Secret
metadata: {name: users, namespace: b}
stringData:
  .htpasswd: |
    $HTPASSWD
EOF
if [ "${CALLGRIND:-0}" = 1 ]; then
  command -v valgrind >/dev/null || { echo "needs valgrind (or CALLGRIND=0)" >&2; exit 2; }
  echo "# 0. user-space instructions per request, /plain vs /jwt (the token cached), c=32, 5 s each"
  (cd "$WORK"
   PIER_WORKER_THREADS=1 RUST_LOG=warn taskset -c 0 valgrind --tool=callgrind \
     --instr-atstart=no --callgrind-out-file="$WORK/callgrind.out" "$PIER" run \
     --manifests "$WORK/manifests" --listen-host 127.0.0.1 --admin "127.0.0.1:$ADMIN" \
     >"$WORK/callgrind.log" 2>&1 &
   cpid=$!
   for _ in $(seq 600); do curl -sf "http://127.0.0.1:$ADMIN/readyz" >/dev/null && break; sleep 0.1; done
   declare -A per
   for path in plain jwt; do
     auth=(); [ "$path" = jwt ] && auth=(-H "authorization: Bearer $TOKEN")
     line=$(instructions_per_request "$path" "${auth[@]}" "http://127.0.0.1:$LISTEN/$path")
     echo "$line"
     per[$path]=${line##*per_request=}
   done
   echo "jwt/plain instructions per request: $(awk -v a="${per[jwt]}" -v b="${per[plain]}" 'BEGIN {printf "%.4f", a/b}')"
   kill "$cpid"; wait "$cpid" 2>/dev/null || true)
fi
PIER_WORKER_THREADS=1 RUST_LOG=warn taskset -c 0 "$PIER" run --manifests "$WORK/manifests" \
  --listen-host 127.0.0.1 --admin "127.0.0.1:$ADMIN" >"$WORK/pier.log" 2>&1 &
pid=$!
PIDS+=($pid)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$ADMIN/readyz" >/dev/null && break; sleep 0.1; done
base="http://127.0.0.1:$LISTEN"
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "authorization: Bearer $TOKEN" "$base/jwt")" = 200 ] || {
  echo "pier does not let the token in on /jwt" >&2; cat "$WORK/pier.log" >&2; exit 1; }
[ "$(curl -s -o /dev/null -w '%{http_code}' "$base/jwt")" = 401 ] || { echo "/jwt without a token is not 401" >&2; exit 1; }

cpu() { awk '{print $14+$15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
# one wrk run: prints "rps p99 cpu_us_per_req"
measure() {
  local c=$1 url=$2; shift 2
  taskset -c 1 wrk -t1 -c"$c" -d2s "$@" "$url" >/dev/null 2>&1 || true
  local t0 t1 out reqs
  t0=$(cpu)
  out=$(taskset -c 1 wrk -t1 -c"$c" -d"${D}s" --latency "$@" "$url")
  t1=$(cpu)
  reqs=$(echo "$out" | awk '/requests in/{print $1}')
  echo "$(echo "$out" | awk '/Requests\/sec/{print $2}') $(echo "$out" | awk '/ 99%/{print $2}') \
$(awk -v a="$t0" -v b="$t1" -v n="$reqs" -v hz="$hz" 'BEGIN {printf "%.2f", (b-a)/hz*1e6/n}')"
}

# against_plain NAME PATH WRK_ARGS...: RUNS interleaved runs of /plain and of PATH (with
# WRK_ARGS), each printed, then NAME/plain CPU per request (medians).
against_plain() {
  local name=$1 path=$2 i rps p99 us
  shift 2
  local plain_cpu=() other_cpu=()
  for i in $(seq "$RUNS"); do
    read -r rps p99 us < <(measure 64 "$base/plain")
    echo "plain run=$i rps=$rps p99=$p99 cpu_us_per_req=$us"; plain_cpu+=("$us")
    read -r rps p99 us < <(measure 64 "$base/$path" "$@")
    echo "$name run=$i rps=$rps p99=$p99 cpu_us_per_req=$us"; other_cpu+=("$us")
  done
  echo "$name/plain CPU per request (medians): $(awk -v p="$(median "${plain_cpu[@]}")" -v o="$(median "${other_cpu[@]}")" 'BEGIN {printf "%.3f", o/p}')"
}

echo "# 1. JWT (ES256) route vs plain route, c=64, ${D}s runs, interleaved"
against_plain jwt jwt -H "authorization: Bearer $TOKEN"

echo "# 2. a new ES256 token on every request (no cache hit) vs plain, c=64, ${D}s runs"
first=$(head -1 "$WORK/tokens.txt")
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "authorization: Bearer $first" "$base/fresh")" = 200 ] || {
  echo "pier does not let the generated token in on /fresh" >&2; exit 1; }
against_plain fresh fresh -s "$WORK/fresh.lua"
m=$(curl -s "http://127.0.0.1:$ADMIN/metrics" | grep '^pier_proxy_security_decisions_total{policy="b/fresh"')
echo "fresh decisions: $(echo "$m" | awk '{printf "%s ", $0}')"

echo "# 3. a flood of wrong passwords on /basic (c=64) beside /plain (c=16), ${D}s"
read -r rps p99 us < <(measure 16 "$base/plain")
echo "plain alone:        rps=$rps p99=$p99"
flood="$WORK/flood.txt"
taskset -c 1 wrk -t1 -c64 -d"$((D + 4))s" -H 'authorization: Basic Y2Fyb2w6d3Jvbmc=' "$base/basic" >"$flood" 2>&1 &
fpid=$!
sleep 1
read -r rps p99 us < <(measure 16 "$base/plain")
wait $fpid || true
echo "plain during flood: rps=$rps p99=$p99"
m=$(curl -s "http://127.0.0.1:$ADMIN/metrics" | grep '^pier_proxy_security_decisions_total{policy="b/basic"')
echo "flood: $(awk '/Requests\/sec/{print "rps=" $2}' "$flood") \
refused_401=$(echo "$m" | awk '/result="unauthenticated"/{print $2}') busy_503=$(echo "$m" | awk '/result="busy"/{print $2}')"

#!/usr/bin/env bash
# Makes the certificates of the mesh-identity example: everything ../mesh/gen-certs.sh makes
# (mesh CA, the web workload spiffe://cluster.local/ns/shop/sa/web, pier's CA and client
# certificate, 30-trust.yaml), plus two more workloads from the same mesh CA:
#
#   certs/billing-workload.{crt,key}  spiffe://cluster.local/ns/shop/sa/billing (a valid mesh
#                                     certificate of another identity: pier refuses it)
#   certs/web-linkerd.{crt,key}       DNS web.shop.serviceaccount.identity.linkerd.cluster.local
#
# Usage: gen-certs.sh [OUT_DIR]   (default: this directory).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here}"
"$here/../mesh/gen-certs.sh" "$out" >/dev/null
certs="$out/certs"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

leaf() { # NAME SAN
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$certs/$1.key" 2>/dev/null
  openssl req -new -key "$certs/$1.key" -subj "/" -out "$tmp/$1.csr" 2>/dev/null
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
    "extendedKeyUsage=serverAuth,clientAuth" "subjectAltName=critical,$2" > "$tmp/$1.ext"
  openssl x509 -req -in "$tmp/$1.csr" -CA "$certs/mesh-ca.crt" -CAkey "$certs/mesh-ca.key" \
    -CAcreateserial -CAserial "$tmp/mesh-ca.srl" -days 3650 -sha256 \
    -extfile "$tmp/$1.ext" -out "$certs/$1.crt" 2>/dev/null
}

leaf billing-workload "URI:spiffe://cluster.local/ns/shop/sa/billing"
leaf web-linkerd "DNS:web.shop.serviceaccount.identity.linkerd.cluster.local"
echo "wrote $certs and $out/30-trust.yaml"

#!/usr/bin/env bash
# Makes the certificates of the mesh example with openssl (Debian: `apt-get install openssl`)
# and writes them as manifests next to the other files, so the directory is complete:
#
#   certs/mesh-ca.{crt,key}        the mesh's CA (what pier trusts for meshed backends)
#   certs/web-workload.{crt,key}   a workload certificate from it: only a SPIFFE URI SAN,
#                                  spiffe://cluster.local/ns/shop/sa/web (what mesh pods present)
#   certs/pier-ca.{crt,key}        pier's CA (what the mesh trusts: `pier mesh export-trust`)
#   certs/pier-client.{crt,key}    pier's client certificate, spiffe://cluster.local/ns/pier/sa/gateway
#   30-trust.yaml                  ConfigMap shop-gw/mesh-ca (ca-bundle.crt) and the
#                                  kubernetes.io/tls Secret shop-gw/pier-client
#
# Usage: gen-certs.sh [OUT_DIR]   (default: this directory). Re-running replaces everything.
# EC P-256 keys; ten years, so checked-in test copies do not expire under the tests.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here}"
certs="$out/certs"
mkdir -p "$certs"
days=3650
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

ca() { # NAME CN
  key "$certs/$1.key"
  openssl req -x509 -new -key "$certs/$1.key" -subj "/CN=$2" -days "$days" -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$certs/$1.crt" 2>/dev/null
}

leaf() { # NAME CA URI
  key "$certs/$1.key"
  openssl req -new -key "$certs/$1.key" -subj "/" -out "$tmp/$1.csr" 2>/dev/null
  cat > "$tmp/$1.ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=critical,URI:$3
EXT
  openssl x509 -req -in "$tmp/$1.csr" -CA "$certs/$2.crt" -CAkey "$certs/$2.key" \
    -CAcreateserial -CAserial "$tmp/$2.srl" -days "$days" -sha256 \
    -extfile "$tmp/$1.ext" -out "$certs/$1.crt" 2>/dev/null
}

ca mesh-ca "example mesh CA"
leaf web-workload mesh-ca "spiffe://cluster.local/ns/shop/sa/web"
ca pier-ca "pier CA"
leaf pier-client pier-ca "spiffe://cluster.local/ns/pier/sa/gateway"
# pier presents its leaf and the CA that issued it.
cat "$certs/pier-client.crt" "$certs/pier-ca.crt" > "$certs/pier-client-chain.crt"

indent() { sed 's/^/    /' "$1"; }
{
  echo "# Made by gen-certs.sh: the mesh trust bundle and pier's client certificate."
  echo "apiVersion: v1"
  echo "kind: ConfigMap"
  echo "metadata: {name: mesh-ca, namespace: shop-gw}"
  echo "data:"
  echo "  ca-bundle.crt: |"
  indent "$certs/mesh-ca.crt"
  echo "---"
  echo "apiVersion: v1"
  echo "kind: Secret"
  echo "metadata: {name: pier-client, namespace: shop-gw}"
  echo "type: kubernetes.io/tls"
  echo "stringData:"
  echo "  tls.crt: |"
  indent "$certs/pier-client-chain.crt"
  echo "  tls.key: |"
  indent "$certs/pier-client.key"
} > "$out/30-trust.yaml"
echo "wrote $certs and $out/30-trust.yaml"

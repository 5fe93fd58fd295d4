#!/usr/bin/env bash
# Makes the certificates of the edge example with openssl (Debian: `apt-get install openssl`)
# and writes them as manifests next to the other files, so the directory is complete:
#
#   certs/mesh-ca.{crt,key}        the mesh's CA (what pier trusts for meshed backends)
#   certs/web-workload.{crt,key}   a workload certificate from it, SAN only
#                                  spiffe://cluster.local/ns/shop/sa/web
#   certs/pier-ca.{crt,key}        pier's CA (what the mesh trusts)
#   certs/pier-client.{crt,key}    pier's client certificate, spiffe://cluster.local/ns/edge/sa/pier
#   certs/clients-ca.{crt,key}     the CA of the clients allowed in (frontend mTLS)
#   certs/alice.{crt,key}          a client certificate from it (CN=alice, DNS:alice.example)
#   certs/edge.{crt,key}           the listener's server certificate for app.example, from
#                                  certs/edge-ca.crt (what clients trust)
#   30-trust.yaml                  ConfigMaps edge/mesh-ca and edge/clients-ca, Secrets
#                                  edge/pier-client and edge/edge-cert (kubernetes.io/tls)
#
# Usage: gen-certs.sh [OUT_DIR]   (default: this directory). Re-running replaces everything.
# EC P-256 keys; ten years, so test copies do not expire under the tests.
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

leaf() { # NAME CA SUBJECT SAN EKU
  key "$certs/$1.key"
  openssl req -new -key "$certs/$1.key" -subj "$3" -out "$tmp/$1.csr" 2>/dev/null
  cat > "$tmp/$1.ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=$5
subjectAltName=$4
EXT
  openssl x509 -req -in "$tmp/$1.csr" -CA "$certs/$2.crt" -CAkey "$certs/$2.key" \
    -CAcreateserial -CAserial "$tmp/$2.srl" -days "$days" -sha256 \
    -extfile "$tmp/$1.ext" -out "$certs/$1.crt" 2>/dev/null
}

ca mesh-ca "example mesh CA"
leaf web-workload mesh-ca "/" "critical,URI:spiffe://cluster.local/ns/shop/sa/web" serverAuth,clientAuth
ca pier-ca "pier CA"
leaf pier-client pier-ca "/" "critical,URI:spiffe://cluster.local/ns/edge/sa/pier" serverAuth,clientAuth
ca clients-ca "example clients CA"
leaf alice clients-ca "/CN=alice" "DNS:alice.example" clientAuth
ca edge-ca "example edge CA"
leaf edge edge-ca "/CN=app.example" "DNS:app.example" serverAuth
# pier presents its leaf and the CA that issued it.
cat "$certs/pier-client.crt" "$certs/pier-ca.crt" > "$certs/pier-client-chain.crt"

indent() { sed 's/^/    /' "$1"; }
config_map() { # NAME KEY FILE
  echo "apiVersion: v1"
  echo "kind: ConfigMap"
  echo "metadata: {name: $1, namespace: edge}"
  echo "data:"
  echo "  $2: |"
  indent "$3"
}
tls_secret() { # NAME CRT KEY
  echo "apiVersion: v1"
  echo "kind: Secret"
  echo "metadata: {name: $1, namespace: edge}"
  echo "type: kubernetes.io/tls"
  echo "stringData:"
  echo "  tls.crt: |"
  indent "$2"
  echo "  tls.key: |"
  indent "$3"
}
{
  echo "# Made by gen-certs.sh: trust bundles and certificates of the edge example."
  config_map mesh-ca ca-bundle.crt "$certs/mesh-ca.crt"
  echo "---"
  config_map clients-ca ca.crt "$certs/clients-ca.crt"
  echo "---"
  tls_secret pier-client "$certs/pier-client-chain.crt" "$certs/pier-client.key"
  echo "---"
  tls_secret edge-cert "$certs/edge.crt" "$certs/edge.key"
} > "$out/30-trust.yaml"
echo "wrote $certs and $out/30-trust.yaml"

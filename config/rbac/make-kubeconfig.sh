#!/usr/bin/env bash
# Makes a kubeconfig for pier's ServiceAccount (pier-system/pier by default), for running pier
# outside the cluster with exactly the rights of config/rbac/ (not yours).
#
#   kubectl apply -f config/rbac/
#   config/rbac/make-kubeconfig.sh -o pier.kubeconfig            # 24 h token (TokenRequest API)
#   config/rbac/make-kubeconfig.sh -o pier.kubeconfig -d 720h    # longer, if the cluster allows it
#   config/rbac/make-kubeconfig.sh -o pier.kubeconfig --long-lived
#   pier run --kubeconfig pier.kubeconfig
#
# The cluster (server, CA) comes from the current kubectl context (or --context). The context
# written sets namespace pier-system, where pier looks for its Lease by default.
#
# Tokens: the default is a bound token from `kubectl create token` (TokenRequest). It expires
# (the API server may cap --duration); run this again before then (e.g. from a timer): pier
# re-reads the kubeconfig when it changes, no restart needed.
# --long-lived instead creates a Secret of type kubernetes.io/service-account-token, which the
# cluster's token controller fills with a token that does not expire until the Secret is
# deleted (revoke with `kubectl -n pier-system delete secret pier-token`). Prefer short-lived
# tokens where you can rotate them.
set -euo pipefail

namespace=pier-system
account=pier
duration=24h
out=pier.kubeconfig
long_lived=false
context_args=()

usage() {
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  echo "options: [-n NAMESPACE] [-a SERVICEACCOUNT] [-d DURATION] [-o FILE] [--long-lived] [--context NAME]"
}

while (($#)); do
  case "$1" in
    -n | --namespace) namespace=$2; shift 2 ;;
    -a | --service-account) account=$2; shift 2 ;;
    -d | --duration) duration=$2; shift 2 ;;
    -o | --output) out=$2; shift 2 ;;
    --long-lived) long_lived=true; shift ;;
    --context) context_args=(--context "$2"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done

k() { kubectl "${context_args[@]}" "$@"; }

k -n "$namespace" get serviceaccount "$account" >/dev/null \
  || { echo "ServiceAccount $namespace/$account not found: kubectl apply -f config/rbac/ first" >&2; exit 1; }

view() { k config view --minify --raw -o "jsonpath={.clusters[0].cluster.$1}"; }
server=$(view server)
ca_data=$(view certificate-authority-data)
ca_file=$(view certificate-authority)
insecure=$(view insecure-skip-tls-verify)
if [[ -z "$ca_data" && -n "$ca_file" ]]; then
  ca_data=$(base64 -w0 <"$ca_file")
fi
[[ -n "$server" ]] || { echo "no cluster server in the kubectl context" >&2; exit 1; }

if $long_lived; then
  secret="$account-token"
  k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: $secret
  namespace: $namespace
  annotations:
    kubernetes.io/service-account.name: $account
type: kubernetes.io/service-account-token
EOF
  token=""
  for _ in $(seq 50); do
    token=$(k -n "$namespace" get secret "$secret" -o 'jsonpath={.data.token}' | base64 -d)
    [[ -n "$token" ]] && break
    sleep 0.2
  done
  [[ -n "$token" ]] || { echo "Secret $namespace/$secret got no token (no token controller?)" >&2; exit 1; }
else
  token=$(k -n "$namespace" create token "$account" --duration "$duration")
fi

if [[ -n "$ca_data" ]]; then
  tls="    certificate-authority-data: $ca_data"
elif [[ "$insecure" == "true" ]]; then
  tls="    insecure-skip-tls-verify: true"
else
  tls=""  # the server's certificate is signed by a CA in the system trust store
fi

umask 077
cat >"$out" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: pier-cluster
    cluster:
      server: $server
  $tls
users:
  - name: $account
    user:
      token: $token
contexts:
  - name: pier
    context:
      cluster: pier-cluster
      user: $account
      namespace: $namespace
current-context: pier
EOF
echo "wrote $out for system:serviceaccount:$namespace:$account ($server)" >&2

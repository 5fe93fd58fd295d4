# Sourced by scripts/callgrind-proxy.sh and scripts/perf-proxy.sh (not run on its own): the
# proxy to measure, from the caller's arguments `[pier [PIER_BIN] | nginx | relay]` (relay:
# HAProxy `mode tcp`, the harness's L4 relay floor; no MTLS), and where the
# harness (scripts/bench-peers.sh) left its configs. Expects ROOT; sets WHO, BIN, RUN, PORT,
# P_ADMIN, ORIGIN (the origin's directory under RUN). MTLS=1: the proxy's mTLS listener, whose
# upstream hop is TLS 1.3 with a client certificate to the mTLS origin.
WHO="${1:-pier}"
BIN="${2:-$ROOT/target/release/pier}"
. "$ROOT/scripts/bench-env.sh"
case "$WHO" in
  pier) [ -x "$BIN" ] || { echo "no pier binary at $BIN (cargo build --release)" >&2; exit 2; }
        PORT=$P_PIER ;;
  nginx) PORT=$P_NGINX ;;
  relay) PORT=$P_RELAY
         [ "${MTLS:-0}" = 1 ] && { echo "the relay has no mTLS upstream" >&2; exit 2; } ;;
  *) echo "usage: $0 [pier [PIER_BIN] | nginx | relay]" >&2; exit 2 ;;
esac
ORIGIN=origin
if [ "${MTLS:-0}" = 1 ]; then PORT=$((PORT + 1)); ORIGIN=origin-tls; fi

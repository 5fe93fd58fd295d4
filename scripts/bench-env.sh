# Sourced by the quick measuring scripts (ab-quick.sh, ab-pair.sh, proxy-common.sh), not run on
# its own: where scripts/bench-peers.sh left its configs, the harness's ports, and the origins.
# Expects ROOT. Sets RUN, PORT_BASE, P_NGINX, P_PIER, P_RELAY, P_ADMIN.
RUN="$ROOT/target/bench-peers"
PORT_BASE="${PORT_BASE:-19000}"
P_NGINX=$((PORT_BASE + 90)); P_PIER=$((PORT_BASE + 100)); P_RELAY=$((PORT_BASE + 105)); P_ADMIN=$((PORT_BASE + 901))
[ -f "$RUN/origin/nginx.conf" ] && [ -f "$RUN/nginx/nginx.conf" ] && [ -d "$RUN/pier/manifests" ] || {
  echo "run scripts/bench-peers.sh once first (it writes $RUN)" >&2; exit 2; }

# The plain and the mTLS origin on CPU 1, unless another call left them running; appends the
# pids of the ones it starts to ORIGIN_PIDS, for the caller to stop (so scripts/bench-peers.sh
# finds its ports free afterwards).
ORIGIN_PIDS=()
origins_up() {
  local o
  for o in origin origin-tls; do
    pgrep -f "$RUN/$o/nginx.conf" >/dev/null && continue
    taskset -c 1 nginx -p "$RUN/$o/" -c "$RUN/$o/nginx.conf" -e stderr >"$RUN/$o/stderr.log" 2>&1 &
    ORIGIN_PIDS+=($!)
    sleep 0.5
  done
}

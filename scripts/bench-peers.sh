#!/usr/bin/env bash
# pier against nginx and HAProxy as 1-core HTTP/1.1 reverse proxies: wrk -> proxy -> origin,
# everything on 127.0.0.1, plain and mTLS upstream, pooled upstream connections.
#
#   scripts/bench-peers.sh                    # every scenario (about 35 minutes on a quiet box)
#   scripts/bench-peers.sh pier nginx         # only these scenarios
#   scripts/bench-peers.sh --summary DIR/raw.tsv   # the table again from a saved run
#
# Scenarios: direct nginx pier haproxy relay nginx-mtls pier-mtls haproxy-mtls
#            close-direct close-nginx close-pier close-haproxy close-nginx-mtls close-pier-mtls
#            pier-log pier-trace1 pier-trace100, {,close-}{nginx,pier,haproxy}-{https,rsa}
#            {full,hs,hsr}-{nginx,pier,haproxy}-{https,rsa}, {nginx,pier,haproxy}-newtls,
#            {big,up,w2}-{nginx,pier,haproxy}, many-{nginx,pier} (not in the default set:
#            name them)
#   (run in this order, so each proxy's run sits next to the one it is paired with)
#   direct      wrk -> origin (the origin alone on the proxy's CPU): the one-hop limit of the box
#   relay       HAProxy `mode tcp` (1 thread, the proxy's CPU) in front of the plain origin: an L4
#               relay with no HTTP, each client connection relayed to its own upstream one. The
#               kernel path of a keep-alive proxy (the same four segments per request) and no
#               user-space HTTP work: the floor of the plain path's CPU per request. The table's
#               "L4 relay floor" lines: each proxy's CPU per request over the relay's (ratio of
#               the medians, then paired per round)
#   *-mtls      the upstream hop is TLS 1.3 with a client certificate, verified both ways
#   close-*     wrk sends `Connection: close`: a new client TCP connection per request (accept
#               and TCP handshake cost); upstream connections stay pooled
#   pier-log    pier with --access-log (text lines to a file)
#   pier-trace1, pier-trace100   pier with --otlp-endpoint (a sink on the origin's nginx that
#               answers 200 and discards) and --trace-sample-ratio 0.01 / 1
#   *-https, *-rsa   client TLS terminated by the proxy (TLS 1.3 from wrk), upstream plain; the
#               listener certificate is ECDSA P-256 (https) or RSA-2048 (rsa). close-*-https: a
#               new TLS connection per request that wrk *resumes* (its SSL_clear keeps the
#               session: PSK with ECDHE, no certificate, no signature; the run checks it)
#   full-*      as close-*, but the proxy keeps no session (nginx ssl_session_tickets off and
#               ssl_session_cache off, HAProxy no-tls-tickets and tune.ssl.cachesize 0, pier
#               --no-tls-session-resumption): a full handshake per request (checked)
#   hs-*, hsr-* new TLS connections as full-* and close-*, measured by scripts/conn-load
#               instead of wrk: it times the whole connection (connect, handshake, request,
#               response), so the time a connection waits to be accepted and handshaken is in
#               the percentiles (wrk starts its clock after the handshake). hs-*: full
#               handshakes (proxies as full-*, the client keeps no session); hsr-*: resumed
#               (proxies as configured, the client keeps its session). The run checks the
#               handshake kinds conn-load saw (hs: none resumed; hsr: at least 90 % resumed)
#   *-newtls    the mTLS upstream of *-mtls, but the origin closes after every response
#               (keepalive_timeout 0): a new upstream TLS connection per request, which each
#               proxy may resume (nginx proxy_ssl_session_reuse on, HAProxy's default, pier's
#               per-endpoint session cache); the run checks that the origin saw resumed sessions
#   big-*       GET of a 1 MiB response (the origin sends a file with sendfile), keep-alive;
#               nginx with proxy_max_temp_file_size 0 (its buffers, never a temporary file)
#   up-*        POST of a 1 MiB body (wrk -s, a Lua script), keep-alive; the origin reads it
#               whole and answers 200; nginx with proxy_request_buffering off (streamed, as pier
#               and HAProxy do by default). The table's "MiB/s per core" lines: 1 MiB divided
#               by the proxy's CPU per request
#   w2-*        every proxy with 2 workers (pier PIER_WORKER_THREADS=2, nginx
#               worker_processes 2, HAProxy nbthread 2) on W2_CPUS (0,1), wrk -t2 and the origin
#               on the same CPUs: the cores shared the same way for every proxy
#   many-*      MANY_CONNS (10000) active keep-alive connections from one wrk. A proxy holding
#               10 000 clients with a request each in flight also holds up to 10 000 upstream
#               connections, more than one process may open under this host's hard limit of
#               20 000 open files (not raisable here). So every proxy runs as two processes on
#               PROXY_CPU, each with half the clients: nginx with worker_processes 2, pier as
#               two processes sharing the port with --reuse-port (SO_REUSEPORT spreads the
#               clients between them), each with 1 worker, PIER_IDLE_SPIN_US=0 (as pier's
#               default for workers sharing cores) and --max-connections 16384, as
#               nginx's worker_connections; the origin with two workers on ORIGIN_CPU. CPU and
#               RSS are the two processes' sum. HAProxy is left out: it runs as one process.
#               MANY_PROCS=1: one process each (up to ~6 000 connections here); 1 or 2.
#               Both proxies keep up to 1 024 idle upstream connections per worker (nginx
#               `keepalive 1024`, pier's default); nginx closes one above that on release,
#               pier once it has sat unused for 5 s. NGINX_KEEPALIVE=8192 raises nginx's cache
#               (the nginx proxy's `keepalive` in every scenario) so that neither closes any
#               under this load.
#   Large bodies, one command:  scripts/bench-peers.sh big-{nginx,pier,haproxy} up-{nginx,pier,haproxy}
#   Two workers, one command:   scripts/bench-peers.sh w2-nginx w2-pier w2-haproxy
#   New upstream TLS connections, one command:
#     scripts/bench-peers.sh nginx-newtls pier-newtls haproxy-newtls
#   New TLS connections, resumed and full, one command:
#     scripts/bench-peers.sh close-{nginx,pier,haproxy}-{https,rsa} full-{nginx,pier,haproxy}-{https,rsa}
#   The same timed per whole connection (built on first use:
#   cargo build --release --manifest-path scripts/conn-load/Cargo.toml), one command:
#     scripts/bench-peers.sh hs-{nginx,pier,haproxy}-{https,rsa} hsr-{nginx,pier,haproxy}-{https,rsa}
#   The cost of observability, one command (the table's second part: ratios to `pier`, same
#   rounds):  scripts/bench-peers.sh pier pier-log pier-trace1 pier-trace100
#
# Method (as in the team's reference method for peer benchmarks): the proxy is pinned to
# PROXY_CPU (pier with PIER_WORKER_THREADS=1; nginx and HAProxy with 1 worker), wrk and the
# origin share ORIGIN_CPU/WRK_CPU. The runs are interleaved: REPS rounds, each running every
# scenario once (even rounds in reverse order) (an unrecorded warm-up at c=256 for WARMUP, then one run per concurrency), so
# that a slow minute on a shared host is spread over all proxies instead of landing on one
# (INTERLEAVE=0: all REPS runs of a scenario back to back, as before). Per run: req/s, p50, p99, non-2xx and socket errors, proxy
# CPU per request (utime+stime of the proxy's processes over the run / requests), proxy RSS
# sampled half-way through the run.
#
# Contention guard: the box is shared. Before starting, the 1-minute load average must fall to
# LOAD_MAX (waits up to LOAD_WAIT seconds). Before each run, the CPUs must be quiet for
# QUIET_SECS. After each run, any process outside this script's tree that used more than
# PROC_MAX % of a CPU, or foreign CPU in total above FOREIGN_MAX % of the machine, makes the
# run contended: it is retried up to RETRIES times, then the script exits 3 without a table.
# FORCE=1 measures anyway and marks the table "not valid: machine busy".
#
# Knobs (env): DURATION=8s REPS=7 CONNS="64 256" WARMUP=2s WRK_CPU=1 PROXY_CPU=0 ORIGIN_CPU=1
#   LOAD_MAX=0.5 LOAD_WAIT=600 QUIET_PCT=10 QUIET_SECS=2 QUIET_WAIT=300 PROC_MAX=10
#   FOREIGN_MAX=10 RETRIES=3 FORCE=0 INTERLEAVE=1 W2_CPUS=0,1 MANY_CONNS=10000 MANY_PROCS=2 NGINX_KEEPALIVE=1024 PIER_BIN=target/release/pier RUN_DIR=target/bench-peers
#   CONN_LOAD=scripts/conn-load/target/release/conn-load
#   PORT_BASE=19000 (ports PORT_BASE+81 .. +105, +443, +444, +901 and +902 on 127.0.0.1)
# Needs: wrk nginx haproxy openssl curl taskset (installed with apt-get when missing) and a
# release build of pier (`cargo build --release`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DURATION="${DURATION:-8s}"
REPS="${REPS:-7}"
CONNS="${CONNS:-64 256}"
WARMUP="${WARMUP:-2s}"
WRK_CPU="${WRK_CPU:-1}"
PROXY_CPU="${PROXY_CPU:-0}"
ORIGIN_CPU="${ORIGIN_CPU:-1}"
LOAD_MAX="${LOAD_MAX:-0.5}"
LOAD_WAIT="${LOAD_WAIT:-600}"
QUIET_PCT="${QUIET_PCT:-10}"
QUIET_SECS="${QUIET_SECS:-2}"
QUIET_WAIT="${QUIET_WAIT:-300}"
PROC_MAX="${PROC_MAX:-10}"
FOREIGN_MAX="${FOREIGN_MAX:-10}"
RETRIES="${RETRIES:-3}"
FORCE="${FORCE:-0}"
INTERLEAVE="${INTERLEAVE:-1}"
W2_CPUS="${W2_CPUS:-0,1}"
MANY_CONNS="${MANY_CONNS:-10000}"
MANY_PROCS="${MANY_PROCS:-2}"
NGINX_KEEPALIVE="${NGINX_KEEPALIVE:-1024}"
case "$MANY_PROCS" in 1 | 2) ;; *) echo "MANY_PROCS must be 1 or 2 (pier's admin ports are PORT_BASE+901 and +902)" >&2; exit 2 ;; esac
PIER_BIN="${PIER_BIN:-$ROOT/target/release/pier}"
CONN_LOAD="${CONN_LOAD:-$ROOT/scripts/conn-load/target/release/conn-load}"
RUN="${RUN_DIR:-$ROOT/target/bench-peers}"
PORT_BASE="${PORT_BASE:-19000}"

P_ORIGIN=$((PORT_BASE + 81))
P_SINK=$((PORT_BASE + 82))
P_ORIGIN_TLS=$((PORT_BASE + 443))
P_ORIGIN_TLS_CLOSE=$((PORT_BASE + 444))
P_NGINX=$((PORT_BASE + 90))
P_NGINX_TLS=$((PORT_BASE + 91))
P_HAPROXY=$((PORT_BASE + 95))
P_HAPROXY_TLS=$((PORT_BASE + 96))
P_PIER=$((PORT_BASE + 100))
P_PIER_TLS=$((PORT_BASE + 101))
# client TLS terminated by the proxy (upstream plain): ECDSA P-256 and RSA-2048 certificates
P_NGINX_HTTPS=$((PORT_BASE + 92))
P_NGINX_RSA=$((PORT_BASE + 93))
P_HAPROXY_HTTPS=$((PORT_BASE + 97))
P_HAPROXY_RSA=$((PORT_BASE + 98))
P_PIER_HTTPS=$((PORT_BASE + 102))
P_PIER_RSA=$((PORT_BASE + 103))
# mTLS upstream whose origin closes after every response
P_NGINX_NEWTLS=$((PORT_BASE + 94))
P_HAPROXY_NEWTLS=$((PORT_BASE + 99))
P_PIER_NEWTLS=$((PORT_BASE + 104))
# the L4 relay (HAProxy mode tcp) to the plain origin
P_RELAY=$((PORT_BASE + 105))
P_ADMIN=$((PORT_BASE + 901))
SNI=echo.demo.svc.cluster.local
EDGE=edge.bench

# The order runs pier right next to nginx (and HAProxy right next to pier) in every round, in
# both directions: a paired ratio compares runs about 15 s apart, not a minute.
ALL="direct nginx pier haproxy relay nginx-mtls pier-mtls haproxy-mtls close-direct close-nginx close-pier close-haproxy close-nginx-mtls close-pier-mtls"
# Named only: pier with its access log or tracing on, paired with plain `pier`; client TLS
# terminated by the proxy, kept alive and a new TLS connection per request (issue 19).
EXTRA="pier-log pier-trace1 pier-trace100 nginx-https pier-https haproxy-https close-nginx-https close-pier-https close-haproxy-https nginx-rsa pier-rsa haproxy-rsa close-nginx-rsa close-pier-rsa close-haproxy-rsa full-nginx-https full-pier-https full-haproxy-https full-nginx-rsa full-pier-rsa full-haproxy-rsa hs-nginx-https hs-pier-https hs-haproxy-https hs-nginx-rsa hs-pier-rsa hs-haproxy-rsa hsr-nginx-https hsr-pier-https hsr-haproxy-https hsr-nginx-rsa hsr-pier-rsa hsr-haproxy-rsa nginx-newtls pier-newtls haproxy-newtls big-nginx big-pier big-haproxy up-nginx up-pier up-haproxy w2-nginx w2-pier w2-haproxy many-nginx many-pier"

# ---------- the table: median of the reps [min-max], ratios to nginx and to direct ----------
# "vs nginx" columns: the ratio of the two medians, then the paired ratio: per round, this
# proxy's run against nginx's run of the same round (seconds apart for pier, and rounds alternate
# the scenario order), median [min-max] over the rounds. On a host whose speed drifts by tens of
# percent over minutes, the paired ratio is the steadier of the two.
summarize() { # raw.tsv [busy-note]
  awk -F'\t' -v note="${2:-}" '
    function sortn(s, a,   n, i, j, t) { n = split(s, a, " "); for (i = 2; i <= n; i++) { t = a[i] + 0
        for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }; return n }
    function med(s,   a, n) { n = sortn(s, a); lo = a[1]; hi = a[n]; return n ? a[int((n + 1) / 2)] : 0 }
    function ms(v) { return v >= 1000 ? sprintf("%.2f ms", v / 1000) : sprintf("%.0f µs", v) }
    function peer(sc, who,   p) { p = sc; sub(/(nginx|haproxy|pier)/, who, p); return p }
    function base(sc) { return sc ~ /-(https|rsa|newtls)$/ ? "" : sc ~ /^close-/ ? "close-direct" : "direct" }
    # ratio column: medians ratio, then the paired per-round ratios median [min-max]
    function vs(k, ng, arr, mine, theirs,   r, s, n, x, m) {
      if (!(ng in theirs) || theirs[ng] <= 0) return "-"
      s = ""; n = split(reps[k], r, " ")
      for (x = 1; x <= n; x++) if ((ng SUBSEP r[x]) in arr && arr[ng SUBSEP r[x]] > 0)
        s = s " " sprintf("%.4f", arr[k SUBSEP r[x]] / arr[ng SUBSEP r[x]])
      if (s == "") return sprintf("%.2f", mine / theirs[ng])
      m = med(s); return sprintf("%.2f · %.2f [%.2f–%.2f]", mine / theirs[ng], m, lo, hi)
    }
    FNR == 1 { next }
    { k = $1 SUBSEP $2; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
      rps[k] = rps[k] " " $4; p50[k] = p50[k] " " $5; p99[k] = p99[k] " " $6
      R[k SUBSEP $3] = $4; Q[k SUBSEP $3] = $6; PC[k SUBSEP $3] = $10; reps[k] = reps[k] " " $3
      errs[k] = errs[k] (errs[k] == "" ? "" : " ") $8 "/" $7
      if ($9 != "-" && $9 + 0 > rss[k] + 0) rss[k] = $9
      pc[k] = pc[k] " " $10; if ($12 != "ok") busy = 1 }
    END {
      for (i = 1; i <= n; i++) { k = order[i]; m[k] = med(rps[k]); mq[k] = med(p99[k]); if (pc[k] !~ /-/) mc[k] = med(pc[k]) }
      if (note != "" || busy) print "**not valid: machine busy** (" (note != "" ? note : "contended runs kept with FORCE=1") ")\n"
      print "| scenario | c | req/s median [min–max] | p50 | p99 median [min–max] | proxy CPU µs/req | proxy RSS | req/s vs nginx: medians · paired [min–max] | p99 vs nginx: medians · paired [min–max] | vs direct | non-2xx/socket errors per run |"
      print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
      for (i = 1; i <= n; i++) { k = order[i]; split(k, kk, SUBSEP); sc = kk[1]; c = kk[2]
        r = med(rps[k]); rl = lo; rh = hi; q = med(p99[k]); ql = lo; qh = hi
        ng = peer(sc, "nginx") SUBSEP c; dr = base(sc) SUBSEP c
        isp = sc ~ /nginx|haproxy|pier/
        vn = isp ? vs(k, ng, R, r, m) : "-"; vq = isp ? vs(k, ng, Q, q, mq) : "-"
        vd = (sc !~ /direct/ && (dr in m) && m[dr] > 0) ? sprintf("%.2f", r / m[dr]) : "-"
        cpu = pc[k] ~ /-/ ? "-" : sprintf("%.1f", med(pc[k]))
        mem = (k in rss) && rss[k] > 0 ? sprintf("%.1f MiB", rss[k] / 1024) : "-"
        printf "| %s | %s | %.0f [%.0f–%.0f] | %s | %s [%s–%s] | %s | %s | %s | %s | %s | %s |\n", sc, c, r, rl, rh,
          ms(med(p50[k])), ms(q), ms(ql), ms(qh), cpu, mem, vn, vq, vd, errs[k]
        if (sc ~ /^(close-|full-|hs-|hsr-|big-|up-|w2-)?pier(-mtls|-https|-rsa|-newtls)?$/) {   # the acceptance lines of issue 5, from the paired ratios
          pr = vn; sub(/^[^·]*· /, "", pr); sub(/ .*/, "", pr); pq = vq; sub(/^[^·]*· /, "", pq); sub(/ .*/, "", pq)
          nk = peer(sc, "nginx") SUBSEP c; hk = peer(sc, "haproxy") SUBSEP c
          ph = (hk in m) ? vs(k, hk, R, r, m) : "-"; sub(/^[^·]*· /, "", ph); sub(/ .*/, "", ph)
          acc[++na] = sprintf("%s c=%s: req/s %s× nginx (%s), %s× haproxy, p99 %s× nginx (%s), RSS %.2f× nginx, errors %s", sc, c,
            pr, (pr + 0 >= 1 ? "ok" : "below"), ph, pq, (pq + 0 <= 1 ? "ok" : "above"),
            (rss[nk] > 0 ? rss[k] / rss[nk] : 0), (errs[k] ~ /[1-9]/ ? errs[k] : "none")) } }
      if (na) { print ""; print "Paired medians for pier (acceptance: req/s ≥ 1.0× and p99 ≤ 1.0× nginx, RSS ≤ 2×, no errors):"
        for (i = 1; i <= na; i++) print "- " acc[i] }
      # The L4 relay floor: the CPU per request of each proxy over the relay (`vs`: ratio of
      # the medians, then paired per round).
      nf = 0
      for (i = 1; i <= n; i++) { k = order[i]; split(k, kk, SUBSEP); sc = kk[1]; c = kk[2]; rk = "relay" SUBSEP c
        if (sc !~ /^(nginx|pier|haproxy)$/ || !(rk in mc)) continue
        fl[++nf] = sprintf("- %s c=%s: CPU per request over the relay: %s (%.1f against %.1f µs)",
          sc, c, vs(k, rk, PC, mc[k], mc), mc[k], mc[rk]) }
      if (nf) { print ""; print "L4 relay floor (HAProxy mode tcp, the same four segments per request, no HTTP):"
        for (i = 1; i <= nf; i++) print fl[i] }
      # Large bodies: 1 MiB per request, so MiB/s per core of the proxy = 1e6 / CPU µs per request.
      nl = 0
      for (i = 1; i <= n; i++) { k = order[i]; split(k, kk, SUBSEP); sc = kk[1]; c = kk[2]
        if (sc !~ /^(big|up)-/ || pc[k] ~ /-/) continue
        cpu = med(pc[k]); ng = peer(sc, "nginx") SUBSEP c; ncpu = (ng in pc) ? med(pc[ng]) : 0
        big[++nl] = sprintf("- %s c=%s: %.0f MiB/s per proxy core (CPU %.0f µs per MiB)%s, %.0f MiB/s through, peak RSS %.1f MiB",
          sc, c, 1e6 / cpu, cpu, (ncpu > 0 && sc !~ /nginx/ ? sprintf(", %.2f× nginx per core", ncpu / cpu) : ""),
          med(rps[k]), rss[k] / 1024) }
      if (nl) { print ""; print "Large bodies (1 MiB a request):"; for (i = 1; i <= nl; i++) print big[i] }
      # The cost of observability: pier with the access log or tracing against pier without
      # them, same rounds (issue 16).
      nb = 0
      for (i = 1; i <= n; i++) { k = order[i]; split(k, kk, SUBSEP); sc = kk[1]; c = kk[2]
        if (sc !~ /^pier-(log|trace)/) continue
        pk = "pier" SUBSEP c; if (!(pk in m)) continue
        s = ""; cs = ""; nr = split(reps[k], rr, " ")
        for (x = 1; x <= nr; x++) if ((pk SUBSEP rr[x]) in R && R[pk SUBSEP rr[x]] > 0) {
          s = s " " sprintf("%.4f", R[k SUBSEP rr[x]] / R[pk SUBSEP rr[x]])
          if ((pk SUBSEP rr[x]) in PC && PC[pk SUBSEP rr[x]] > 0)
            cs = cs " " sprintf("%.4f", PC[k SUBSEP rr[x]] / PC[pk SUBSEP rr[x]]) }
        rm = "-"; if (s != "") { x = med(s); rm = sprintf("%.3f [%.2f–%.2f]", x, lo, hi) }
        cm = "-"; if (cs != "") { x = med(cs); cm = sprintf("%.3f [%.2f–%.2f]", x, lo, hi) }
        obs[++nb] = sprintf("| %s | %s | %.0f | %.0f | %s | %s | %s | %s |", sc, c, med(rps[k]), med(rps[pk]), rm,
          med(pc[k]) "", med(pc[pk]) "", cm) }
      if (nb) { print ""; print "Cost of observability against pier without it (paired per round: median [min–max]):"; print ""
        print "| scenario | c | req/s | pier req/s | req/s ratio | CPU µs/req | pier CPU µs/req | CPU µs/req ratio |"
        print "|---|---:|---:|---:|---:|---:|---:|---:|"
        for (i = 1; i <= nb; i++) print obs[i] }
    }' "$1"
}
if [ "${1:-}" = --summary ]; then shift; summarize "$@"; exit 0; fi

SCENARIOS="${*:-$ALL}"
for sc in $SCENARIOS; do
  case " $ALL $EXTRA " in *" $sc "*) ;; *) echo "unknown scenario: $sc (known: $ALL $EXTRA)" >&2; exit 2 ;; esac
done

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# ---------- tools ----------
need=()
for t in wrk nginx haproxy openssl curl taskset; do
  command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] || need+=("$t")
done
if ((${#need[@]})); then
  pkgs=(); for t in "${need[@]}"; do [ "$t" = taskset ] && pkgs+=(util-linux) || pkgs+=("$t"); done
  log "installing ${pkgs[*]} (apt-get)"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}" >&2
fi
export PATH="$PATH:/usr/sbin"
if [[ " $SCENARIOS " == *" hs-"* || " $SCENARIOS " == *" hsr-"* ]] && [ ! -x "$CONN_LOAD" ]; then
  log "building scripts/conn-load (the whole-connection client)"
  cargo build --release --quiet --manifest-path "$ROOT/scripts/conn-load/Cargo.toml" >&2
  CONN_LOAD="$ROOT/scripts/conn-load/target/release/conn-load"
fi
if [[ " $SCENARIOS " == *" pier"* || " $SCENARIOS " == *"-pier"* ]] && [ ! -x "$PIER_BIN" ]; then
  echo "no pier binary at $PIER_BIN: run cargo build --release first (or set PIER_BIN)" >&2; exit 1
fi
for port in $P_ORIGIN $P_SINK $P_ORIGIN_TLS $P_NGINX $P_NGINX_TLS $P_HAPROXY $P_HAPROXY_TLS $P_PIER $P_PIER_TLS $P_ADMIN \
  $P_NGINX_HTTPS $P_NGINX_RSA $P_HAPROXY_HTTPS $P_HAPROXY_RSA $P_PIER_HTTPS $P_PIER_RSA \
  $P_ORIGIN_TLS_CLOSE $P_NGINX_NEWTLS $P_HAPROXY_NEWTLS $P_PIER_NEWTLS $P_RELAY $((P_ADMIN + 1)); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is in use on 127.0.0.1 (another run still alive? set PORT_BASE)" >&2; exit 1
  fi
done

STAMP="$(date +%Y%m%d-%H%M%S)"
OUT="$RUN/results/$STAMP"
RAW="$OUT/raw.tsv"
CERTS="$RUN/certs"
mkdir -p "$OUT" "$CERTS"

# ---------- process control: every process started here is stopped by PID on exit ----------
PIDS=()
stop_pid() { # TERM, KILL after 5 s
  local i
  kill -TERM "$1" 2>/dev/null || true
  for i in $(seq 1 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  for i in "${!PIDS[@]}"; do [ "${PIDS[$i]}" = "$1" ] && unset 'PIDS[i]'; done
  return 0
}
cleanup() { local p; for p in "${PIDS[@]:-}"; do [ -n "$p" ] && stop_pid "$p"; done; return 0; }
trap cleanup EXIT
trap 'exit 130' INT TERM

start_bg() { # cpu logfile cmd...; sets LAST_PID
  local cpu="$1" lf="$2"; shift 2
  taskset -c "$cpu" "$@" >"$lf" 2>&1 &
  LAST_PID=$!; PIDS+=("$LAST_PID")
}
wait_ok() { # url [curl args...]: up to 10 s for a 200
  local url="$1" i; shift
  for i in $(seq 1 100); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$@" "$url" 2>/dev/null)" = 200 ] && return 0
    sleep 0.1
  done
  echo "no 200 from $url" >&2; return 1
}
family() { echo "$1"; pgrep -P "$1" 2>/dev/null || true; } # pid and its children
ticks() { # utime+stime of pids, clock ticks
  local p t=0 v
  for p in "$@"; do v=$(awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$p/stat" 2>/dev/null || echo 0); t=$((t + ${v:-0})); done
  echo "$t"
}
rss_kb() { local p t=0 v; for p in "$@"; do v=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0); t=$((t + ${v:-0})); done; echo "$t"; }

# ---------- contention guard ----------
loadavg() { cut -d' ' -f1 /proc/loadavg; }
all_busy() { awk '/^cpu / {print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
# every process: pid ppid own-ticks (utime+stime) ticks-with-reaped-children comm; kernel threads skipped
proc_snap() {
  cat /proc/[0-9]*/stat 2>/dev/null | awk 'NF {
    pid = $1; c = $0; sub(/^[0-9]+ \(/, "", c); comm = c; sub(/\) [A-Za-z] .*$/, "", comm); gsub(/ /, "_", comm)
    sub(/.*\) /, "", c); split(c, f, " ")
    if (f[2] == 2 || pid == 2) next
    print pid, f[2], f[12] + f[13], f[12] + f[13] + f[14] + f[15], comm }'
}
# processes outside this script's tree that used more than PROC_MAX % of one CPU between snapshots
foreign_procs() { # before after seconds
  awk -v self=$$ -v secs="$3" -v max="$PROC_MAX" -v hz="$(getconf CLK_TCK)" '
    FNR == NR { t0[$1] = $3; next }
    { pp[$1] = $2; t1[$1] = $3; cm[$1] = $5 }
    END {
      for (p in t1) { q = p; mine = 0
        for (d = 0; d < 64 && q > 1; d++) { if (q == self) { mine = 1; break }; q = pp[q] }
        if (mine) continue
        pct = 100 * (t1[p] - (p in t0 ? t0[p] : 0)) / hz / secs
        if (pct > max) printf "%s(%s) %.0f%% ", cm[p], p, pct }
    }' "$1" "$2"
}
wait_quiet() { # QUIET_SECS consecutive seconds under QUIET_PCT % busy (both CPUs)
  local waited=0 quiet=0 a b pct
  while :; do
    a=$(all_busy); sleep 1; b=$(all_busy)
    pct=$(awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " "); d = y[2] - x[2]; print (d > 0 ? int(100 * (y[1] - x[1]) / d) : 0) }')
    waited=$((waited + 1))
    if [ "$pct" -le "$QUIET_PCT" ]; then quiet=$((quiet + 1)); [ "$quiet" -ge "$QUIET_SECS" ] && return 0; continue; fi
    quiet=0
    [ "$waited" -ge "$QUIET_WAIT" ] && { log "still ${pct}% busy after ${QUIET_WAIT}s"; return 1; }
    [ $((waited % 30)) -eq 1 ] && log "waiting for quiet CPUs (${pct}% busy)"
  done
}
BUSY_NOTE=""
busy() { # message: refuse, or note it with FORCE=1
  if [ "$FORCE" = 1 ]; then log "BUSY (FORCE=1, measuring anyway): $*"; BUSY_NOTE="${BUSY_NOTE:+$BUSY_NOTE; }$*"; return 0; fi
  echo "refusing to report: the machine is busy: $*" >&2
  echo "rerun on a quiet machine, or FORCE=1 to get a table marked 'not valid: machine busy'" >&2
  exit 3
}

# ---------- certificates (EC P-256) ----------
gen_certs() {
  local d="$CERTS"
  [ -f "$d/echo.crt" ] && [ -f "$d/gateway-client.pem" ] && [ -f "$d/edge-rsa.pem" ] && return 0
  key() { # file [rsa]
    if [ "${2:-}" = rsa ]; then openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1" 2>/dev/null
    else openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; fi
  }
  ca() { # name CN
    key "$d/$1.key"
    openssl req -x509 -new -key "$d/$1.key" -sha256 -days 3650 -subj "/O=bench/CN=$2" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -addext "subjectKeyIdentifier=hash" -out "$d/$1.crt" 2>/dev/null
  }
  leaf() { # name ca CN SAN EKU [rsa]
    key "$d/$1.key" "${6:-}"
    printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\nsubjectAltName=%s\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n' \
      "$5" "$4" >"$d/$1.ext"
    openssl req -new -key "$d/$1.key" -subj "/O=bench/CN=$3" -out "$d/$1.csr" 2>/dev/null
    openssl x509 -req -in "$d/$1.csr" -CA "$d/$2.crt" -CAkey "$d/$2.key" -CAcreateserial \
      -sha256 -days 825 -extfile "$d/$1.ext" -out "$d/$1.crt" 2>/dev/null
    rm -f "$d/$1.csr" "$d/$1.ext"
  }
  ca mesh-ca "mesh CA"
  ca gateway-ca "gateway CA"
  leaf echo mesh-ca "$SNI" "DNS:$SNI,IP:127.0.0.1,URI:spiffe://cluster.local/ns/demo/sa/echo" serverAuth
  leaf gateway-client gateway-ca gateway "URI:spiffe://cluster.local/ns/gateway/sa/gateway" clientAuth
  cat "$d/gateway-client.crt" "$d/gateway-client.key" >"$d/gateway-client.pem"
  # the proxies' own listener certificates (wrk does not verify them)
  leaf edge gateway-ca "$EDGE" "DNS:$EDGE,IP:127.0.0.1" serverAuth
  leaf edge-rsa gateway-ca "$EDGE" "DNS:$EDGE,IP:127.0.0.1" serverAuth rsa
  cat "$d/edge.crt" "$d/edge.key" >"$d/edge.pem"
  cat "$d/edge-rsa.crt" "$d/edge-rsa.key" >"$d/edge-rsa.pem"
  chmod 644 "$d"/*.key "$d"/*.pem
  openssl verify -CAfile "$d/mesh-ca.crt" "$d/echo.crt" >/dev/null
  openssl verify -CAfile "$d/gateway-ca.crt" "$d/gateway-client.crt" >/dev/null
}

# ---------- configurations ----------
write_configs() {
  local temps="client_body_temp_path tmp/body; proxy_temp_path tmp/proxy; fastcgi_temp_path tmp/fastcgi; uwsgi_temp_path tmp/uwsgi; scgi_temp_path tmp/scgi;"
  mkdir -p "$RUN/origin/tmp" "$RUN/origin-tls/tmp" "$RUN/nginx/tmp" "$RUN/pier/manifests"
  head -c 1048576 /dev/urandom >"$RUN/origin/big.bin"
  printf 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/octet-stream"\nwrk.body = string.rep("a", 1048576)\n' >"$RUN/up.lua"
  cat >"$RUN/origin/nginx.conf" <<EOF
# plain origin: 200 with a 13-byte body
worker_processes 1; daemon off; pid nginx.pid; error_log stderr warn;
events { worker_connections 8192; }
http {
  access_log off; default_type text/plain; keepalive_requests 10000000; keepalive_timeout 75s; $temps
  server { listen 127.0.0.1:$P_ORIGIN backlog=4096; location / { return 200 "hello, world\n"; }
    # big-*: a 1 MiB file; up-*: the body read whole into memory, then 200 from the sink
    # (the body is not passed on)
    location = /big { alias $RUN/origin/big.bin; sendfile on; }
    location = /up { client_max_body_size 2m; client_body_buffer_size 2m; proxy_pass_request_body off;
      proxy_set_header Content-Length ""; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_pass http://sink/; } }
  upstream sink { server 127.0.0.1:$P_SINK; keepalive 64; }
  # the OTLP/HTTP sink of the pier-trace* scenarios: accepts every export, discards it (an
  # empty body is an empty ExportTraceServiceResponse)
  server { listen 127.0.0.1:$P_SINK; client_max_body_size 64m; location / { return 200 ""; } }
}
EOF
  # many-*: two workers, each able to hold half of MANY_CONNS upstream connections
  sed -e 's/^worker_processes 1;/worker_processes 2; worker_rlimit_nofile 20000;/' \
    -e 's/worker_connections 8192;/worker_connections 16384;/' "$RUN/origin/nginx.conf" >"$RUN/origin/nginx-many.conf"
  cat >"$RUN/origin-tls/nginx.conf" <<EOF
# mTLS origin: mesh workload certificate, requires a client certificate from the gateway CA
worker_processes 1; daemon off; pid nginx.pid; error_log stderr warn;
events { worker_connections 8192; }
http {
  access_log off; default_type text/plain; keepalive_requests 10000000; keepalive_timeout 75s; $temps
  server {
    listen 127.0.0.1:$P_ORIGIN_TLS ssl backlog=4096;
    ssl_certificate $CERTS/echo.crt; ssl_certificate_key $CERTS/echo.key;
    ssl_client_certificate $CERTS/gateway-ca.crt; ssl_verify_client on; ssl_verify_depth 2;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache shared:SSL:10m; ssl_session_tickets on;
    location / { return 200 "hello, world\n"; }
    location = /debug { add_header X-Client-Verify \$ssl_client_verify always; add_header X-Client-S-DN \$ssl_client_s_dn always; return 200 "hello, world\n"; }
  }
  # the same, closing after every response (the *-newtls scenarios); /debug also says whether
  # the TLS session was resumed ("r") or new (".")
  server {
    listen 127.0.0.1:$P_ORIGIN_TLS_CLOSE ssl backlog=4096; keepalive_timeout 0;
    ssl_certificate $CERTS/echo.crt; ssl_certificate_key $CERTS/echo.key;
    ssl_client_certificate $CERTS/gateway-ca.crt; ssl_verify_client on; ssl_verify_depth 2;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache shared:SSL:10m; ssl_session_tickets on;
    location / { return 200 "hello, world\n"; }
    location = /debug { add_header X-Client-Verify \$ssl_client_verify always; add_header X-Client-S-DN \$ssl_client_s_dn always;
      add_header X-Session-Reused \$ssl_session_reused always; return 200 "hello, world\n"; }
  }
}
EOF
  cat >"$RUN/nginx/nginx.conf" <<EOF
# nginx as the proxy under test: 1 worker, upstream keep-alive; mTLS with client cert + verification
worker_processes 1; daemon off; pid nginx.pid; error_log stderr warn; worker_rlimit_nofile 20000;
events { worker_connections 16384; }
http {
  access_log off; keepalive_requests 10000000; keepalive_timeout 75s; $temps
  upstream plain { server 127.0.0.1:$P_ORIGIN; keepalive $NGINX_KEEPALIVE; keepalive_requests 10000000; }
  upstream mtls  { server 127.0.0.1:$P_ORIGIN_TLS; keepalive $NGINX_KEEPALIVE; keepalive_requests 10000000; }
  upstream mtls_close { server 127.0.0.1:$P_ORIGIN_TLS_CLOSE; }
  proxy_ssl_certificate $CERTS/gateway-client.crt; proxy_ssl_certificate_key $CERTS/gateway-client.key;
  proxy_ssl_trusted_certificate $CERTS/mesh-ca.crt; proxy_ssl_verify on; proxy_ssl_verify_depth 2;
  proxy_ssl_name $SNI; proxy_ssl_server_name on; proxy_ssl_protocols TLSv1.2 TLSv1.3; proxy_ssl_session_reuse on;
  server { listen 127.0.0.1:$P_NGINX backlog=4096;
    location / { proxy_pass http://plain; proxy_http_version 1.1; proxy_set_header Connection ""; }
    location = /big { proxy_pass http://plain; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_max_temp_file_size 0; }
    location = /up { proxy_pass http://plain; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_request_buffering off; client_max_body_size 2m; } }
  server { listen 127.0.0.1:$P_NGINX_TLS backlog=4096;
    location / { proxy_pass https://mtls; proxy_http_version 1.1; proxy_set_header Connection ""; } }
  server { listen 127.0.0.1:$P_NGINX_NEWTLS backlog=4096;
    location / { proxy_pass https://mtls_close; proxy_http_version 1.1; proxy_set_header Connection ""; } }
  # client TLS terminated here (TLS 1.2 and 1.3, nginx's default session cache: none)
  ssl_protocols TLSv1.2 TLSv1.3;
  server { listen 127.0.0.1:$P_NGINX_HTTPS ssl backlog=4096; ssl_certificate $CERTS/edge.crt; ssl_certificate_key $CERTS/edge.key;
    location / { proxy_pass http://plain; proxy_http_version 1.1; proxy_set_header Connection ""; } }
  server { listen 127.0.0.1:$P_NGINX_RSA ssl backlog=4096; ssl_certificate $CERTS/edge-rsa.crt; ssl_certificate_key $CERTS/edge-rsa.key;
    location / { proxy_pass http://plain; proxy_http_version 1.1; proxy_set_header Connection ""; } }
}
EOF
  cat >"$RUN/haproxy.cfg" <<EOF
# HAProxy as the proxy under test: 1 thread, server-side keep-alive (http-reuse always)
global
    nbthread 1
    maxconn 8000
    ssl-server-verify required
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 75s
    http-reuse always
frontend fe_plain
    bind 127.0.0.1:$P_HAPROXY backlog 4096
    default_backend be_plain
frontend fe_mtls
    bind 127.0.0.1:$P_HAPROXY_TLS backlog 4096
    default_backend be_mtls
frontend fe_newtls
    bind 127.0.0.1:$P_HAPROXY_NEWTLS backlog 4096
    default_backend be_newtls
frontend fe_https
    bind 127.0.0.1:$P_HAPROXY_HTTPS backlog 4096 ssl crt $CERTS/edge.pem
    default_backend be_plain
frontend fe_rsa
    bind 127.0.0.1:$P_HAPROXY_RSA backlog 4096 ssl crt $CERTS/edge-rsa.pem
    default_backend be_plain
frontend fe_relay
    mode tcp
    bind 127.0.0.1:$P_RELAY backlog 4096
    default_backend be_relay
backend be_plain
    server origin 127.0.0.1:$P_ORIGIN maxconn 10000
backend be_relay
    mode tcp
    server origin 127.0.0.1:$P_ORIGIN maxconn 10000
backend be_mtls
    server origin 127.0.0.1:$P_ORIGIN_TLS maxconn 10000 ssl verify required ca-file $CERTS/mesh-ca.crt crt $CERTS/gateway-client.pem sni str($SNI) verifyhost $SNI
backend be_newtls
    server origin 127.0.0.1:$P_ORIGIN_TLS_CLOSE maxconn 10000 ssl verify required ca-file $CERTS/mesh-ca.crt crt $CERTS/gateway-client.pem sni str($SNI) verifyhost $SNI
EOF
  local m="$RUN/pier/manifests"
  cat >"$m/gateway.yaml" <<EOF
# pier under test: listener "plain" -> plain origin, listener "mtls" -> meshed route (mTLS origin)
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pier}
spec: {controllerName: pier.dev/gateway-controller}
---
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: bench, namespace: demo}
spec:
  gatewayClassName: pier
  listeners:
    - {name: plain, protocol: HTTP, port: $P_PIER}
    - {name: mtls, protocol: HTTP, port: $P_PIER_TLS}
    - {name: newtls, protocol: HTTP, port: $P_PIER_NEWTLS}
    - {name: https, protocol: HTTPS, port: $P_PIER_HTTPS, tls: {certificateRefs: [{name: edge}]}}
    - {name: rsa, protocol: HTTPS, port: $P_PIER_RSA, tls: {certificateRefs: [{name: edge-rsa}]}}
  tls:
    backend:
      clientCertificateRef: {name: gateway-client}
  mesh:
    trustBundle: [{kind: ConfigMap, name: mesh-ca}]
    selector:
      matchLabels: {mesh: enabled}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: plain, namespace: demo}
spec:
  parentRefs: [{name: bench, sectionName: plain}, {name: bench, sectionName: https}, {name: bench, sectionName: rsa}]
  rules: [{backendRefs: [{name: origin, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: echo, namespace: demo, labels: {mesh: enabled}}
spec:
  parentRefs: [{name: bench, sectionName: mtls}]
  rules: [{backendRefs: [{name: echo, port: 443}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: echo-close, namespace: demo, labels: {mesh: enabled}}
spec:
  parentRefs: [{name: bench, sectionName: newtls}]
  rules: [{backendRefs: [{name: echo-close, port: 443}]}]
---
apiVersion: v1
kind: Service
metadata: {name: origin, namespace: demo}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: origin-1, namespace: demo, labels: {kubernetes.io/service-name: origin}}
addressType: IPv4
ports: [{name: http, port: $P_ORIGIN, protocol: TCP}]
endpoints: [{addresses: ["127.0.0.1"], conditions: {ready: true}}]
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: demo}
spec: {ports: [{name: https, port: 443}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: echo-1, namespace: demo, labels: {kubernetes.io/service-name: echo}}
addressType: IPv4
ports: [{name: https, port: $P_ORIGIN_TLS, protocol: TCP}]
endpoints: [{addresses: ["127.0.0.1"], conditions: {ready: true}}]
---
apiVersion: v1
kind: Service
metadata: {name: echo-close, namespace: demo}
spec: {ports: [{name: https, port: 443}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: echo-close-1, namespace: demo, labels: {kubernetes.io/service-name: echo-close}}
addressType: IPv4
ports: [{name: https, port: $P_ORIGIN_TLS_CLOSE, protocol: TCP}]
endpoints: [{addresses: ["127.0.0.1"], conditions: {ready: true}}]
EOF
  {
    echo "# the mesh trust bundle and pier's client certificate"
    echo "apiVersion: v1"; echo "kind: ConfigMap"; echo "metadata: {name: mesh-ca, namespace: demo}"
    echo "data:"; echo "  ca-bundle.crt: |"; sed 's/^/    /' "$CERTS/mesh-ca.crt"
    echo "---"
    echo "apiVersion: v1"; echo "kind: Secret"; echo "metadata: {name: gateway-client, namespace: demo}"
    echo "type: kubernetes.io/tls"; echo "stringData:"
    echo "  tls.crt: |"; sed 's/^/    /' "$CERTS/gateway-client.crt"
    echo "  tls.key: |"; sed 's/^/    /' "$CERTS/gateway-client.key"
    for name in edge edge-rsa; do
      echo "---"
      echo "apiVersion: v1"; echo "kind: Secret"; echo "metadata: {name: $name, namespace: demo}"
      echo "type: kubernetes.io/tls"; echo "stringData:"
      echo "  tls.crt: |"; sed 's/^/    /' "$CERTS/$name.crt"
      echo "  tls.key: |"; sed 's/^/    /' "$CERTS/$name.key"
    done
  } >"$m/trust.yaml"
}

# ---------- origins and proxies ----------
ORIGIN_PID=""; ORIGIN_ON=""; TLS_PID=""
origin_up() { # cpu [config, default nginx.conf]
  local conf="${2:-nginx.conf}"
  [ -n "$ORIGIN_PID" ] && [ "$ORIGIN_ON" = "$1 $conf" ] && return 0
  [ -n "$ORIGIN_PID" ] && stop_pid "$ORIGIN_PID"
  start_bg "$1" "$RUN/origin/stderr.log" nginx -p "$RUN/origin/" -c "$RUN/origin/$conf" -e stderr
  ORIGIN_PID=$LAST_PID; ORIGIN_ON="$1 $conf"
  wait_ok "http://127.0.0.1:$P_ORIGIN/"
}
origin_tls_up() {
  [ -n "$TLS_PID" ] && return 0
  start_bg "$ORIGIN_CPU" "$RUN/origin-tls/stderr.log" nginx -p "$RUN/origin-tls/" -c "$RUN/origin-tls/nginx.conf" -e stderr
  TLS_PID=$LAST_PID
  wait_ok "https://$SNI:$P_ORIGIN_TLS/" --cacert "$CERTS/mesh-ca.crt" --cert "$CERTS/gateway-client.crt" \
    --key "$CERTS/gateway-client.key" --resolve "$SNI:$P_ORIGIN_TLS:127.0.0.1"
}
PROXY_PID=""; PROXY_KIND=""
proxy_up() { # nginx|haproxy|pier
  [ "$PROXY_KIND" = "$1" ] && return 0
  proxy_down; PROXY_KIND="$1"
  case "$1" in
    nginx) start_bg "$PROXY_CPU" "$RUN/nginx/stderr.log" nginx -p "$RUN/nginx/" -c "$RUN/nginx/nginx.conf" -e stderr ;;
    haproxy | relay) start_bg "$PROXY_CPU" "$RUN/haproxy.log" haproxy -f "$RUN/haproxy.cfg" -db ;;
    pier) pier_up "" warn ;;
    # No TLS session kept: every client connection a full handshake.
    nginx-full)
      sed 's/^  ssl_protocols TLSv1.2 TLSv1.3;/  ssl_protocols TLSv1.2 TLSv1.3; ssl_session_tickets off; ssl_session_cache off;/' \
        "$RUN/nginx/nginx.conf" >"$RUN/nginx/nginx-full.conf"
      start_bg "$PROXY_CPU" "$RUN/nginx/stderr.log" nginx -p "$RUN/nginx/" -c "$RUN/nginx/nginx-full.conf" -e stderr ;;
    haproxy-full)
      sed -e 's/^    nbthread 1$/    nbthread 1\n    tune.ssl.cachesize 0/' -e 's/ ssl crt / ssl no-tls-tickets crt /' \
        "$RUN/haproxy.cfg" >"$RUN/haproxy-full.cfg"
      start_bg "$PROXY_CPU" "$RUN/haproxy.log" haproxy -f "$RUN/haproxy-full.cfg" -db ;;
    pier-full) pier_up "--no-tls-session-resumption" warn ;;
    nginx-w2)
      sed 's/^worker_processes 1;/worker_processes 2;/' "$RUN/nginx/nginx.conf" >"$RUN/nginx/nginx-w2.conf"
      start_bg "$W2_CPUS" "$RUN/nginx/stderr.log" nginx -p "$RUN/nginx/" -c "$RUN/nginx/nginx-w2.conf" -e stderr ;;
    haproxy-w2)
      sed 's/^    nbthread 1$/    nbthread 2/' "$RUN/haproxy.cfg" >"$RUN/haproxy-w2.cfg"
      start_bg "$W2_CPUS" "$RUN/haproxy.log" haproxy -f "$RUN/haproxy-w2.cfg" -db ;;
    pier-w2) WORKERS=2 ON="$W2_CPUS" pier_up "" warn ;;
    # many-*: two processes each (the host's per-process open-files limit; see the header)
    nginx-many)
      sed -e "s/^worker_processes 1;/worker_processes $MANY_PROCS;/" "$RUN/nginx/nginx.conf" >"$RUN/nginx/nginx-many.conf"
      start_bg "$PROXY_CPU" "$RUN/nginx/stderr.log" nginx -p "$RUN/nginx/" -c "$RUN/nginx/nginx-many.conf" -e stderr ;;
    pier-many)
      # one parent for both, so that stopping it stops them and its family is their sum; no
      # spin before sleeping (PIER_IDLE_SPIN_US=0, pier's default when workers share cores):
      # one process's spin would take the CPU from the other
      start_bg "$PROXY_CPU" "$RUN/pier/stderr.log" env PIER_WORKER_THREADS=1 PIER_IDLE_SPIN_US=0 RUST_LOG=warn PIER_BIN="$PIER_BIN" RUN="$RUN" bash -c '
        for admin in "$@"; do
          "$PIER_BIN" run --manifests "$RUN/pier/manifests" --listen-host 127.0.0.1 --admin "127.0.0.1:$admin" \
            --reuse-port --max-connections 16384 & kids+=($!)
        done
        trap "kill \${kids[*]}; wait" TERM; wait' many "$P_ADMIN" $([ "$MANY_PROCS" = 1 ] || echo "$((P_ADMIN + 1))") ;;
    pier-log) pier_up "--access-log" "warn,pier::access=info" ;;
    pier-trace1) pier_up "--otlp-endpoint http://127.0.0.1:$P_SINK --trace-sample-ratio 0.01" warn ;;
    pier-trace100) pier_up "--otlp-endpoint http://127.0.0.1:$P_SINK --trace-sample-ratio 1" warn ;;
  esac
  PROXY_PID=$LAST_PID
}
pier_up() { # "extra flags" RUST_LOG: pier on the proxy CPU; its stderr (the access log) to a file
  # shellcheck disable=SC2086
  start_bg "${ON:-$PROXY_CPU}" "$RUN/pier/stderr.log" env PIER_WORKER_THREADS="${WORKERS:-1}" RUST_LOG="$2" "$PIER_BIN" run \
    --manifests "$RUN/pier/manifests" --listen-host 127.0.0.1 --admin "127.0.0.1:$P_ADMIN" $1
}
proxy_down() { [ -n "$PROXY_PID" ] && stop_pid "$PROXY_PID"; PROXY_PID=""; PROXY_KIND=""; }
proxy_url() { # scenario -> url
  local sc="${1#close-}" path=""
  sc="${sc#full-}"; sc="${sc#hs-}"; sc="${sc#hsr-}"; sc="${sc#w2-}"; sc="${sc#many-}"
  case "$1" in big-*) path=big; sc="${sc#big-}" ;; up-*) path=up; sc="${sc#up-}" ;; esac
  echo "$(base_url "$sc")$path"
}
base_url() {
  local sc="$1"
  case "$sc" in
    direct) echo "http://127.0.0.1:$P_ORIGIN/" ;;
    relay) echo "http://127.0.0.1:$P_RELAY/" ;;
    nginx) echo "http://127.0.0.1:$P_NGINX/" ;; nginx-mtls) echo "http://127.0.0.1:$P_NGINX_TLS/" ;;
    nginx-newtls) echo "http://127.0.0.1:$P_NGINX_NEWTLS/" ;; haproxy-newtls) echo "http://127.0.0.1:$P_HAPROXY_NEWTLS/" ;;
    pier-newtls) echo "http://127.0.0.1:$P_PIER_NEWTLS/" ;;
    haproxy) echo "http://127.0.0.1:$P_HAPROXY/" ;; haproxy-mtls) echo "http://127.0.0.1:$P_HAPROXY_TLS/" ;;
    pier | pier-log | pier-trace*) echo "http://127.0.0.1:$P_PIER/" ;; pier-mtls) echo "http://127.0.0.1:$P_PIER_TLS/" ;;
    nginx-https) echo "https://127.0.0.1:$P_NGINX_HTTPS/" ;; nginx-rsa) echo "https://127.0.0.1:$P_NGINX_RSA/" ;;
    haproxy-https) echo "https://127.0.0.1:$P_HAPROXY_HTTPS/" ;; haproxy-rsa) echo "https://127.0.0.1:$P_HAPROXY_RSA/" ;;
    pier-https) echo "https://127.0.0.1:$P_PIER_HTTPS/" ;; pier-rsa) echo "https://127.0.0.1:$P_PIER_RSA/" ;;
  esac
}
check_mtls() { # url: the origin must have verified the proxy's client certificate
  local seen
  seen=$(curl -s -D - -o /dev/null "${1}debug" | tr -d '\r' | grep -i '^x-client-' | tr '\n' ' ')
  log "  origin saw: $seen"
  [[ "$seen" == *"SUCCESS"* && "$seen" == *"CN=gateway"* ]] || { echo "mTLS check failed via $1: $seen" >&2; exit 1; }
}
check_client_resumption() { # url yes|no: does a client that keeps its session resume it?
  # (a request, so that the client reads the TLS 1.3 ticket that follows the handshake)
  local host_port="${1#https://}" sess="$RUN/.client-session" first second
  host_port="${host_port%/}"
  rm -f "$sess"
  first=$(printf 'GET / HTTP/1.0\r\n\r\n' | openssl s_client -connect "$host_port" -servername "$EDGE" \
    -sess_out "$sess" -ign_eof 2>/dev/null | grep -E '^(New|Reused),' | cut -d, -f1 || true)
  if [ -s "$sess" ]; then
    second=$(printf 'GET / HTTP/1.0\r\n\r\n' | openssl s_client -connect "$host_port" -servername "$EDGE" \
      -sess_in "$sess" -ign_eof 2>/dev/null | grep -E '^(New|Reused),' | cut -d, -f1 || true)
  else
    second="New (no session was issued)"
  fi
  log "  a client keeping its session: ${first:-?} then ${second:-?}"
  if [ "$2" = yes ] && [ "$second" != Reused ]; then echo "$1 resumes no TLS session" >&2; exit 1; fi
  if [ "$2" = no ] && [[ "$second" != New* ]]; then echo "$1 resumed a TLS session" >&2; exit 1; fi
}
check_resumed() { # url: after a first connection, the closing origin sees resumed sessions
  local i seen
  for i in 1 2 3; do
    seen=$(curl -s -D - -o /dev/null "${1}debug" | tr -d '\r' | awk -F': ' 'tolower($1) == "x-session-reused" {print $2}')
  done
  log "  origin saw session reused: $seen"
  [ "$seen" = r ] || { echo "the proxy at $1 did not resume its upstream TLS session (X-Session-Reused: $seen)" >&2; exit 1; }
}

# ---------- the whole-connection client (hs-*, hsr-*) ----------
conn_load() { # scenario conns duration url
  local resume=(); [[ "$1" == hsr-* ]] && resume=(--resume)
  taskset -c "$WRK_ON" "$CONN_LOAD" -c "$2" -d "$3" --sni "$EDGE" "${resume[@]}" "$4"
}
check_handshakes() { # scenario output: the handshakes conn-load saw were of the scenario's kind
  local full resumed
  read -r full resumed < <(awk '/^Handshakes:/ { gsub(",", ""); print $3, $5 }' "$2")
  log "  conn-load handshakes: full ${full:-?}, resumed ${resumed:-?}"
  if [[ "$1" == hs-* ]] && [ "${resumed:-1}" != 0 ]; then echo "$1: $resumed handshakes resumed" >&2; exit 1; fi
  if [[ "$1" == hsr-* ]] && ! awk -v f="${full:-1}" -v r="${resumed:-0}" 'BEGIN { exit !(r >= 0.9 * (f + r)) }'; then
    echo "$1: only $resumed of $((full + resumed)) handshakes resumed" >&2; exit 1
  fi
}

# ---------- one measured wrk run ----------
# scenario conns rep url "proxy pids" header -> appends a line to raw.tsv; returns 1 if contended
measure_one() {
  local sc="$1" c="$2" rep="$3" url="$4" ppids="$5" hdr="$6"
  local out="$OUT/$sc-c$c-r$rep.txt" args=(-t"$WRK_THREADS" -c"$c" -d"$DURATION" --latency) secs="${DURATION%s}"
  [ -n "$hdr" ] && args+=(-H "$hdr")
  [ -n "$WRK_SCRIPT" ] && args+=(-s "$WRK_SCRIPT")
  wait_quiet || busy "CPUs not quiet for ${QUIET_SECS}s within ${QUIET_WAIT}s before $sc c=$c rep $rep"
  local p0 p1 a0 a1 s0 s1 ours0 ours1
  s0="$OUT/.snap0"; s1="$OUT/.snap1"
  proc_snap >"$s0"; a0=$(all_busy)
  # shellcheck disable=SC2086
  p0=$(ticks $ppids)
  ( sleep "$(awk -v d="$secs" 'BEGIN { print d / 2 }')"; [ -n "$ppids" ] && rss_kb $ppids >"$OUT/.rss" || echo 0 >"$OUT/.rss" ) &
  local sampler=$!
  if [[ "$sc" == hs-* || "$sc" == hsr-* ]]; then
    conn_load "$sc" "$c" "$DURATION" "$url" >"$out" 2>&1 || true
    check_handshakes "$sc" "$out"
  else
    taskset -c "$WRK_ON" wrk "${args[@]}" "$url" >"$out" 2>&1 || true
  fi
  wait "$sampler" 2>/dev/null || true
  # shellcheck disable=SC2086
  p1=$(ticks $ppids); a1=$(all_busy); proc_snap >"$s1"
  local hogs foreign
  hogs=$(foreign_procs "$s0" "$s1" "$secs")
  # foreign CPU, % of the machine: busy time not spent by this script's process tree
  foreign=$(awk -v self=$$ -v a="$a0" -v b="$a1" -v hz="$(getconf CLK_TCK)" '
    function tree(arr, pp, t,   p, q, d, s) { s = 0; for (p in t) { q = p
        for (d = 0; d < 64 && q > 1; d++) { if (q == self) { s += t[p]; break }; q = pp[q] } }; return s }
    FNR == NR { pa[$1] = $2; ta[$1] = $4; next } { pb[$1] = $2; tb[$1] = $4 }
    END { ours = tree(0, pb, tb) - tree(0, pa, ta)
      split(a, x, " "); split(b, y, " "); d = y[2] - x[2]
      f = d > 0 ? 100 * ((y[1] - x[1]) - ours) / d : 0; printf "%.1f", (f < 0 ? 0 : f) }' "$s0" "$s1")
  local state=ok
  if [ -n "$hogs" ] || awk -v f="$foreign" -v m="$FOREIGN_MAX" 'BEGIN { exit !(f > m) }'; then
    state="busy:${hogs:-total ${foreign}%}"
  fi
  local line
  line=$(awk -v sc="$sc" -v c="$c" -v rep="$rep" -v pt=$((p1 - p0)) -v rss="$(cat "$OUT/.rss" 2>/dev/null || echo 0)" \
      -v hz="$(getconf CLK_TCK)" -v hasp="${ppids:+1}" -v foreign="$foreign" -v state="$state" '
    function us(v) { if (v ~ /us$/) return v + 0; if (v ~ /ms$/) return (v + 0) * 1000; if (v ~ /s$/) return (v + 0) * 1e6; return v + 0 }
    /^ +50%/ { p50 = us($2) } /^ +99%/ { p99 = us($2) }
    /requests in/ { reqs = $1 } /^Requests\/sec:/ { rps = $2 }
    /Socket errors/ { gsub(",", ""); err = $4 + $6 + $8 + $10 }
    /Non-2xx/ { non2xx = $5 }
    END { if (reqs == 0) reqs = 1
      printf "%s\t%d\t%d\t%.0f\t%.0f\t%.0f\t%d\t%d\t%s\t%s\t%.1f\t%s\n", sc, c, rep, rps, p50, p99, err + 0, non2xx + 0,
        (hasp ? rss : "-"), (hasp ? sprintf("%.1f", pt / hz * 1e6 / reqs) : "-"), foreign, state }' "$out")
  LAST_LINE="$line"
  [ "$state" = ok ] || { log "  contended: $state"; return 1; }
  return 0
}
measure() { # scenario url "proxy pids" header "reps"
  local sc="$1" url="$2" ppids="$3" hdr="$4" reps="$5" c rep try warm=(-t"$WRK_THREADS" -c256 -d"$WARMUP")
  [ -n "$hdr" ] && warm+=(-H "$hdr")
  [ -n "$WRK_SCRIPT" ] && warm+=(-s "$WRK_SCRIPT")
  log "  warm-up c=256 $WARMUP"
  if [[ "$sc" == hs-* || "$sc" == hsr-* ]]; then
    conn_load "$sc" 256 "$WARMUP" "$url" >/dev/null 2>&1 || true
  else
    taskset -c "$WRK_ON" wrk "${warm[@]}" "$url" >/dev/null 2>&1 || true
  fi
  local conns="$CONNS"
  [[ "$sc" == many-* ]] && conns="$MANY_CONNS"
  for c in $conns; do
    for rep in $reps; do
      for try in $(seq 0 "$RETRIES"); do
        if measure_one "$sc" "$c" "$rep" "$url" "$ppids" "$hdr"; then break; fi
        if [ "$try" -eq "$RETRIES" ]; then
          busy "$sc c=$c rep $rep: ${LAST_LINE##*	}"
          break
        fi
        log "  retrying ($((try + 1))/$RETRIES)"
      done
      printf '%s\n' "$LAST_LINE" >>"$RAW"
      log "  $(echo "$LAST_LINE" | awk -F'\t' '{printf "c=%s rep %s: %s req/s p50 %sus p99 %sus err %s/%s cpu %s us/req rss %s kB foreign %s%% %s", $2, $3, $4, $5, $6, $8, $7, $10, $9, $11, $12}')"
    done
  done
}

# ---------- run ----------
gen_certs
write_configs
{
  echo "date: $(date -u +%FT%TZ)"
  echo "nproc: $(nproc)"
  echo "cpu: $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
  echo "kernel: $(uname -r)"
  echo "nginx: $(nginx -v 2>&1 | sed 's/.*: //')"
  echo "haproxy: $(haproxy -v | head -1 | awk '{print $3}')"
  echo "wrk: $(wrk -v 2>&1 | head -1 | awk '{print $2}')"
  echo "openssl: $(openssl version | awk '{print $2}')"
  echo "pier: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo '+dirty') $PIER_BIN"
  echo "pinning: proxy cpu $PROXY_CPU (pier PIER_WORKER_THREADS=1, nginx/haproxy 1 worker), wrk -t1 cpu $WRK_CPU, origin cpu $ORIGIN_CPU; w2-*: all on $W2_CPUS, 2 workers, wrk -t2"
  echo "runs: -d$DURATION x $REPS reps, conns: $CONNS, warm-up c=256 $WARMUP"
} >"$OUT/machine.txt"
cat "$OUT/machine.txt" >&2
printf 'scenario\tconns\trep\trps\tp50_us\tp99_us\tsock_err\tnon2xx\tproxy_rss_kb\tproxy_cpu_us_per_req\tforeign_cpu_pct\tstate\n' >"$RAW"

waited=0
while awk -v l="$(loadavg)" -v m="$LOAD_MAX" 'BEGIN { exit !(l > m) }'; do
  if [ "$waited" -ge "$LOAD_WAIT" ]; then busy "load average $(loadavg) > $LOAD_MAX before the first run"; break; fi
  [ $((waited % 60)) -eq 0 ] && log "load average $(loadavg) > $LOAD_MAX: waiting (up to ${LOAD_WAIT}s)"
  sleep 10; waited=$((waited + 10))
done

CLOSE="Connection: close"
if [ "$INTERLEAVE" = 1 ]; then rounds=$(seq 1 "$REPS"); else rounds=all; fi
for round in $rounds; do
  reps="$round"; [ "$round" = all ] && reps=$(seq 1 "$REPS")
  # Even rounds run the scenarios in reverse order: over two rounds every pair of proxies sits
  # at the same mean time, so a host that drifts one way does not favour the earlier one.
  order="$SCENARIOS"
  if [ "$round" != all ] && [ $((round % 2)) -eq 0 ]; then order=$(echo $SCENARIOS | tr ' ' '\n' | tac | tr '\n' ' '); fi
  for sc in $order; do
    log "== $sc (run ${reps//$'\n'/,} of $REPS)"
    hdr=""; [[ "$sc" == close-* || "$sc" == full-* ]] && hdr="$CLOSE"
    base="${sc#close-}"; base="${base#full-}"; base="${base#hs-}"; base="${base#hsr-}"; base="${base#big-}"; base="${base#up-}"; base="${base#w2-}"; base="${base#many-}"
    url=$(proxy_url "$sc")
    WRK_THREADS=1; WRK_ON="$WRK_CPU"; WRK_SCRIPT=""; origin_on="$ORIGIN_CPU"
    [[ "$sc" == up-* ]] && WRK_SCRIPT="$RUN/up.lua"
    [[ "$sc" == w2-* ]] && { WRK_THREADS=2; WRK_ON="$W2_CPUS"; origin_on="$W2_CPUS"; }
    origin_conf=nginx.conf; [[ "$sc" == many-* ]] && origin_conf=nginx-many.conf
    if [ "$base" = direct ]; then
      proxy_down; origin_up "$PROXY_CPU"
      measure "$sc" "$url" "" "$hdr" "$reps"
      continue
    fi
    origin_up "$origin_on" "$origin_conf"
    [[ "$base" == *-mtls || "$base" == *-newtls ]] && origin_tls_up
    # A fresh proxy process per scenario and round: every proxy starts each run equally cold.
    proxy_down
    kind="${base%-mtls}"; kind="${kind%-https}"; kind="${kind%-rsa}"; kind="${kind%-newtls}"
    [[ "$sc" == full-* || "$sc" == hs-* ]] && kind="$kind-full"
    [[ "$sc" == w2-* ]] && kind="$kind-w2"
    [[ "$sc" == many-* ]] && kind="$kind-many"
    proxy_up "$kind"
    wait_ok "$url" -k
    [[ "$sc" == close-*-https || "$sc" == close-*-rsa || "$sc" == hsr-* ]] && check_client_resumption "$url" yes
    [[ "$sc" == full-* || "$sc" == hs-* ]] && check_client_resumption "$url" no
    [[ "$base" == *-mtls || "$base" == *-newtls ]] && check_mtls "$url"
    [[ "$base" == *-newtls ]] && check_resumed "$url"
    measure "$sc" "$url" "$(family "$PROXY_PID" | tr '\n' ' ')" "$hdr" "$reps"
  done
done
proxy_down

summarize "$RAW" "$BUSY_NOTE" | tee "$OUT/table.md"
echo >&2; log "raw: $RAW, table: $OUT/table.md"

#!/usr/bin/env bash
# Runs the manual's walkthroughs as written: the ```sh blocks of each chapter, in SUMMARY.md
# order, as a reader would paste them into a shell at the top of a fresh checkout.
#
#   scripts/walkthroughs.sh [--pier PATH] [CHAPTER.md ...]
#
#   --pier PATH   the pier binary the walkthroughs get (default: target/debug/pier); it stands
#                 in for the release build the manual tells readers to make (see "cargo" below)
#   CHAPTER.md    only these chapters (paths under docs/src/, e.g. edge/proxy-protocol.md)
#
# What a chapter is held to (tests/walkthroughs.rs runs this script; a failure names the
# chapter, the block's place in the markdown, the command that failed and the output):
#
# - Its ```sh blocks run in one fresh `bash` (`set -Eeuo pipefail`: every command must exit 0,
#   no variable may be used undefined), in order, from the top of a copy of the checkout (the
#   tracked and untracked-but-not-ignored files of this one, as `git clone` of a commit with
#   them would give), with stdin from /dev/null, within ${PIER_WALKTHROUGH_TIMEOUT:-60} s, with
#   `pier` on PATH (the --pier binary, as Getting started leaves it for the chapters after it).
#   A block preceded by the line `<!-- walkthrough: not run: REASON -->` is not run (the
#   reason is printed); every other ```sh block of a chapter in RUN is.
# - A ```text block that follows a ```sh block (nothing but blank lines between) is that
#   block's expected stdout: line for line, `…` standing for any run of characters, trailing
#   blank lines ignored. Logs go to stderr and are not compared.
# - After the chapter's shell exits, no process it started may be alive (found by a marker in
#   their environment) and no TCP port may be listening: a walkthrough stops what it started.
#   Leftovers are reported, then killed, so the next chapter starts clean.
#
# Where: the whole run is in a network namespace of its own (`unshare --net`, loopback only,
# so the walkthroughs' fixed ports 8080, 9901, 18081... cannot meet anything of the host's); as
# root, else in a user namespace (`unshare --user --map-root-user --net`). When neither is
# possible it stops, unless PIER_WALKTHROUGHS_NETNS=host says to run in the host's namespace
# (its ports must then be free). Temporary files (mktemp) go under the run's own directory,
# which is removed at the end.
#
# `cargo` inside a walkthrough is a stand-in: `cargo build --release [--locked]` links
# target/release/pier to the --pier binary instead of building, `cargo install --path .` puts
# it on PATH, `cargo run --release -- ARGS` runs `pier ARGS`; anything else fails.
#
# Every chapter of SUMMARY.md with a ```sh block is either in RUN or in NOT_RUN with the
# reason; a chapter in neither fails the run (a new chapter must choose).
set -euo pipefail
export LC_ALL=C.UTF-8

RUN=(
  getting-started.md
  manifests.md
  mesh.md
  edge/security-policy.md
  edge/ext-auth.md
  edge/oidc.md
  edge/rate-limits.md
  edge/compression.md
  edge/fault-injection.md
  edge/timeouts.md
  edge/load-balancing.md
  edge/health-checks.md
  edge/client-tls.md
  edge/http3.md
  edge/proxy-protocol.md
  edge/frontend-mtls.md
  edge/example.md
  edge/trusted-proxies.md
  edge/tracing.md
  operations/restarts.md
)
declare -A NOT_RUN=(
  [introduction.md]="builds the manual (scripts/book.sh, which CI runs)"
  [cluster-mode.md]="needs a cluster's API server; tests/cluster.rs and tests/apiserver.rs run pier against a real kube-apiserver"
  [cluster-check.md]="needs a cluster's API server; tests/check.rs runs pier check --kubeconfig against a real kube-apiserver"
  [spire.md]="needs a SPIRE server and agent; tests/spiffe.rs runs them (scripts/spire.sh)"
  [operations/debian.md]="installs a .deb with dpkg and systemd; scripts/package-test.sh does that in CI"
  [operations/container.md]="builds and runs the container image; scripts/image-build.sh and scripts/image-test.sh"
  [conformance.md]="runs the upstream conformance suite against a cluster (scripts/conformance.sh)"
  [control-plane.md]="builds kube-apiserver, etcd and kubectl from Go sources (scripts/control-plane.sh)"
  [operations/admin.md]="a reference of the endpoints of a running pier, not a walkthrough; tests/admin.rs checks each (/config, /readyz, the token, the Unix socket)"
  [performance.md]="benchmarks (scripts/ab-pair.sh and friends): minutes each, on a quiet machine"
  [history/benchmarks.md]="the record of benchmark runs (minutes each, on a quiet machine)"
  [history/reliability.md]="the record of reliability runs (soak, outages: minutes to hours)"
)

REPO=$(cd "$(dirname "$0")/.." && pwd)
SRC=$REPO/docs/src
log() { printf 'walkthroughs: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 2; }

PIER=${PIER_WALKTHROUGH_PIER:-$REPO/target/debug/pier}
only=()
while (($#)); do
  case $1 in
    --pier) PIER=${2:?--pier needs a path}; shift 2 ;;
    --pier=*) PIER=${1#--pier=}; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) only+=("$1"); shift ;;
  esac
done
missing=()
for tool in curl jq openssl haproxy ss timeout git chromium; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || missing+=("$tool")
done
((${#missing[@]} == 0)) || die "the walkthroughs need ${missing[*]}: scripts/test installs them (apt-get install curl jq openssl haproxy iproute2 chromium)"
PIER=$(realpath "$PIER" 2>/dev/null) || die "no pier binary at $PIER: cargo build, or pass --pier PATH"
[ -x "$PIER" ] || die "$PIER is not executable"
export PIER_WALKTHROUGH_PIER=$PIER

# A network namespace of our own: re-run this script inside one.
if [ -z "${PIER_WALKTHROUGHS_IN_NETNS:-}" ]; then
  export PIER_WALKTHROUGHS_IN_NETNS=1
  inner=(bash -c 'ip link set lo up && exec "$0" "$@"' "$0" --pier "$PIER" "${only[@]}")
  if [ "$(id -u)" -eq 0 ] && unshare --net true 2>/dev/null; then
    exec unshare --net "${inner[@]}"
  elif unshare --user --map-root-user --net true 2>/dev/null; then
    exec unshare --user --map-root-user --net "${inner[@]}"
  elif [ "${PIER_WALKTHROUGHS_NETNS:-}" = host ]; then
    log "no network namespace possible: running in the host's (PIER_WALKTHROUGHS_NETNS=host); ports 8080-8083, 8443, 8444, 9901, 18081-18084, 18443-18445 must be free"
  else
    die "cannot create a network namespace (needs root, or unprivileged user namespaces): the walkthroughs use fixed ports (8080, 9901, 18081, ...) and run in one of their own; run as root (scripts/test does), or set PIER_WALKTHROUGHS_NETNS=host to run them in this namespace"
  fi
fi

# The chapters, in SUMMARY.md order.
mapfile -t chapters < <(grep -o '\](\([^)]*\.md\))' "$SRC/SUMMARY.md" | sed 's/^](//; s/)$//')
((${#chapters[@]})) || die "no chapters in $SRC/SUMMARY.md"
in_list() { local x=$1; shift; local y; for y in "$@"; do [ "$x" = "$y" ] && return 0; done; return 1; }
for c in "${only[@]}"; do
  in_list "$c" "${RUN[@]}" || die "$c is not a chapter this script runs (RUN: ${RUN[*]})"
done
for c in "${RUN[@]}"; do
  in_list "$c" "${chapters[@]}" || die "$c (RUN) is not in SUMMARY.md"
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pier-walkthroughs.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# Extracts a chapter's blocks into DIR: N.sh (the block), N.where (file:line), N.expected
# (its ```text block, if any), N.skip (the reason, for a block marked not run).
extract() { # CHAPTER.md DIR
  awk -v dir="$2" -v file="docs/src/$1" '
    {
      if (fence == "") {
        if ($0 ~ /^```sh[[:space:]]*$/) {
          n++; fence = "sh"; out = dir "/" n ".sh"; printf "" > out
          print file ":" NR > (dir "/" n ".where")
          if (last ~ /^<!-- walkthrough: not run: .* -->$/) {
            reason = last; sub(/^<!-- walkthrough: not run: /, "", reason); sub(/ -->$/, "", reason)
            print reason > (dir "/" n ".skip")
          }
          next
        }
        if ($0 ~ /^```text[[:space:]]*$/ && after_sh) {
          fence = "text"; out = dir "/" n ".expected"; printf "" > out; next
        }
        if ($0 ~ /^```/) { fence = "other"; next }
        if ($0 !~ /^[[:space:]]*$/) { last = $0; after_sh = 0 }
        next
      }
      if ($0 ~ /^```[[:space:]]*$/) {
        after_sh = (fence == "sh"); fence = ""; last = ""; next
      }
      if (fence != "other") print > out
    }
    END { if (fence != "") { print file ": unclosed ``` block" > "/dev/stderr"; exit 1 } }
  ' "$SRC/$1"
}

# Every chapter with a ```sh block must be run or say why not.
for c in "${chapters[@]}"; do
  if grep -q '^```sh' "$SRC/$c" && ! in_list "$c" "${RUN[@]}" && [ -z "${NOT_RUN[$c]:-}" ]; then
    die "docs/src/$c has \`\`\`sh blocks but is neither in RUN nor in NOT_RUN (scripts/walkthroughs.sh): run it, or say why not"
  fi
done

# A fresh checkout: the files git knows (tracked, or untracked and not ignored), as they are now.
mkdir -p "$WORK/checkout" "$WORK/bin" "$WORK/tmp"
(cd "$REPO" && git ls-files -z --cached --others --exclude-standard \
  | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -xf - -C "$WORK/checkout"

# The cargo stand-in (see the header).
cat >"$WORK/bin/cargo" <<'EOF'
#!/usr/bin/env bash
set -euo pipefail
args=" $* "
case $args in
  " build --release "* | " build --locked --release "*)
    [[ $args == *" -- "* || $args == *" --bin "* ]] && { echo "walkthroughs: cargo $*: not a build the stand-in knows" >&2; exit 1; }
    mkdir -p target/release && ln -sf "$PIER_WALKTHROUGH_PIER" target/release/pier
    echo "walkthroughs: cargo $*: target/release/pier is the test's pier binary" >&2 ;;
  " install --path . "*)
    mkdir -p "$PIER_WALKTHROUGH_CARGO_HOME/bin" && ln -sf "$PIER_WALKTHROUGH_PIER" "$PIER_WALKTHROUGH_CARGO_HOME/bin/pier"
    echo "walkthroughs: cargo $*: pier on PATH is the test's pier binary" >&2 ;;
  " run --release -- "*) shift 3; exec "$PIER_WALKTHROUGH_PIER" "$@" ;;
  *) echo "walkthroughs: cargo $*: the walkthrough test's cargo only stands in for 'cargo build --release', 'cargo install --path .' and 'cargo run --release -- ARGS'" >&2; exit 1 ;;
esac
EOF
chmod +x "$WORK/bin/cargo"
# pier on PATH, as Getting started leaves it for the chapters after it.
ln -s "$PIER" "$WORK/bin/pier"
export PIER_WALKTHROUGH_CARGO_HOME=$WORK/cargo-home
mkdir -p "$WORK/cargo-home/bin"

# What runs before a chapter's blocks, in its shell.
cat >"$WORK/prelude.sh" <<'EOF'
set -Eeuo pipefail
__walk_failed() {
  local rc=$?
  printf 'walkthroughs: FAILED at %s (block %s): exit status %s of: %s\n' "$__walk_where" "$__walk_block" "$rc" "$BASH_COMMAND" >&2
  exit "$rc"
}
trap __walk_failed ERR
# The block's stdout against its ```text block: line for line, `…` any run of characters.
__walk_expect() { # OUT EXPECTED
  local -a got want
  mapfile -t got <"$1"; mapfile -t want <"$2"
  while ((${#got[@]})) && [ -z "${got[-1]}" ]; do unset 'got[-1]'; done
  while ((${#want[@]})) && [ -z "${want[-1]}" ]; do unset 'want[-1]'; done
  local i ok=1 pat
  ((${#got[@]} == ${#want[@]})) || ok=0
  for ((i = 0; ok && i < ${#want[@]}; i++)); do
    pat=${want[i]//\\/\\\\}; pat=${pat//\*/\\*}; pat=${pat//\?/\\?}; pat=${pat//\[/\\[}; pat=${pat//…/*}
    # shellcheck disable=SC2053
    [[ ${got[i]} == $pat ]] || ok=0
  done
  if ((!ok)); then
    printf 'walkthroughs: FAILED at %s (block %s): its output is not the ```text block after it\n--- expected\n%s\n--- got\n%s\n---\n' \
      "$__walk_where" "$__walk_block" "$(cat "$2")" "$(cat "$1")" >&2
    return 1
  fi
}
EOF

# The chapter's shell script: the prelude, then each block, its stdout into N.out.
compose() { # DIR
  local dir=$1 n where
  cat "$WORK/prelude.sh"
  for ((n = 1; ; n++)); do
    [ -f "$dir/$n.sh" ] || break
    where=$(cat "$dir/$n.where")
    if [ -f "$dir/$n.skip" ]; then
      printf 'echo "walkthroughs: %s: not run: %s" >&2\n' "$where" "$(sed 's/["$`\\]/\\&/g' "$dir/$n.skip")"
      continue
    fi
    printf '__walk_block=%d; __walk_where=%q\n' "$n" "$where"
    printf 'echo "walkthroughs: block %d (%s)" >&2\n{\n' "$n" "$where"
    cat "$dir/$n.sh"
    printf '\n} >%q\n' "$dir/$n.out"
    if [ -f "$dir/$n.expected" ]; then
      printf '__walk_expect %q %q || exit 1\n' "$dir/$n.out" "$dir/$n.expected"
    fi
  done
}

# Processes a chapter left behind (the marker is in their environment).
leftover_pids() { # TOKEN
  grep -lzxF "PIER_WALKTHROUGH_RUN=$1" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | grep -vxF "$$" || true
}

# Listening TCP sockets (in our own namespace, none but a chapter's).
listening() { ss -Hltn 2>/dev/null | awk '{print $4}' | sort -u; }

failed=()
total_start=$(date +%s)
for c in "${chapters[@]}"; do
  if ! in_list "$c" "${RUN[@]}"; then
    [ -n "${NOT_RUN[$c]:-}" ] && log "$c: not run: ${NOT_RUN[$c]}"
    continue
  fi
  if ((${#only[@]})) && ! in_list "$c" "${only[@]}"; then continue; fi
  dir=$WORK/chapters/${c//\//_}
  mkdir -p "$dir"
  extract "$c" "$dir" || die "cannot read the blocks of docs/src/$c"
  if [ ! -f "$dir/1.sh" ]; then
    log "$c: FAILED: in RUN but has no \`\`\`sh block"
    failed+=("$c"); continue
  fi
  # The tracing walkthrough's collector is built once by scripts/otelcol.sh (minutes, with Go):
  # say so instead of timing out while it builds.
  if [ "$c" = edge/tracing.md ] && ! "$REPO/scripts/otelcol.sh" env >/dev/null 2>&1; then
    log "$c: FAILED: its OpenTelemetry Collector is not built: run scripts/otelcol.sh build (scripts/test does)"
    failed+=("$c"); continue
  fi
  if [ "$c" = edge/ext-auth.md ] && ! "$REPO/scripts/extauthz.sh" env >/dev/null 2>&1; then
    log "$c: FAILED: its authorizer is not built: run scripts/extauthz.sh build (scripts/test does)"
    failed+=("$c"); continue
  fi
  if [ "$c" = edge/oidc.md ] && ! "$REPO/scripts/oidc-provider.sh" env >/dev/null 2>&1; then
    log "$c: FAILED: its OpenID Provider is not built: run scripts/oidc-provider.sh build (scripts/test does)"
    failed+=("$c"); continue
  fi
  compose "$dir" >"$dir/chapter.sh"
  token="$c.$$.$RANDOM"
  listening_before=$(listening)
  log "$c: running"
  t0=$(date +%s)
  rc=0
  (cd "$WORK/checkout" && exec env PIER_WALKTHROUGH_RUN="$token" TMPDIR="$WORK/tmp" \
    PATH="$WORK/bin:$WORK/cargo-home/bin:$PATH" \
    timeout --kill-after=5 "${PIER_WALKTHROUGH_TIMEOUT:-60}" bash "$dir/chapter.sh" </dev/null 2>"$dir/stderr") || rc=$?
  secs=$(($(date +%s) - t0))
  problems=()
  if ((rc == 124)); then
    problems+=("timed out after ${PIER_WALKTHROUGH_TIMEOUT:-60} s")
  elif ((rc != 0)); then
    problems+=("its shell exited with status $rc")
  fi
  # Give what was stopped at the very end a moment to exit.
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    [ -z "$(leftover_pids "$token")" ] && break
    sleep 0.2
  done
  mapfile -t pids < <(leftover_pids "$token")
  if ((${#pids[@]})); then
    left=""
    for p in "${pids[@]}"; do left+=" $p:$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-120)"; done
    problems+=("processes it started are still running (not stopped by the walkthrough):$left")
  fi
  left_listening=$(comm -13 <(echo "$listening_before") <(listening) | tr '\n' ' ')
  if [ -n "${left_listening// /}" ]; then
    problems+=("ports still listening after it: $left_listening")
  fi
  if ((${#pids[@]})); then
    kill -KILL "${pids[@]}" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do [ -z "$(leftover_pids "$token")" ] && break; sleep 0.2; done
  fi
  if ((${#problems[@]})); then
    failed+=("$c")
    {
      printf '\n===== %s: FAILED (%s s)\n' "$c" "$secs"
      printf -- '- %s\n' "${problems[@]}"
      for ((n = 1; ; n++)); do
        [ -f "$dir/$n.sh" ] || break
        [ -f "$dir/$n.out" ] || continue
        printf -- '--- block %s (%s):\n%s\n--- its stdout:\n%s\n' "$n" "$(cat "$dir/$n.where")" "$(cat "$dir/$n.sh")" "$(tail -c 4000 "$dir/$n.out")"
      done
      printf -- '--- stderr (pier logs, errors; last 150 lines):\n'
      tail -n 150 "$dir/stderr"
      printf '===== end of %s\n\n' "$c"
    } >&2
  else
    log "$c: ok ($secs s)"
  fi
done

log "done in $(($(date +%s) - total_start)) s"
if ((${#failed[@]})); then
  log "FAILED: ${failed[*]}"
  exit 1
fi

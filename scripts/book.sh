#!/usr/bin/env bash
# Builds pier's manual (docs/, an mdBook) and checks its links.
#
#   scripts/book.sh        install mdbook if missing, build the book into target/book/, check
#                          every internal link (scripts/book-links.py); fails on a broken one
#
# mdbook is built once with `cargo install --locked` into
# ${PIER_MDBOOK_CACHE:-$HOME/.cache/pier/mdbook}/bin, outside the repository, and reused while
# it reports the pinned version (as scripts/control-plane.sh caches its builds), then a no-op. `rm -rf` of the cache directory undoes
# it. The book's HTML goes to target/book/ (docs/book.toml: build-dir), which git ignores.
#
# The link check reads the markdown of every chapter and of README.md, BENCHMARKS.md and
# RELIABILITY.md: a relative link must name an existing file inside the repository (chapters
# must be in SUMMARY.md), and a #fragment must be an id of the page mdBook built (or a heading
# of another markdown file). External (https:) links are not fetched.
set -euo pipefail

# Pinned: 0.5.4 builds with Rust 1.88 and later (rust-version 1.88; Rust 1.95 here).
MDBOOK_VERSION=${PIER_MDBOOK_VERSION:-0.5.4}
CACHE=${PIER_MDBOOK_CACHE:-$HOME/.cache/pier/mdbook}
CACHE=$(realpath -m "$CACHE")
MDBOOK=$CACHE/bin/mdbook
REPO=$(cd "$(dirname "$0")/.." && pwd)

log() { printf 'book: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

installed() { [ -x "$MDBOOK" ] && [ "$("$MDBOOK" --version 2>/dev/null)" = "mdbook v$MDBOOK_VERSION" ]; }

if ! installed; then
  command -v cargo >/dev/null 2>&1 || die "cargo is needed to install mdbook $MDBOOK_VERSION"
  mkdir -p "$CACHE"
  # One install at a time (two checkouts may build the book at once); the second waits, then
  # finds it installed.
  exec 9>"$CACHE/.lock"
  flock 9
  if ! installed; then
    log "installing mdbook $MDBOOK_VERSION into $CACHE (once; several minutes)"
    t0=$(date +%s)
    # Without the default `serve` and `watch` features (a web server and a file watcher the
    # build and the link check do not use): about half the crates to compile.
    nice -n 10 cargo install --locked mdbook --version "$MDBOOK_VERSION" --no-default-features \
      --features search --root "$CACHE" --force >&2 \
      || die "cargo install of mdbook $MDBOOK_VERSION failed"
    installed || die "$MDBOOK does not report mdbook v$MDBOOK_VERSION after the install"
    log "mdbook installed in $(($(date +%s) - t0)) s"
  fi
  exec 9>&-
fi

log "building the manual with $("$MDBOOK" --version)"
"$MDBOOK" build "$REPO/docs"
[ -f "$REPO/target/book/index.html" ] || die "mdbook wrote no target/book/index.html (docs/book.toml build-dir?)"

log "checking links"
python3 "$REPO/scripts/book-links.py" --root "$REPO" --book "$REPO/docs" --html "$REPO/target/book"
log "the manual is in target/book/index.html"

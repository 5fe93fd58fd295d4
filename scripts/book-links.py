#!/usr/bin/env python3
"""Checks the internal links of pier's manual (docs/, mdBook) and of the top-level documents.

    scripts/book-links.py [--root REPO] [--book DIR] [--html DIR] [EXTRA.md ...]

Every markdown file under the book's src/ (and README.md, BENCHMARKS.md, RELIABILITY.md, or the
files given) is read with its code blocks and code spans blanked out, and every link in it is
checked:

- a link with a scheme (https:, mailto:, ...) is external and not checked;
- a relative link must name a file or directory that exists, inside the repository (links from
  the book to config/, scripts/, BENCHMARKS.md ... are fine); a link starting with `/` is an
  error, since it resolves differently on a forge and in the built book;
- a link to a book chapter (a .md file under src/ other than SUMMARY.md) must be to a chapter
  that was built, i.e. listed in SUMMARY.md;
- a `#fragment` must be an id in the target page: for a book chapter, an id of the built HTML
  (--html, what mdBook rendered); for another markdown file, a heading's GitHub-style anchor.

Prints each broken link as `file:line: target: reason` and exits 1 if there is one.
Standard library only (Debian's python3).
"""

import argparse
import html
import os
import re
import sys
import urllib.parse

SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
# [text](dest "title"), also images; text may hold one level of brackets.
INLINE = re.compile(
    r"(?<!\\)!?\[(?:[^\[\]\\]|\\.|\[(?:[^\[\]\\]|\\.)*\])*\]"
    r"\(\s*(<[^<>\n]*>|(?:[^\s()\\]|\\.|\((?:[^\s()\\]|\\.)*\))*)"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)"
)
REFDEF = re.compile(r"^ {0,3}\[((?:[^\]\\]|\\.)+)\]:[ \t]*\n?[ \t]*(<[^>\n]*>|[^\s|]\S*)", re.M)
HREF = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.I)
HTML_ID = re.compile(r"""\bid\s*=\s*(?:"([^"]*)"|'([^']*)')""")
ANCHOR_TAG = re.compile(r"""<a\b[^>]*?\b(?:id|name)\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.I)


def outside_fences(text):
    """The file's lines, each None inside a fenced code block (fences included)."""
    fence = None
    for line in text.splitlines(keepends=True):
        m = FENCE.match(line.rstrip("\n"))
        if fence is None:
            if m and not (m.group(2)[0] == "`" and "`" in m.group(3)):
                fence = m.group(2)
                yield line, False
            else:
                yield line, True
        else:
            if m and m.group(2)[0] == fence[0] and len(m.group(2)) >= len(fence) and not m.group(3).strip():
                fence = None
            yield line, False


def blank_code(text):
    """The text with fenced code blocks, code spans and HTML comments replaced by spaces
    (newlines kept, so offsets and line numbers stay those of the file)."""

    def spaces(s):
        return re.sub(r"[^\n]", " ", s)

    text = "".join(line if keep else spaces(line) for line, keep in outside_fences(text))
    text = re.sub(r"<!--.*?-->", lambda m: spaces(m.group(0)), text, flags=re.S)
    # Code spans: a run of N backticks up to the next run of exactly N.
    return re.sub(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", lambda m: spaces(m.group(0)), text, flags=re.S)


def github_anchors(text):
    """Anchors a forge (GitHub) gives the headings of a markdown file, plus explicit
    <a id/name> anchors."""
    anchors, seen = set(), {}
    for line, keep in outside_fences(text):
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line.rstrip("\n")) if keep else None
        if not m:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
        title = re.sub(r"<[^>]+>", "", title).replace("`", "")
        slug = "".join(c for c in title.lower() if c.isalnum() or c in " -_").replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    for m in ANCHOR_TAG.finditer(text):
        anchors.add(m.group(1) or m.group(2))
    return anchors


def html_ids(path):
    """Ids in the content (<main>) of a page mdBook built."""
    with open(path, encoding="utf-8") as f:
        page = f.read()
    start, end = page.find("<main>"), page.rfind("</main>")
    if start >= 0 and end > start:
        page = page[start:end]
    return {html.unescape(a or b) for a, b in HTML_ID.findall(page)}


def links(text):
    """(offset, destination) of every link in the markdown text."""
    code_free = blank_code(text)
    for m in INLINE.finditer(code_free):
        yield m.start(1), m.group(1)
    for m in REFDEF.finditer(code_free):
        yield m.start(2), m.group(2)
    for m in HREF.finditer(code_free):
        yield m.start(), m.group(1) if m.group(1) is not None else m.group(2)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(here), help="the repository (default: this script's ..)")
    ap.add_argument("--book", help="the book's directory (default: ROOT/docs)")
    ap.add_argument("--html", help="mdBook's output (default: ROOT/target/book)")
    ap.add_argument("extra", nargs="*", help="more markdown files (default: README.md BENCHMARKS.md RELIABILITY.md)")
    args = ap.parse_args()
    root = os.path.realpath(args.root)
    book = os.path.realpath(args.book or os.path.join(root, "docs"))
    src = os.path.join(book, "src")
    out = os.path.realpath(args.html or os.path.join(root, "target", "book"))
    if not os.path.isfile(os.path.join(out, "index.html")):
        sys.exit(f"book-links: no built book in {out} (run mdbook build first)")

    files = []
    for d, _, names in os.walk(src):
        files += [os.path.join(d, n) for n in sorted(names) if n.endswith(".md")]
    extra = args.extra or ["README.md", "BENCHMARKS.md", "RELIABILITY.md"]
    files += [os.path.realpath(os.path.join(root, f)) for f in extra]

    anchor_cache = {}

    def anchors_of(target):
        if target not in anchor_cache:
            rel = os.path.relpath(target, src)
            if not rel.startswith("..") and target.endswith(".md"):
                page = os.path.join(out, rel[:-3] + ".html")
                anchor_cache[target] = html_ids(page) if os.path.isfile(page) else None
            elif target.endswith(".md"):
                with open(target, encoding="utf-8") as f:
                    anchor_cache[target] = github_anchors(f.read())
            elif target.endswith(".html"):
                anchor_cache[target] = html_ids(target)
            else:
                anchor_cache[target] = None  # not checked: no anchors known for this kind of file
        return anchor_cache[target]

    broken = checked = 0
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        shown = os.path.relpath(path, root)
        for offset, dest in links(text):
            line = text.count("\n", 0, offset) + 1
            dest = dest.strip()
            if dest.startswith("<") and dest.endswith(">"):
                dest = dest[1:-1]
            if not dest or SCHEME.match(dest) or dest.startswith("//"):
                continue
            checked += 1
            target, _, fragment = dest.partition("#")
            target = urllib.parse.unquote(target)
            fragment = urllib.parse.unquote(fragment)

            def bad(reason):
                nonlocal broken
                broken += 1
                print(f"{shown}:{line}: {dest}: {reason}")

            if target.startswith("/"):
                bad("absolute path: use a relative link")
                continue
            resolved = os.path.realpath(os.path.join(os.path.dirname(path), target)) if target else path
            if os.path.commonpath([resolved, root]) != root:
                bad("leaves the repository")
                continue
            if not os.path.exists(resolved):
                bad(f"no such file: {os.path.relpath(resolved, root)}")
                continue
            in_book = os.path.commonpath([resolved, src]) == src
            if in_book and resolved.endswith(".md") and resolved != os.path.join(src, "SUMMARY.md"):
                page = os.path.join(out, os.path.relpath(resolved, src)[:-3] + ".html")
                if not os.path.isfile(page):
                    bad("a chapter that is not in SUMMARY.md (mdBook does not build it)")
                    continue
            if fragment:
                known = anchors_of(resolved)
                if known is not None and fragment not in known:
                    bad(f"no anchor #{fragment} in {os.path.relpath(resolved, root)}")
    print(f"book-links: {checked} internal links in {len(files)} files, {broken} broken", file=sys.stderr)
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Soak: pier under steady wrk load while its configuration churns — the EndpointSlice file
rewritten 10 times a second (endpoints come and go among three live backends) and the route
file once a second (a header filter toggled) — for a fixed time. Samples pier's RSS and open
file descriptors every 5 s after a warm-up. Loopback only (127.0.0.1-3); bounded in time.

    cargo build --release && scripts/soak.py [--pier target/release/pier] [--seconds 1800]

Fails (exit 1) on any failed request, a reload that was refused, or RSS or descriptors
growing more than 10 % from the first sample after the warm-up to the last. CI runs a short
version (.ci/run).
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import figures

PORT = 18380
BACKEND = 18381  # on 127.0.0.1, .2 and .3
ADMIN = 18390

STATIC = figures.gateway(PORT)

# A response header filter whose value each route write changes.
RULE = """backendRefs: [{{name: web, port: 80}}]
    filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier: {{set: [{{name: x-generation, value: "{generation}"}}]}}"""

# The endpoint sets the churn cycles through: never empty, so no request may fail.
SETS = [[1, 2], [2, 3], [1, 3], [1, 2, 3], [3], [1]]


def write(path, text):
    """Atomically, as kubectl-style tools and editors that rename do."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def reloads(result):
    text = urllib.request.urlopen(f"http://127.0.0.1:{ADMIN}/metrics", timeout=5).read().decode()
    total = 0
    for m in re.finditer(r'pier_config_reloads_total\{[^}]*result="(\w+)"[^}]*\} (\d+)', text):
        if m.group(1) == result:
            total += int(m.group(2))
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pier", default="target/release/pier")
    ap.add_argument("--seconds", type=int, default=1800)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("needs wrk")
    d = tempfile.mkdtemp(prefix="pier-soak-")
    slice_path = os.path.join(d, "slice.yaml")

    def slice_of(ips):
        return figures.service("web", BACKEND, [f"127.0.0.{i}" for i in ips])

    def route_of(generation):
        return figures.route("r", RULE.format(generation=generation))

    write(os.path.join(d, "static.yaml"), STATIC)
    write(os.path.join(d, "route.yaml"), route_of(0))
    write(slice_path, slice_of([1, 2, 3]))
    echoes = [figures.echo(args.pier, f"127.0.0.{i}", BACKEND, f"echo-{i}") for i in (1, 2, 3)]
    pier = subprocess.Popen(
        [args.pier, "run", "--manifests", d, "--listen-host", "127.0.0.1",
         "--admin", f"127.0.0.1:{ADMIN}"],
        stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(d, "pier.log"), "w"),
    )
    stop = threading.Event()
    churned = [0, 0]  # endpoint-set writes, route writes

    def churn():
        n = 0
        while not stop.is_set():
            write(slice_path, slice_of(SETS[n % len(SETS)]))
            churned[0] += 1
            if n % 10 == 0:
                write(os.path.join(d, "route.yaml"), route_of(n // 10))
                churned[1] += 1
            n += 1
            stop.wait(0.1)

    failures = []
    try:
        for i in (1, 2, 3):
            figures.wait_port(f"127.0.0.{i}", BACKEND)
        figures.wait_port("127.0.0.1", PORT)
        wrk = subprocess.Popen(
            ["wrk", "-t1", "-c16", f"-d{args.seconds}s", "--timeout", "5s",
             f"http://127.0.0.1:{PORT}/"],
            stdout=subprocess.PIPE,
            text=True,
        )
        churner = threading.Thread(target=churn, daemon=True)
        churner.start()
        time.sleep(min(args.warmup, args.seconds // 3))
        samples = []
        end = time.time() + args.seconds
        while time.time() < end - 1 and wrk.poll() is None:
            samples.append((figures.rss_mib(pier.pid), fds(pier.pid)))
            time.sleep(min(5, max(end - time.time() - 1, 0.1)))
        out, _ = wrk.communicate(timeout=args.seconds + 60)
        stop.set()
        churner.join(5)
        total, bad, sock = figures.wrk_counts(out)
        ok_reloads, refused = reloads("Ok"), reloads("ParseError") + reloads("LimitExceeded")
        (rss0, fd0), (rss1, fd1) = samples[0], samples[-1]
        rss_max = max(s[0] for s in samples)
        print(f"duration: {args.seconds} s; endpoint-set writes: {churned[0]}; route writes: {churned[1]}")
        print(f"reloads published: {ok_reloads}; refused: {refused}")
        print(f"requests: {total}; non-2xx: {bad}; socket errors: {sock}")
        print(f"RSS: {rss0:.1f} -> {rss1:.1f} MiB (max {rss_max:.1f}); "
              f"fds: {fd0} -> {fd1} ({len(samples)} samples)")
        if bad or sock:
            failures.append("failed requests")
        if refused:
            failures.append("refused reloads")
        if rss1 > rss0 * 1.10:
            failures.append("RSS grew more than 10 %")
        if fd1 > fd0 * 1.10 + 4:
            failures.append("file descriptors grew")
    finally:
        stop.set()
        figures.stop(pier, *echoes)
        shutil.rmtree(d, ignore_errors=True)
    if failures:
        sys.exit(f"soak failed: {failures}")


if __name__ == "__main__":
    main()

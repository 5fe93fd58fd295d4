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

PORT = 18380
BACKEND = 18381  # on 127.0.0.1, .2 and .3
ADMIN = 18390

STATIC = """
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: pier}}
spec: {{controllerName: pier.dev/gateway-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  gatewayClassName: pier
  listeners: [{{name: http, protocol: HTTP, port: {port}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: default}}
spec: {{ports: [{{name: http, port: 80}}]}}
"""

ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - backendRefs: [{{name: web, port: 80}}]
    filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier: {{set: [{{name: x-generation, value: "{generation}"}}]}}
"""

SLICE = """
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: {{kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{{name: http, port: {backend}}}]
endpoints: [{endpoints}]
"""

# The endpoint sets the churn cycles through: never empty, so no request may fail.
SETS = [[1, 2], [2, 3], [1, 3], [1, 2, 3], [3], [1]]


def write(path, text):
    """Atomically, as kubectl-style tools and editors that rename do."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def wait_port(host, port, bound=20):
    end = time.time() + bound
    while time.time() < end:
        try:
            socket.create_connection((host, port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing listens on {host}:{port}")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


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
    write(os.path.join(d, "static.yaml"), STATIC.format(port=PORT))
    write(os.path.join(d, "route.yaml"), ROUTE.format(generation=0))
    slice_path = os.path.join(d, "slice.yaml")

    def slice_of(ips):
        eps = ", ".join(f"{{addresses: [127.0.0.{i}]}}" for i in ips)
        return SLICE.format(backend=BACKEND, endpoints=eps)

    write(slice_path, slice_of([1, 2, 3]))
    echoes = [
        subprocess.Popen(
            [args.pier, "echo", "--listen", f"127.0.0.{i}:{BACKEND}", "--name", f"echo-{i}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in (1, 2, 3)
    ]
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
                write(os.path.join(d, "route.yaml"), ROUTE.format(generation=n // 10))
                churned[1] += 1
            n += 1
            stop.wait(0.1)

    failures = []
    try:
        for i in (1, 2, 3):
            wait_port(f"127.0.0.{i}", BACKEND)
        wait_port("127.0.0.1", PORT)
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
            samples.append((rss_kib(pier.pid), fds(pier.pid)))
            time.sleep(min(5, max(end - time.time() - 1, 0.1)))
        out, _ = wrk.communicate(timeout=args.seconds + 60)
        stop.set()
        churner.join(5)
        total = int(re.search(r"(\d+) requests in", out).group(1))
        non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
        bad = int(non2xx.group(1)) if non2xx else 0
        errs = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
        sock = sum(int(x) for x in errs.groups()) if errs else 0
        ok_reloads, refused = reloads("Ok"), reloads("ParseError") + reloads("LimitExceeded")
        (rss0, fd0), (rss1, fd1) = samples[0], samples[-1]
        rss_max = max(s[0] for s in samples)
        print(f"duration: {args.seconds} s; endpoint-set writes: {churned[0]}; route writes: {churned[1]}")
        print(f"reloads published: {ok_reloads}; refused: {refused}")
        print(f"requests: {total}; non-2xx: {bad}; socket errors: {sock}")
        print(f"RSS: {rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MiB (max {rss_max / 1024:.1f}); "
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
        pier.terminate()
        pier.wait(10)
        for e in echoes:
            e.terminate()
            e.wait(10)
        shutil.rmtree(d, ignore_errors=True)
    if failures:
        sys.exit(f"soak failed: {failures}")


if __name__ == "__main__":
    main()

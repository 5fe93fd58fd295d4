#!/usr/bin/env python3
"""Outlier-detection figures for RELIABILITY.md: the client-visible error rate while one of
three endpoints of a Service fails in each way (refuses connections, answers 503, resets
connections, never answers), under wrk load for a fixed time. Loopback only (127.0.0.1-3);
bounded in time.

    cargo build --release && scripts/outlier-figures.py [--pier target/release/pier] [--seconds 10]

Prints one table row per failure. Exit status 1 if a row is worse than pier promises (under
2 % errors: an ejected endpoint gets no traffic for 5 s, then 10 s, 15 s ... while it stays
broken, and 5 failures eject it again each time).
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import figures

PORT = 18280  # pier's listener
BACKEND = 18281  # every endpoint's port, on 127.0.0.1, .2 and .3 (the failing one: .3)
ADMIN = 18290

MANIFESTS = (
    figures.gateway(PORT)
    + "---"
    + figures.route("r", "backendRefs: [{name: web, port: 80}]\n    timeouts: {backendRequest: 1s}")
    + "---"
    + figures.service("web", BACKEND, ["127.0.0.1", "127.0.0.2", "127.0.0.3"])
)


class Failing:
    """A misbehaving endpoint on 127.0.0.3: `answer503`, `reset` or `silent` (reads the
    request, never answers). `refused` listens on nothing."""

    def __init__(self, mode):
        self.mode = mode
        self.stop = False
        self.sock = None
        if mode == "refused":
            return
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.3", BACKEND))
        self.sock.listen(512)
        self.sock.settimeout(0.2)
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        c.settimeout(5)
        try:
            while not self.stop:
                data = c.recv(65536)
                if not data:
                    break
                if self.mode == "answer503":
                    c.sendall(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n")
                elif self.mode == "reset":
                    # RST instead of FIN: SO_LINGER with a zero timeout.
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    break
                # silent: read and never answer
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        self.stop = True
        if self.sock:
            self.sock.close()
            # The accept thread lets go of the socket within its 0.2 s timeout.
            time.sleep(0.5)


def run_wrk(seconds):
    out = subprocess.run(
        ["wrk", "-t1", "-c8", f"-d{seconds}s", "--timeout", "3s", f"http://127.0.0.1:{PORT}/"],
        capture_output=True,
        text=True,
        timeout=seconds + 30,
    ).stdout
    return figures.wrk_counts(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pier", default="target/release/pier")
    ap.add_argument("--seconds", type=int, default=10)
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("needs wrk")
    d = tempfile.mkdtemp(prefix="pier-outlier-")
    with open(os.path.join(d, "m.yaml"), "w") as f:
        f.write(MANIFESTS)
    echoes = [figures.echo(args.pier, f"127.0.0.{i}", BACKEND, f"echo-{i}") for i in (1, 2)]
    failed = []
    print(f"| one of 3 endpoints | requests in {args.seconds} s | non-2xx | socket errors | error rate |")
    print("|---|---|---|---|---|")
    try:
        for i in (1, 2):
            figures.wait_port(f"127.0.0.{i}", BACKEND)
        for mode in ["healthy", "refused", "answer503", "reset", "silent"]:
            failing = None
            if mode == "healthy":
                # The third endpoint is a healthy echo too.
                failing_proc = figures.echo(args.pier, "127.0.0.3", BACKEND, "echo-3")
                figures.wait_port("127.0.0.3", BACKEND)
            else:
                failing_proc = None
                failing = Failing(mode)
            pier = subprocess.Popen(
                [args.pier, "run", "--manifests", d, "--listen-host", "127.0.0.1",
                 "--admin", f"127.0.0.1:{ADMIN}"],
                stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(d, f"pier-{mode}.log"), "w"),
            )
            try:
                figures.wait_port("127.0.0.1", PORT)
                total, bad, sock = run_wrk(args.seconds)
            finally:
                figures.stop(pier)
                if failing:
                    failing.close()
                if failing_proc:
                    figures.stop(failing_proc)
            rate = 100.0 * (bad + sock) / max(total, 1)
            print(f"| {mode} | {total} | {bad} | {sock} | {rate:.3f} % |")
            if rate >= 2.0:
                failed.append(mode)
    finally:
        figures.stop(*echoes)
        shutil.rmtree(d, ignore_errors=True)
    if failed:
        sys.exit(f"error rate of 2 % or more with: {failed}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Hostile-client figures for RELIABILITY.md: runs a pier binary on loopback against its own
echo backends and measures what each attack of the reliability issue's "found already" list
gets now. Bounded in time and count; talks only to 127.0.0.1.

    cargo build --release && scripts/hostile-clients.py [--pier target/release/pier]

Prints one line per figure. Exit status 1 if a figure is not what pier promises.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import figures

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PORT = 18180  # pier's listener
ECHO = 18181  # the echo backend
ADMIN = 18190
SLOWLORIS = 10_000  # attacking connections (figure 5)

MANIFESTS = (
    figures.gateway(PORT)
    + "---"
    + figures.route("a", "matches: [{path: {type: PathPrefix, value: /a}}]\n    backendRefs: [{name: echo, port: 80}]")
    + "---"
    + figures.service("echo", ECHO, ["127.0.0.1"])
)

failures = []


def figure(name, value, ok):
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {value}")
    if not ok:
        failures.append(name)


def status_of(raw, timeout=5):
    s = socket.create_connection(("127.0.0.1", PORT), 2)
    s.settimeout(timeout)
    s.sendall(raw)
    buf = b""
    try:
        while b"\r\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    except socket.timeout:
        return None
    finally:
        s.close()
    line = buf.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) > 1 else None


def established_to(port):
    out = subprocess.run(
        ["ss", "-Htn", "state", "established", f"( dport = :{port} )"],
        capture_output=True,
        text=True,
    ).stdout
    return len([l for l in out.splitlines() if l.strip()])


def main():
    global SLOWLORIS
    ap = argparse.ArgumentParser()
    ap.add_argument("--pier", default=os.path.join(REPO, "target/release/pier"))
    ap.add_argument("--slowloris", type=int, default=SLOWLORIS, help="attacking connections")
    args = ap.parse_args()
    SLOWLORIS = args.slowloris
    if not shutil.which("ss"):
        sys.exit("needs ss (iproute2)")
    d = tempfile.mkdtemp(prefix="pier-hostile-")
    with open(os.path.join(d, "m.yaml"), "w") as f:
        f.write(MANIFESTS)
    echo = subprocess.Popen(
        [args.pier, "echo", "--listen", f"127.0.0.1:{ECHO}", "--name", "echo"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pier = subprocess.Popen(
        [
            args.pier, "run", "--manifests", d, "--listen-host", "127.0.0.1",
            "--admin", f"127.0.0.1:{ADMIN}", "--idle-timeout", "2",
            "--request-body-timeout", "5", "--request-body-min-rate", "240",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(d, "pier.log"), "w"),
    )
    try:
        figures.wait_port("127.0.0.1", ECHO)
        figures.wait_port("127.0.0.1", PORT)
        run_figures(pier.pid)
    finally:
        pier.terminate()
        echo.terminate()
        pier.wait(10)
        echo.wait(10)
    if failures:
        sys.exit(f"{len(failures)} figure(s) not as promised: {failures}")


def run_figures(pier_pid):
    # 1. HTTP/2 connections that send the preface and nothing else (idle timeout 2 s).
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
    conns = []
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", PORT), 2)
        s.sendall(preface)
        conns.append(s)
    time.sleep(1)
    open_after_1 = established_to(PORT)
    time.sleep(3.5)
    open_after_4 = established_to(PORT)
    for s in conns:
        s.close()
    figure("200 idle h2c connections still open after 1 s", open_after_1, open_after_1 >= 190)
    figure("... and after 4.5 s (--idle-timeout 2)", open_after_4, open_after_4 == 0)

    # 2. 30 chunked request bodies at 1 byte/s (min rate 240 B/s after 5 s).
    base = established_to(ECHO)
    slow = []
    for _ in range(30):
        s = socket.create_connection(("127.0.0.1", PORT), 2)
        s.sendall(b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        s.setblocking(False)
        slow.append(s)
    answers = {}
    peak = 0
    started = time.time()
    while time.time() - started < 9:
        for s in slow:
            try:
                s.send(b"1\r\nx\r\n")
            except OSError:
                pass
            try:
                data = s.recv(4096)
                if data.startswith(b"HTTP/1.1 "):
                    answers[s] = int(data.split()[1])
            except (BlockingIOError, OSError):
                pass
        peak = max(peak, established_to(ECHO) - base)
        time.sleep(1)
    held_after = established_to(ECHO) - base
    for s in slow:
        s.close()
    codes = sorted(set(answers.values()))
    figure("30 bodies at 1 B/s: answered", f"{len(answers)} with {codes}", len(answers) == 30 and codes == [408])
    figure("... upstream connections they held at the peak", peak, peak <= 30)
    figure("... upstream connections still held after 9 s", max(held_after, 0), held_after <= 0)

    # 3. Malformed or ambiguous heads: what pier answers (nothing reaches the backend).
    cases = [
        ("HTTP/1.1 without Host", b"GET /a HTTP/1.1\r\n\r\n", 400),
        ("two Host headers", b"GET /a HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        ("empty Host", b"GET /a HTTP/1.1\r\nHost: \r\n\r\n", 400),
        ("userinfo in absolute-form", b"GET http://u:p@x/a HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("Transfer-Encoding: gzip, chunked",
         b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", 501),
        ("malformed chunk size",
         b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nx\r\n0\r\n\r\n", 400),
        ("/a/../old (routes as /old: no route)", b"GET /a/../old HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        ("/a/%2e%2e/old", b"GET /a/%2e%2e/old HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        ("/b/../a/x (routes as /a/x)", b"GET /b/../a/x HTTP/1.1\r\nHost: x\r\n\r\n", 200),
        ("malformed escape /a%zz", b"GET /a%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("a 100 KiB header", b"GET /a HTTP/1.1\r\nHost: x\r\nX-Big: " + b"x" * 102400 + b"\r\n\r\n", 431),
    ]
    for name, raw, want in cases:
        got = status_of(raw)
        figure(f"{name} -> {want}", got, got == want)

    # 4. 500 incomplete heads just under the 64 KiB limit: memory held.
    before = figures.rss_mib(pier_pid)
    heads = []
    for _ in range(500):
        s = socket.create_connection(("127.0.0.1", PORT), 2)
        s.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\nX-Big: " + b"x" * 60000)
        heads.append(s)
    time.sleep(1)
    during = figures.rss_mib(pier_pid)
    for s in heads:
        s.close()
    figure("500 incomplete 60 KB heads: RSS growth (MiB)", f"{during - before:.1f} (from {before:.1f})", during - before < 100)

    # 5. A slowloris of SLOWLORIS connections (the default cap is 10 000 per port): each sends
    # part of a head and one more header byte each second, and reconnects when closed. Other
    # clients must still be served promptly (pier closes the longest-waiting connections at
    # the cap), not after the 30 s header timeout.
    slowloris(pier_pid)

    # 6. HTTP/2 rapid reset (CVE-2023-44487) and CONTINUATION flood (CVE-2024-27316) on h2c.
    rapid_reset(pier_pid)
    continuation_flood(pier_pid)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def h2_frame(kind, flags, stream, payload):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def h2_connect():
    s = socket.create_connection(("127.0.0.1", PORT), 2)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b""))
    return s


def goaway_in(data):
    """Whether a GOAWAY frame is among the frames in `data` (from the start of the stream)."""
    i = 0
    while i + 9 <= len(data):
        length = int.from_bytes(data[i:i + 3], "big")
        if data[i + 3] == 7:
            return True
        i += 9 + length
    return False


def drain(s, bound):
    """Reads what the server sends until it closes or `bound` seconds pass."""
    s.settimeout(0.2)
    data = b""
    end = time.time() + bound
    while time.time() < end:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data


def rapid_reset(pier_pid):
    # HEADERS (GET / on host x, END_STREAM | END_HEADERS) then RST_STREAM(CANCEL), again and
    # again on new streams, as fast as the socket takes them: at most 100 000 streams.
    block = bytes([0x82, 0x86, 0x84, 0x01, 0x01]) + b"x"
    cpu0, rss0 = cpu_seconds(pier_pid), figures.rss_mib(pier_pid)
    s = h2_connect()
    sent = 0
    closed = False
    started = time.time()
    try:
        for batch in range(1000):
            frames = b"".join(
                h2_frame(1, 0x5, sid, block) + h2_frame(3, 0, sid, (8).to_bytes(4, "big"))
                for sid in range(1 + 2 * sent, 1 + 2 * (sent + 100), 2)
            )
            s.sendall(frames)
            sent += 100
    except OSError:
        closed = True
    data = drain(s, 3)
    s.close()
    cpu = cpu_seconds(pier_pid) - cpu0
    figure(
        "HTTP/2 rapid reset: streams opened and reset before pier ended the connection",
        f"{sent} sent in {time.time() - started:.2f} s, GOAWAY {goaway_in(data)}, "
        f"closed {closed or not data or goaway_in(data)}, pier CPU {cpu:.2f} s, "
        f"RSS {rss0:.1f} -> {figures.rss_mib(pier_pid):.1f} MiB",
        goaway_in(data) and sent < 100_000 and cpu < 5,
    )


def continuation_flood(pier_pid):
    # HEADERS without END_HEADERS, then CONTINUATION frames of 16 KiB literal headers that
    # never end the block: at most 64 MiB.
    # Literal without indexing, name "a", a 16 000-byte value (HPACK integer 0x7F 0x81 0x7C).
    literal = bytes([0x00, 0x01, ord("a"), 0x7F, 0x81, 0x7C]) + b"b" * 16_000
    cpu0, rss0 = cpu_seconds(pier_pid), figures.rss_mib(pier_pid)
    s = h2_connect()
    sent = 0
    try:
        s.sendall(h2_frame(1, 0x1, 1, bytes([0x82, 0x86, 0x84, 0x01, 0x01]) + b"x"))
        while sent < 64 * 1024 * 1024:
            s.sendall(h2_frame(9, 0, 1, literal))
            sent += len(literal)
    except OSError:
        pass
    data = drain(s, 3)
    s.close()
    cpu = cpu_seconds(pier_pid) - cpu0
    figure(
        "HTTP/2 CONTINUATION flood: bytes of one header block sent before pier ended it",
        f"{sent / 1024:.0f} KiB, GOAWAY {goaway_in(data)}, pier CPU {cpu:.2f} s, "
        f"RSS {rss0:.1f} -> {figures.rss_mib(pier_pid):.1f} MiB",
        sent < 64 * 1024 * 1024 and cpu < 5,
    )


def slowloris(pier_pid):
    import resource
    import selectors

    n = SLOWLORIS
    resource.setrlimit(resource.RLIMIT_NOFILE, (n + 4096, n + 4096))
    head = b"GET /a HTTP/1.1\r\nHost: x\r\nX-Slow: "

    def open_one():
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", PORT))
        except BlockingIOError:
            pass
        return s

    attackers = [open_one() for _ in range(n)]
    sent_head = [False] * n
    opened = n
    time.sleep(2)
    before = figures.rss_mib(pier_pid)
    latencies = []
    failed = 0
    end = time.time() + 20
    next_trickle = 0
    while time.time() < end:
        if time.time() >= next_trickle:
            next_trickle = time.time() + 1
            for i, s in enumerate(attackers):
                try:
                    s.send(b"a" if sent_head[i] else head)
                    sent_head[i] = True
                except (BlockingIOError, InterruptedError):
                    pass  # still connecting
                except OSError:
                    # Closed by pier: come back, as an attacker would.
                    s.close()
                    attackers[i] = open_one()
                    sent_head[i] = False
                    opened += 1
        # One legitimate request on a new connection, its latency measured.
        started = time.time()
        try:
            got = status_of(b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout=10)
        except OSError:
            got = None
        if got == 200:
            latencies.append(time.time() - started)
        else:
            failed += 1
        time.sleep(0.2)
    during = figures.rss_mib(pier_pid)
    for s in attackers:
        s.close()
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000 if latencies else float("nan")
    worst = latencies[-1] * 1000 if latencies else float("nan")
    figure(
        f"slowloris of {n} connections (reconnecting; {opened} opened in 20 s): other clients",
        f"{len(latencies)} served, {failed} failed, p50 {p50:.1f} ms, max {worst:.1f} ms",
        failed == 0 and latencies and worst < 3000,
    )
    figure(f"... pier RSS during the slowloris (MiB)", f"{during:.1f} (from {before:.1f})", during < 1024)


if __name__ == "__main__":
    main()

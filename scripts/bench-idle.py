#!/usr/bin/env python3
"""Memory per idle client connection: pier against nginx and HAProxy (issue 19, goal 3).

    scripts/bench-idle.py                      # 9 000 connections, plain and HTTPS
    scripts/bench-idle.py --conns 2000 --proxies pier nginx --protocols http

Each proxy runs alone with one worker (pier: PIER_WORKER_THREADS=1), in front of one nginx
origin on 127.0.0.1. For each proxy and protocol (http: plain HTTP/1.1; https: TLS 1.3 with an
ECDSA P-256 listener certificate, HTTP/1.1 by ALPN), the script opens `--conns` keep-alive
client connections, sends one request on each and reads its answer, then leaves them idle. The
proxy's RSS (all its processes) is read before the first connection and again once every
connection is open and has idled for `--settle` seconds (12); the difference divided by the
number of connections is the memory one idle connection costs. Afterwards a sample of the connections must still answer a
second request (none was closed behind the script's back). Every connection is closed and the
proxy stopped before the next one starts.

Needs nginx, haproxy, openssl (installed with apt-get when missing) and a release build of
pier (--pier, default target/release/pier). Ports PORT_BASE+1..+9 on 127.0.0.1 (default 19700).
The default of 9 000 connections fits a hard open-files limit of 20 000 (HAProxy reserves two
descriptors per connection); more need a higher limit.
"""

import argparse
import asyncio
import os
import random
import resource
import shutil
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import figures  # noqa: E402

REQUEST = b"GET / HTTP/1.1\r\nHost: idle.bench\r\n\r\n"


def args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--conns", type=int, default=9_000)
    p.add_argument("--proxies", nargs="+", default=["nginx", "pier", "haproxy"])
    p.add_argument("--protocols", nargs="+", default=["http", "https"])
    p.add_argument("--pier", default="target/release/pier")
    p.add_argument("--port-base", type=int, default=int(os.environ.get("PORT_BASE", "19700")))
    p.add_argument("--cpu", default="0", help="CPU the proxy is pinned to")
    p.add_argument("--settle", type=float, default=12.0,
                   help="seconds between the last connection opening and the second RSS reading "
                        "(pier parks an idle connection after 1 s, and jemalloc returns freed pages "
                        "over its 10 s decay; under the 30 s keep-alive timeout)")
    return p.parse_args()


def install():
    need = [t for t in ("nginx", "haproxy", "openssl") if not shutil.which(t) and not os.path.exists(f"/usr/sbin/{t}")]
    if need:
        subprocess.run(["apt-get", "install", "-y", "-qq", *need], check=True)
    os.environ["PATH"] += ":/usr/sbin"


def certs(d):
    key, crt = f"{d}/edge.key", f"{d}/edge.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-days", "1", "-subj", "/CN=idle.bench", "-keyout", key, "-out", crt],
        check=True, capture_output=True)
    with open(f"{d}/edge.pem", "w") as f:
        f.write(open(crt).read() + open(key).read())
    return key, crt


class Ports:
    def __init__(self, base):
        self.origin = base + 1
        self.http = {"nginx": base + 2, "haproxy": base + 3, "pier": base + 4}
        self.https = {"nginx": base + 5, "haproxy": base + 6, "pier": base + 7}
        self.admin = base + 9


def write_configs(d, ports, key, crt, conns):
    temps = "client_body_temp_path tmp; proxy_temp_path tmp; fastcgi_temp_path tmp; uwsgi_temp_path tmp; scgi_temp_path tmp;"
    os.makedirs(f"{d}/origin/tmp", exist_ok=True)
    os.makedirs(f"{d}/nginx/tmp", exist_ok=True)
    os.makedirs(f"{d}/pier", exist_ok=True)
    with open(f"{d}/origin/nginx.conf", "w") as f:
        f.write(f"""worker_processes 1; daemon off; pid nginx.pid; error_log stderr warn;
events {{ worker_connections 1024; }}
http {{ access_log off; {temps}
  server {{ listen 127.0.0.1:{ports.origin}; location / {{ return 200 "hello, world\\n"; }} }} }}
""")
    with open(f"{d}/nginx/nginx.conf", "w") as f:
        f.write(f"""worker_processes 1; daemon off; pid nginx.pid; error_log stderr warn;
worker_rlimit_nofile {conns + 1000};
events {{ worker_connections {conns + 1000}; }}
http {{ access_log off; keepalive_timeout 300s; keepalive_requests 1000000; {temps}
  upstream origin {{ server 127.0.0.1:{ports.origin}; keepalive 64; }}
  ssl_protocols TLSv1.2 TLSv1.3;
  server {{ listen 127.0.0.1:{ports.http['nginx']} backlog=4096;
    location / {{ proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; }} }}
  server {{ listen 127.0.0.1:{ports.https['nginx']} ssl backlog=4096; ssl_certificate {crt}; ssl_certificate_key {key};
    location / {{ proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; }} }} }}
""")
    # One fd per idle client (server connections are shared: http-reuse always), not the two
    # per connection HAProxy plans for by default.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    with open(f"{d}/haproxy.cfg", "w") as f:
        f.write(f"""global
    nbthread 1
    maxconn {conns + 500}
    ulimit-n {hard}
defaults
    mode http
    timeout connect 5s
    timeout client 300s
    timeout server 60s
    timeout http-keep-alive 300s
    http-reuse always
frontend fe_http
    bind 127.0.0.1:{ports.http['haproxy']} backlog 4096
    default_backend be
frontend fe_https
    bind 127.0.0.1:{ports.https['haproxy']} backlog 4096 ssl crt {d}/edge.pem alpn http/1.1
    default_backend be
backend be
    server origin 127.0.0.1:{ports.origin}
""")
    gw = figures.gateway(ports.http["pier"]).replace(
        f"listeners: [{{name: http, protocol: HTTP, port: {ports.http['pier']}}}]",
        f"listeners:\n  - {{name: http, protocol: HTTP, port: {ports.http['pier']}}}\n"
        f"  - {{name: https, protocol: HTTPS, port: {ports.https['pier']}, tls: {{certificateRefs: [{{name: edge}}]}}}}")
    indent = lambda path: "".join("    " + line for line in open(path))
    secret = f"""apiVersion: v1
kind: Secret
metadata: {{name: edge, namespace: default}}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{indent(crt)}  tls.key: |
{indent(key)}"""
    with open(f"{d}/pier/all.yaml", "w") as f:
        f.write("---\n".join([
            gw,
            figures.route("origin", "backendRefs: [{name: origin, port: 80}]"),
            figures.service("origin", ports.origin, ['"127.0.0.1"']),
            secret,
        ]))


def family_rss_kib(pid):
    """RSS of `pid` and its children (nginx's and HAProxy's workers), KiB."""
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    pids = [pid, *map(int, children)]
    return sum(figures.rss_mib(p) * 1024 for p in pids)


def start(proxy, d, ports, cpu, pier, conns):
    pin = ["taskset", "-c", cpu]
    quiet = dict(stdout=subprocess.DEVNULL, stderr=open(f"{d}/{proxy}.log", "w"))
    if proxy == "nginx":
        p = subprocess.Popen(pin + ["nginx", "-p", f"{d}/nginx/", "-c", f"{d}/nginx/nginx.conf", "-e", "stderr"], **quiet)
    elif proxy == "haproxy":
        p = subprocess.Popen(pin + ["haproxy", "-f", f"{d}/haproxy.cfg", "-db"], **quiet)
    else:
        env = dict(os.environ, PIER_WORKER_THREADS="1", RUST_LOG="warn")
        p = subprocess.Popen(pin + [pier, "run", "--manifests", f"{d}/pier", "--listen-host", "127.0.0.1",
                                    "--admin", f"127.0.0.1:{ports.admin}", "--max-connections", str(conns * 2)],
                             env=env, **quiet)
    figures.wait_port("127.0.0.1", ports.http[proxy])
    figures.wait_port("127.0.0.1", ports.https[proxy])
    return p


async def exchange(reader, writer):
    writer.write(REQUEST)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    return status


async def open_idle(port, tls, n):
    ctx = None
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["http/1.1"])
    conns = []
    sem = asyncio.Semaphore(200)

    async def one():
        async with sem:
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
            status = await exchange(r, w)
            if status != 200:
                raise RuntimeError(f"status {status}")
            conns.append((r, w))

    await asyncio.gather(*(one() for _ in range(n)))
    return conns


async def measure(proxy, protocol, d, ports, opts):
    p = start(proxy, d, ports, opts.cpu, opts.pier, opts.conns)
    try:
        port = getattr(ports, protocol)[proxy]
        # A few connections first, so that allocator arenas and the upstream pool exist.
        warm = await open_idle(port, protocol == "https", 16)
        for _, w in warm:
            w.close()
        await asyncio.sleep(1)
        before = family_rss_kib(p.pid)
        t0 = time.time()
        conns = await open_idle(port, protocol == "https", opts.conns)
        opened = time.time() - t0
        await asyncio.sleep(opts.settle)
        after = family_rss_kib(p.pid)
        sample = random.sample(conns, min(200, len(conns)))
        statuses = await asyncio.gather(*(exchange(r, w) for r, w in sample), return_exceptions=True)
        alive = sum(1 for s in statuses if s == 200)
        for _, w in conns:
            w.close()
        return dict(proxy=proxy, protocol=protocol, n=len(conns), before=before, after=after,
                    per=(after - before) / len(conns), alive=alive, sample=len(sample), secs=opened)
    finally:
        figures.stop(p)


def main():
    opts = args()
    install()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < opts.conns + 1000:
        sys.exit(f"the open-files limit ({hard}) is too low for {opts.conns} connections")
    d = tempfile.mkdtemp(prefix="pier-bench-idle-")
    ports = Ports(opts.port_base)
    key, crt = certs(d)
    write_configs(d, ports, key, crt, opts.conns)
    origin = subprocess.Popen(["taskset", "-c", "1", "nginx", "-p", f"{d}/origin/", "-c", f"{d}/origin/nginx.conf",
                               "-e", "stderr"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        figures.wait_port("127.0.0.1", ports.origin)
        for protocol in opts.protocols:
            for proxy in opts.proxies:
                r = asyncio.run(measure(proxy, protocol, d, ports, opts))
                print(f"{proxy} {protocol}: {r['n']} idle connections, RSS {r['before'] / 1024:.1f} -> "
                      f"{r['after'] / 1024:.1f} MiB, {r['per']:.1f} KiB each, {r['alive']}/{r['sample']} answered "
                      f"again, opened in {r['secs']:.1f} s", file=sys.stderr)
                rows.append(r)
    finally:
        figures.stop(origin)
        shutil.rmtree(d, ignore_errors=True)
    nginx = {r["protocol"]: r["per"] for r in rows if r["proxy"] == "nginx"}
    print(f"\n{opts.conns} idle keep-alive client connections, one request each, 1 worker per proxy\n")
    print("| proxy | protocol | RSS before | RSS with the connections | KiB per connection | vs nginx | still answering |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = f"{r['per'] / nginx[r['protocol']]:.2f}" if nginx.get(r["protocol"]) else "-"
        print(f"| {r['proxy']} | {r['protocol']} | {r['before'] / 1024:.1f} MiB | {r['after'] / 1024:.1f} MiB | "
              f"{r['per']:.1f} | {ratio} | {r['alive']}/{r['sample']} |")
    if any(r["alive"] != r["sample"] for r in rows):
        sys.exit("some idle connections were closed")


if __name__ == "__main__":
    main()

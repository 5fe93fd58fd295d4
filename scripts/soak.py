#!/usr/bin/env python3
"""Soak: pier under steady wrk load while its configuration churns, for a fixed time:

- the EndpointSlice files rewritten 10 times a second (endpoints come and go among three live
  backends, never none),
- the route file once a second (a header filter toggled),
- the mesh trust bundle rotated to a new CA once a minute (--rotate): the bundle first holds
  the old and the new CA, a third of the period later the meshed workloads take certificates
  from the new CA (files they re-read, as a sidecar does), another third later the old CA
  leaves the bundle.

Two wrk clients: one on a plain route (three `pier echo` backends on 127.0.0.1-3), one on a
meshed route (three `pier echo --tls-cert --client-ca` workloads on 127.0.0.4-6 that require
pier's client certificate and report every connection that does not start with a TLS
handshake record). Samples pier's RSS and open file descriptors every 5 s after a warm-up.
Loopback only; bounded in time.

    cargo build --release && scripts/soak.py [--pier target/release/pier] [--seconds 1800]

Fails (exit 1) on any failed request, a reload that was refused, a plaintext connection to a
meshed workload, or RSS or descriptors growing more than 10 % from the first sample after the
warm-up to the last. CI runs a short version (.ci/run).
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
BACKEND = 18381  # plain: on 127.0.0.1, .2 and .3
MESHED = 18382  # meshed workloads: on 127.0.0.4, .5 and .6
ADMIN = 18390
SNI = "mesh-web.default.svc.cluster.local"

# The Gateway, meshed: pier's client certificate from the Secret `gateway-client`, workloads
# verified against the ConfigMap `mesh-ca`, HTTPRoutes labelled `mesh: enabled` meshed.
STATIC = figures.gateway(PORT) + """  tls:
    backend:
      clientCertificateRef: {name: gateway-client}
  mesh:
    trustBundle: [{kind: ConfigMap, name: mesh-ca}]
    selector:
      matchLabels: {mesh: enabled}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: meshed, namespace: default, labels: {mesh: enabled}}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /mesh}}]
    backendRefs: [{name: mesh-web, port: 443}]
---
apiVersion: v1
kind: Service
metadata: {name: mesh-web, namespace: default}
spec: {ports: [{name: https, port: 443}]}
"""

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


def indent(text, n=4):
    return "".join(" " * n + line + "\n" for line in text.strip().splitlines())


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def reloads(result):
    text = urllib.request.urlopen(f"http://127.0.0.1:{ADMIN}/metrics", timeout=5).read().decode()
    total = 0
    for m in re.finditer(r'pier_config_reloads_total\{[^}]*result="(\w+)"[^}]*\} (\d+)', text):
        if m.group(1) == result:
            total += int(m.group(2))
    return total


class Pki:
    """EC P-256 certificates made with the openssl command in directory `d`."""

    def __init__(self, d):
        self.d = d
        self.n = 0

    def _run(self, *args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    def _key(self, path):
        self._run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path)

    def ca(self, cn):
        """A new CA: its certificate's path (its key next to it)."""
        self.n += 1
        base = os.path.join(self.d, f"ca-{self.n}")
        self._key(base + ".key")
        self._run("req", "-x509", "-new", "-key", base + ".key", "-sha256", "-days", "2",
                  "-subj", f"/O=soak/CN={cn}",
                  "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                  "-out", base + ".crt")
        return base + ".crt"

    def leaf(self, ca_crt, cn, san, eku):
        """(certificate PEM, key PEM) of a leaf signed by `ca_crt`."""
        self.n += 1
        base = os.path.join(self.d, f"leaf-{self.n}")
        with open(base + ".ext", "w") as f:
            f.write(f"basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                    f"extendedKeyUsage={eku}\nsubjectAltName={san}\n")
        self._key(base + ".key")
        self._run("req", "-new", "-key", base + ".key", "-subj", f"/O=soak/CN={cn}", "-out", base + ".csr")
        self._run("x509", "-req", "-in", base + ".csr", "-CA", ca_crt, "-CAkey", ca_crt[:-4] + ".key",
                  "-CAcreateserial", "-sha256", "-days", "2", "-extfile", base + ".ext", "-out", base + ".crt")
        with open(base + ".crt") as c, open(base + ".key") as k:
            return c.read(), k.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pier", default="target/release/pier")
    ap.add_argument("--seconds", type=int, default=1800)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rotate", type=int, default=60, help="seconds per trust-bundle rotation")
    args = ap.parse_args()
    for tool in ("wrk", "openssl"):
        if not shutil.which(tool):
            sys.exit(f"needs {tool}")
    d = tempfile.mkdtemp(prefix="pier-soak-")
    pki = Pki(d)
    slice_path = os.path.join(d, "slice.yaml")
    meshed_path = os.path.join(d, "meshed-slice.yaml")
    bundle_path = os.path.join(d, "bundle.yaml")

    def slice_of(ips):
        return figures.service("web", BACKEND, [f"127.0.0.{i}" for i in ips])

    def meshed_of(ips):
        endpoints = ", ".join(f"{{addresses: [127.0.0.{i + 3}]}}" for i in ips)
        return figures.endpoint_slice("mesh-web", MESHED, endpoints).replace("name: http,", "name: https,")

    def route_of(generation):
        return figures.route("r", RULE.format(generation=generation))

    def bundle_of(cas):
        pem = "".join(open(c).read() for c in cas)
        return ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: mesh-ca, namespace: default}\n"
                "data:\n  ca-bundle.crt: |\n" + indent(pem))

    # pier's client identity (its CA is what the workloads trust) and the first mesh CA.
    gateway_ca = pki.ca("gateway CA")
    client_crt, client_key = pki.leaf(gateway_ca, "gateway", "URI:spiffe://cluster.local/ns/gw/sa/pier",
                                      "clientAuth")
    mesh_ca = [pki.ca("mesh CA 1")]

    def issue_workloads(ca):
        """The three workloads' certificate files, rewritten from `ca` (key, then certificate:
        a workload that reads between the two keeps its last good pair)."""
        for i in (1, 2, 3):
            crt, key = pki.leaf(ca, f"workload-{i}", f"DNS:{SNI},URI:spiffe://cluster.local/ns/default/sa/web",
                                "serverAuth")
            write(os.path.join(d, f"wl-{i}.key"), key)
            write(os.path.join(d, f"wl-{i}.crt"), crt)

    write(os.path.join(d, "static.yaml"), STATIC)
    write(os.path.join(d, "client.yaml"),
          "apiVersion: v1\nkind: Secret\nmetadata: {name: gateway-client, namespace: default}\n"
          "type: kubernetes.io/tls\nstringData:\n  tls.crt: |\n" + indent(client_crt) +
          "  tls.key: |\n" + indent(client_key))
    write(bundle_path, bundle_of(mesh_ca))
    write(os.path.join(d, "route.yaml"), route_of(0))
    write(slice_path, slice_of([1, 2, 3]))
    write(meshed_path, meshed_of([1, 2, 3]))
    issue_workloads(mesh_ca[0])
    echoes = [figures.echo(args.pier, f"127.0.0.{i}", BACKEND, f"echo-{i}") for i in (1, 2, 3)]
    workload_logs = [os.path.join(d, f"wl-{i}.log") for i in (1, 2, 3)]
    workloads = [
        subprocess.Popen(
            [args.pier, "echo", "--listen", f"127.0.0.{i + 3}:{MESHED}", "--name", f"workload-{i}",
             "--tls-cert", os.path.join(d, f"wl-{i}.crt"), "--tls-key", os.path.join(d, f"wl-{i}.key"),
             "--client-ca", gateway_ca],
            stdout=subprocess.DEVNULL,
            stderr=open(workload_logs[i - 1], "w"),
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
    churned = [0, 0, 0]  # endpoint-set writes, route writes, trust-bundle rotations

    def churn():
        n = 0
        while not stop.is_set():
            write(slice_path, slice_of(SETS[n % len(SETS)]))
            write(meshed_path, meshed_of(SETS[(n + 3) % len(SETS)]))
            churned[0] += 2
            if n % 10 == 0:
                write(os.path.join(d, "route.yaml"), route_of(n // 10))
                churned[1] += 1
            n += 1
            stop.wait(0.1)

    def rotate():
        third = args.rotate / 3
        while not stop.wait(third):
            new = pki.ca(f"mesh CA {len(mesh_ca) + 1}")
            write(bundle_path, bundle_of([mesh_ca[-1], new]))
            if stop.wait(third):
                return
            issue_workloads(new)
            if stop.wait(third):
                return
            write(bundle_path, bundle_of([new]))
            mesh_ca.append(new)
            churned[2] += 1

    failures = []
    try:
        for i in (1, 2, 3):
            figures.wait_port(f"127.0.0.{i}", BACKEND)
            figures.wait_port(f"127.0.0.{i + 3}", MESHED)
        figures.wait_port("127.0.0.1", PORT)
        clients = {
            path: subprocess.Popen(
                ["wrk", "-t1", "-c8", f"-d{args.seconds}s", "--timeout", "5s",
                 f"http://127.0.0.1:{PORT}{path}"],
                stdout=subprocess.PIPE,
                text=True,
            )
            for path in ("/", "/mesh")
        }
        threads = [threading.Thread(target=f, daemon=True) for f in (churn, rotate)]
        for t in threads:
            t.start()
        time.sleep(min(args.warmup, args.seconds // 3))
        samples = []
        end = time.time() + args.seconds
        while time.time() < end - 1 and all(w.poll() is None for w in clients.values()):
            samples.append((figures.rss_mib(pier.pid), fds(pier.pid)))
            time.sleep(min(5, max(end - time.time() - 1, 0.1)))
        outs = {path: w.communicate(timeout=args.seconds + 60)[0] for path, w in clients.items()}
        stop.set()
        for t in threads:
            t.join(10)
        ok_reloads, refused = reloads("Ok"), reloads("ParseError") + reloads("LimitExceeded")
        plaintext = sum(open(f).read().count("plaintext connection") for f in workload_logs)
        rotated = sum(open(f).read().count("certificate reloaded") for f in workload_logs)
        (rss0, fd0), (rss1, fd1) = samples[0], samples[-1]
        # The open connections move with the endpoint churn (one to three endpoints, each with
        # up to a client's worth of idle connections per worker), so one sample against another
        # is noise of a dozen fds. A leak raises the floor: the fewest fds late in the run are
        # compared with the most early on.
        third = max(len(samples) // 3, 1)
        fd_early, fd_late = max(s[1] for s in samples[:third]), min(s[1] for s in samples[-third:])
        rss_max = max(s[0] for s in samples)
        print(f"duration: {args.seconds} s; endpoint-set writes: {churned[0]}; route writes: {churned[1]}; "
              f"trust-bundle rotations: {churned[2]} (workload certificate reloads: {rotated})")
        print(f"reloads published: {ok_reloads}; refused: {refused}")
        for path, out in outs.items():
            total, bad, sock = figures.wrk_counts(out)
            print(f"{'meshed' if path == '/mesh' else 'plain'} route: requests: {total}; non-2xx: {bad}; "
                  f"socket errors: {sock}")
            if bad or sock:
                failures.append(f"failed requests on {path}")
        print(f"plaintext connections to meshed workloads: {plaintext}")
        print(f"RSS: {rss0:.1f} -> {rss1:.1f} MiB (max {rss_max:.1f}); "
              f"fds: {fd0} -> {fd1} (most early {fd_early}, fewest late {fd_late}; {len(samples)} samples)")
        if refused:
            failures.append("refused reloads")
        if plaintext:
            failures.append("plaintext to meshed workloads")
        if args.seconds >= args.rotate + args.warmup and not churned[2]:
            failures.append("no trust-bundle rotation completed")
        if rss1 > rss0 * 1.10:
            failures.append("RSS grew more than 10 %")
        if fd_late > fd_early * 1.10 + 4:
            failures.append("file descriptors grew")
    finally:
        stop.set()
        figures.stop(pier, *echoes, *workloads)
        if failures:
            print(f"kept for inspection: {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)
    if failures:
        sys.exit(f"soak failed: {failures}")


if __name__ == "__main__":
    main()

"""Shared by the figure scripts (hostile-clients.py, outlier-figures.py, soak.py): manifests
for one Gateway in front of one Service, and helpers to wait for a port, read a process's
memory and run wrk. Not run on its own."""

import re
import socket
import subprocess
import sys
import time


def gateway(port):
    """The pier GatewayClass and a Gateway `default/gw` with one HTTP listener (more `spec`
    fields may follow, indented by two spaces)."""
    return f"""
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
"""


def route(name, rule):
    """An HTTPRoute `default/NAME` on the Gateway with one rule (YAML lines, indented 4)."""
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - {rule.strip()}
"""


def service(name, target_port, addresses):
    """A Service `default/NAME` (port 80) and one EndpointSlice of `addresses` on
    `target_port`."""
    endpoints = ", ".join(f"{{addresses: [{a}]}}" for a in addresses)
    return f"""
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec: {{ports: [{{name: http, port: 80}}]}}
---
{endpoint_slice(name, target_port, endpoints)}"""


def endpoint_slice(name, target_port, endpoints):
    return f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: default
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: http, port: {target_port}}}]
endpoints: [{endpoints}]
"""


def wait_port(host, port, bound=20):
    end = time.time() + bound
    while time.time() < end:
        try:
            socket.create_connection((host, port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing listens on {host}:{port}")


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def echo(pier, host, port, name):
    """A `pier echo` backend on host:port (the caller terminates it)."""
    return subprocess.Popen(
        [pier, "echo", "--listen", f"{host}:{port}", "--name", name],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wrk_counts(out):
    """(requests, non-2xx/3xx responses, socket errors) from wrk's report."""
    total = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return (
        total,
        int(non2xx.group(1)) if non2xx else 0,
        sum(int(x) for x in errors.groups()) if errors else 0,
    )


def stop(*procs):
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(10)


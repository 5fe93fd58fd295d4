#!/usr/bin/env python3
"""An HTTP/3 client on aioquic (an implementation independent of pier's quinn and h3), for
tests/http3.rs: one QUIC connection to 127.0.0.1:PORT with SNI HOST, the requests given as
`METHOD PATH [BODY_BYTES]` arguments sent concurrently on it, each answer printed as one JSON
line {"path", "status", "headers", "body"}. Exits 1 when the connection or a request fails.

    client.py --port 8443 --host app.example.com --ca ca.pem "GET /" "POST /up 1048576"
"""

import argparse
import asyncio
import json
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.streams = {}

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            for s in self.streams.values():
                if not s["done"].done():
                    s["done"].set_exception(ConnectionError(event.reason_phrase or "closed"))
            return
        for e in self.h3.handle_event(event):
            s = self.streams.get(getattr(e, "stream_id", None))
            if s is None:
                continue
            if isinstance(e, HeadersReceived):
                if s["headers"] is None:
                    s["headers"] = e.headers
                else:
                    s["trailers"] = e.headers
            elif isinstance(e, DataReceived):
                s["body"] += e.data
            if getattr(e, "stream_ended", False) and not s["done"].done():
                s["done"].set_result(None)

    async def request(self, authority, method, path, body):
        sid = self._quic.get_next_available_stream_id()
        done = asyncio.get_running_loop().create_future()
        self.streams[sid] = {"headers": None, "trailers": None, "body": b"", "done": done}
        head = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
            (b"user-agent", b"aioquic"),
        ]
        if body:
            head.append((b"content-length", str(len(body)).encode()))
        self.h3.send_headers(sid, head, end_stream=not body)
        if body:
            self.h3.send_data(sid, body, end_stream=True)
        self.transmit()
        await asyncio.wait_for(done, 30)
        s = self.streams.pop(sid)
        headers = {}
        for k, v in (s["headers"] or []) + (s["trailers"] or []):
            headers.setdefault(k.decode(), v.decode())
        return {
            "path": path,
            "status": int(headers.pop(":status", "0")),
            "headers": headers,
            "body": s["body"].decode("utf-8", "replace"),
        }


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("requests", nargs="+")
    a = p.parse_args()
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=a.host)
    config.load_verify_locations(a.ca)
    async with connect("127.0.0.1", a.port, configuration=config, create_protocol=Client,
                       wait_connected=True) as client:
        calls = []
        for r in a.requests:
            parts = r.split()
            body = b"x" * int(parts[2]) if len(parts) > 2 else b""
            calls.append(client.request(a.host, parts[0], parts[1], body))
        for answer in await asyncio.gather(*calls):
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(), 60))
    except Exception as e:  # a failed connection or request: the test reads stderr
        print(f"client.py: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)

"""The least a Python relay can do: a reference for bench/upstream.py's overhead part.

It forwards each request's body unchanged to the upstream's same path, and relays
the SSE stream back, decoding each event's JSON and encoding it again (what any
relay that reads the stream must at least do). Everything runs in uvloop's
protocol callbacks: no tasks, no ASGI, no validation, no metrics, no errors
handled. No product could ship it; it measures what relaying at all costs on this
machine, so the bench can tell that cost from Parlance's own.

Run: `python bench/bare_relay.py PORT UPSTREAM_PORT` (prints "ready" when listening).
"""

from __future__ import annotations

import asyncio
import json
import sys

import httptools
import uvloop

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


class _Upstream(asyncio.Protocol):
    """One upstream request; its response's events go to the client's transport."""

    def __init__(self, client: asyncio.Transport, request: bytes) -> None:
        self.client = client
        self.request = request
        self.pending = b""
        self.parser = httptools.HttpResponseParser(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        *events, self.pending = (self.pending + body).split(b"\n\n")
        out = []
        for event in events:
            if not event.startswith(b"data: "):
                continue
            data = event[6:]
            if data != b"[DONE]":
                data = _ENCODER.encode(json.loads(data)).encode()
            out.append(b"data: " + data + b"\n\n")
        if out:
            frame = b"".join(out)
            self.client.write(b"%x\r\n%s\r\n" % (len(frame), frame))

    def on_message_complete(self) -> None:
        self.client.write(b"0\r\n\r\n")
        self.client.close()
        self.transport.close()


class _Client(asyncio.Protocol):
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.received = b""
        self.started = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received += data
        head, found, body = self.received.partition(b"\r\n\r\n")
        if not found or self.started:
            return
        lines = head.split(b"\r\n")
        if not lines[0].startswith(b"POST "):  # a readiness probe (GET /health)
            self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")  # type: ignore[attr-defined]
            self.transport.close()
            return
        length = next(int(line.split(b":", 1)[1]) for line in lines
                      if line.lower().startswith(b"content-length:"))
        if len(body) < length:
            return
        self.started = True
        path = lines[0].split(b" ")[1]
        request = (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (path, length, body[:length]))
        self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"  # type: ignore[attr-defined]
                             b"transfer-encoding: chunked\r\n\r\n")
        loop = asyncio.get_running_loop()
        loop.create_task(loop.create_connection(
            lambda: _Upstream(self.transport, request), "127.0.0.1", self.upstream_port))  # type: ignore[arg-type]


async def serve(port: int, upstream_port: int) -> None:
    server = await asyncio.get_running_loop().create_server(
        lambda: _Client(upstream_port), "127.0.0.1", port)
    print("ready", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1]), int(sys.argv[2])))

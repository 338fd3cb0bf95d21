"""A featherweight client for streaming benchmarks: plain sockets, one thread.

On a 2-core machine the load generator competes with the server for the cores
that decode. httpx spends ~0.1 ms of Python per streamed chunk; this client
only `recv`s and timestamps while the streams run, and de-chunks and parses the
SSE frames afterwards. Every server under test gets the same client.
"""

from __future__ import annotations

import json
import selectors
import socket
import time
from dataclasses import dataclass, field


@dataclass
class Capture:
    sent: float = 0.0
    reads: list[tuple[float, bytes]] = field(default_factory=list)


def _send_post(host: str, port: int, path: str, body: dict, capture: Capture) -> socket.socket:
    payload = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode()
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    capture.sent = time.perf_counter()
    sock.sendall(head + payload)
    return sock


def post_stream(host: str, port: int, path: str, body: dict,
                timeout: float = 600.0) -> Capture:
    """One request, read with blocking `recv`s: a single syscall per arriving chunk,
    the least CPU a reader can take from the server it measures."""
    capture = Capture()
    with _send_post(host, port, path, body, capture) as sock:
        sock.settimeout(timeout)
        recv, now, keep = sock.recv, time.perf_counter, capture.reads.append
        while data := recv(65536):
            keep((now(), data))
    return capture


def post_streams(host: str, port: int, path: str, bodies: list[dict],
                 timeout: float = 600.0) -> list[Capture]:
    """Send every request at once (HTTP/1.1, Connection: close); read until each closes."""
    if len(bodies) == 1:
        return [post_stream(host, port, path, bodies[0], timeout)]
    selector = selectors.DefaultSelector()
    captures = [Capture() for _ in bodies]
    for capture, body in zip(captures, bodies, strict=True):
        sock = _send_post(host, port, path, body, capture)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, capture)
    deadline = time.monotonic() + timeout
    open_ = len(bodies)
    while open_ and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=1.0):
            data = key.fileobj.recv(65536)
            if data:
                key.data.reads.append((time.perf_counter(), data))
            else:
                selector.unregister(key.fileobj)
                key.fileobj.close()
                open_ -= 1
    for key in list(selector.get_map().values()):
        key.fileobj.close()
    return captures


def sse_events(capture: Capture) -> tuple[int, list[tuple[float, dict]]]:
    """(HTTP status, [(arrival time, JSON of each `data:` frame)]) of one capture."""
    raw = b"".join(data for _, data in capture.reads)
    head_end = raw.find(b"\r\n\r\n")
    head = raw[:head_end].decode("latin-1").lower()
    status = int(head.split(" ", 2)[1]) if head.startswith("http/") else 0
    chunked = "transfer-encoding: chunked" in head
    events: list[tuple[float, dict]] = []
    dechunk = Dechunker() if chunked else None
    offset, line_buffer = 0, b""
    for arrived, data in capture.reads:
        start = max(0, head_end + 4 - offset)
        offset += len(data)
        if start >= len(data):
            continue
        body = data[start:]
        line_buffer += dechunk.feed(body) if dechunk else body
        *lines, line_buffer = line_buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"data: {"):
                events.append((arrived, json.loads(line[6:])))
    return status, events


class Dechunker:
    """Incremental `Transfer-Encoding: chunked` decoder (trailers ignored)."""

    def __init__(self) -> None:
        self._pending = b""  # an incomplete size line
        self._left = 0  # payload bytes left in the current chunk
        self._skip = 0  # CRLF bytes after the payload still to drop

    def feed(self, data: bytes) -> bytes:
        out, buf, self._pending = [], self._pending + data, b""
        while buf:
            if self._left:
                take = buf[:self._left]
                out.append(take)
                buf, self._left = buf[len(take):], self._left - len(take)
            elif self._skip:
                n = min(self._skip, len(buf))
                buf, self._skip = buf[n:], self._skip - n
            else:
                end = buf.find(b"\r\n")
                if end < 0:
                    self._pending = buf
                    break
                size = int(buf[:end].split(b";")[0].strip() or b"0", 16)
                buf = buf[end + 2:]
                self._left, self._skip = size, 2 if size else 0
        return b"".join(out)

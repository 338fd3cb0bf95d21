"""Connection guards over real sockets (the server in a thread, the fake engine): a
connection that does not send its headers in time is closed, an idle kept-alive one
too, and past the connection limit a request gets a clear 503; once the silent
connections are gone, requests are served again. Long responses are not timed."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine
from parlance.server.http.connections import ConnectionLimits
from parlance.server.runner import DrainingServer, Listen, server
from tests.support.fake_app import make_app

PATIENCE = 30.0  # generous bound for every wait; nothing is timed against it


@contextlib.contextmanager
def serving(engine: FakeEngine, limits: ConnectionLimits) -> Iterator[DrainingServer]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    running = server(make_app(engine), Listen("127.0.0.1", port, limits),
                     lifespan="off", loop="asyncio")
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    wait_for(lambda: running.started, "the server started")
    try:
        yield running
    finally:
        running.should_exit = True
        thread.join(PATIENCE)


def wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {PATIENCE}s: {what}")
        time.sleep(0.005)


def port_of(running: DrainingServer) -> int:
    return running.config.port


def connect(running: DrainingServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port_of(running)), timeout=PATIENCE)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Block until the server closes the connection (EOF); False if it sent data."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def request(sock: socket.socket, method: str, path: str, body: dict | None = None,
            *, close: bool = True) -> tuple[int, dict[str, str], bytes]:
    data = json.dumps(body).encode() if body is not None else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            + ("Connection: close\r\n" if close else "") + "\r\n")
    sock.sendall(head.encode() + data)
    return read_response(sock)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers, and the body (by Content-Length or chunked)."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before the response headers: {buffer!r}"
        buffer += chunk
    head, rest = buffer.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    if "content-length" in headers:
        while len(rest) < int(headers["content-length"]):
            rest += sock.recv(65536)
        return status, headers, rest
    body = b""
    while True:  # chunked
        while b"\r\n" not in rest:
            rest += sock.recv(65536)
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        while len(rest) < size + 2:
            more = sock.recv(65536)
            assert more, "the chunked body was cut"
            rest += more
        if size == 0:
            return status, headers, body
        body, rest = body + rest[:size], rest[size + 2:]


def test_silent_and_slow_header_connections_are_closed_then_requests_work():
    limits = ConnectionLimits(max_connections=3, header_timeout=0.3, keepalive_timeout=0.3)
    with serving(FakeEngine(), limits) as running:
        silent = [connect(running) for _ in range(2)]
        slow = connect(running)
        slow.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
        assert all(closed_by_server(sock) for sock in [*silent, slow])
        wait_for(lambda: not running.server_state.connections, "every connection closed")
        with connect(running) as sock:
            status, _, body = request(sock, "GET", "/health")
        assert status == 200 and json.loads(body)["status"] == "ok"
        for sock in [*silent, slow]:
            sock.close()


def test_idle_kept_alive_connection_is_closed():
    limits = ConnectionLimits(header_timeout=30.0, keepalive_timeout=0.2)
    with serving(FakeEngine(), limits) as running, connect(running) as sock:
        status, headers, _ = request(sock, "GET", "/health", close=False)
        assert status == 200 and headers.get("connection") != "close"
        assert closed_by_server(sock)


def test_a_stream_longer_than_the_header_timeout_is_not_cut():
    engine = FakeEngine()
    engine.enqueue(TextDelta("a"), 1.0, TextDelta("b"), Finish(FinishReason.STOP), Usage(1, 2))
    limits = ConnectionLimits(header_timeout=0.2, keepalive_timeout=0.2)
    with serving(engine, limits) as running, connect(running) as sock:
        status, _, body = request(sock, "POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Hi"}], "stream": True})
    assert status == 200
    assert body.decode().rstrip().endswith("data: [DONE]")
    assert engine.generations[0].finished


def test_past_the_connection_limit_requests_get_503_until_connections_are_gone():
    limits = ConnectionLimits(max_connections=2, header_timeout=PATIENCE * 4)
    with serving(FakeEngine(), limits) as running:
        silent = [connect(running) for _ in range(2)]
        wait_for(lambda: len(running.server_state.connections) == 2, "two connections open")
        with connect(running) as sock:
            status, headers, body = request(sock, "POST", "/v1/chat/completions",
                                            {"messages": [{"role": "user", "content": "Hi"}]})
            assert closed_by_server(sock)
        assert status == 503 and headers["connection"] == "close"
        error = json.loads(body)["error"]
        assert error["code"] == "too_many_connections" and error["type"] == "server_error"
        assert "2 open connections" in error["message"]
        with connect(running) as sock:  # LM Studio's envelope on its own paths
            status, _, body = request(sock, "GET", "/api/v1/models")
        assert status == 503 and json.loads(body)["error"]["type"] == "unknown"

        for sock in silent:
            sock.close()
        wait_for(lambda: not running.server_state.connections, "the silent ones gone")
        with connect(running) as sock:
            status, _, body = request(sock, "POST", "/v1/chat/completions",
                                      {"messages": [{"role": "user", "content": "Hi"}]})
        assert status == 200 and json.loads(body)["choices"][0]["message"]["content"]

"""The app's own error handlers (`server/app.py`): an unexpected exception is a 500 in
the envelope of its path's API, with `connection: close` (the server closes the
connection after an exception, so a client must not send its next request on it);
a kept-alive connection is otherwise reused."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from parlance.engines.fake import FakeEngine
from parlance.server.runner import DrainingServer, Listen, server
from tests.support.asgi_exchange import exchange
from tests.support.fake_app import make_app

PATIENCE = 30.0  # generous bound for every wait; nothing is timed against it
HELLO = [{"role": "user", "content": "Hi"}]


def broken_engine() -> FakeEngine:
    engine = FakeEngine()

    async def broken(request):
        raise RuntimeError("a bug")

    engine.start = broken  # type: ignore[method-assign]
    return engine


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"messages": HELLO}),
    ("/v1/messages", {"model": "fake-model", "max_tokens": 5, "messages": HELLO}),
    ("/api/chat", {"model": "fake-model", "messages": HELLO, "stream": False}),
    ("/api/v1/chat", {"model": "fake-model", "input": "Hi"}),
])
async def test_a_500_tells_the_client_to_close_the_connection(path, body, caplog):
    answer = await exchange(make_app(broken_engine()), path, body)  # (raised no further)
    assert answer.status == 500 and answer.ended
    assert answer.headers["connection"] == "close"
    assert answer.headers["x-request-id"].startswith("req_")
    assert "error" in answer.json()
    logged = tracebacks(caplog)
    assert len(logged) == 1 and answer.headers["x-request-id"] in logged[0].getMessage()


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records that carry an exception's traceback, from every logger."""
    return [r for r in caplog.records if r.exc_info is not None]


async def test_an_error_the_client_caused_keeps_the_connection():
    answer = await exchange(make_app(FakeEngine()), "/v1/chat/completions", {"messages": []})
    assert answer.status == 400 and "connection" not in answer.headers


@contextlib.contextmanager
def serving(engine: FakeEngine) -> Iterator[DrainingServer]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    running = server(make_app(engine), Listen("127.0.0.1", port), lifespan="off",
                     loop="asyncio")
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + PATIENCE
    while not running.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.005)
    try:
        yield running
    finally:
        running.should_exit = True
        thread.join(PATIENCE)


def ask(sock: socket.socket, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    """One kept-alive request; its status and head (the body is read and dropped)."""
    sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                 f"application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed before the response"
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    length = next(int(line.split(b":", 1)[1]) for line in head.lower().split(b"\r\n")
                  if line.startswith(b"content-length:"))
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(head.split(b" ", 2)[1]), head.lower()


def test_after_a_500_the_server_closes_the_connection_it_said_it_would(caplog):
    with serving(broken_engine()) as running, socket.create_connection(
            ("127.0.0.1", running.config.port), timeout=PATIENCE) as sock:
        status, head = ask(sock, "GET", "/health")
        assert status == 200 and b"connection: close" not in head  # kept alive
        status, head = ask(sock, "POST", "/v1/chat/completions",
                           b'{"messages": [{"role": "user", "content": "Hi"}]}')
        assert status == 500 and b"connection: close" in head
        assert sock.recv(1) == b""  # closed by the server
    logged = tracebacks(caplog)  # by Parlance, not again by uvicorn
    assert [r.name for r in logged] == ["parlance.server"], [r.getMessage() for r in logged]

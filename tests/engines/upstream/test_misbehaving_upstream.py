"""The gateway in front of upstreams that misbehave on purpose: one that accepts and
never answers, one that sends its headers and then nothing, one whose event never
ends, one whose embeddings answer never ends, one that answers 500 with secrets in its
body, one whose tool call's arguments (or calls) never end. Every wait is bounded by
the request deadline, a client that leaves closes the upstream connection, an event,
an answer or arguments past the bound fail it, and what an upstream said in an error
never reaches the client, in every dialect."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
from collections.abc import AsyncIterator

import httpx
import pytest

from parlance.engines.upstream import ClientSettings, Fleet, FleetSettings, ReplicaConfig
from tests.support.upstream_replicas import AppServer, gateway

MODEL = "misbehaving"
PATIENCE = 60.0
SECRET = "sk-live-do-not-echo /srv/internal/trace.py line 42"
ASK = [{"role": "user", "content": "Hi"}]
DIALECTS = {  # path, body, the status a deadline is answered with
    "chat": ("/v1/chat/completions", {"model": MODEL, "messages": ASK}, 408),
    "completions": ("/v1/completions", {"model": MODEL, "prompt": "Hi"}, 408),
    "responses": ("/v1/responses", {"model": MODEL, "input": "Hi"}, 408),
    "messages": ("/v1/messages", {"model": MODEL, "max_tokens": 8, "messages": ASK}, 504),
    "lmstudio": ("/api/v1/chat", {"model": MODEL, "input": "Hi"}, 408),
    "ollama": ("/api/chat", {"model": MODEL, "messages": ASK, "stream": False}, 504),
}


class Misbehaving:
    """A loopback HTTP server, on a thread and event loop of its own, answering
    `GET /v1/models` properly and every other request as `mode` says; it counts the
    requests it got and the connections the gateway closed on it."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests = 0
        self.closed = 0
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> Misbehaving:
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop).result(PATIENCE)
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        self._server = server
        return self

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # their writers close
            await asyncio.sleep(0)  # the transports' close callbacks run

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(PATIENCE)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(PATIENCE)
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                if head.startswith(b"GET /v1/models"):
                    self._json(writer, 200, {"object": "list", "data": [
                        {"id": MODEL, "object": "model", "owned_by": "test"}]})
                    continue
                self.requests += 1
                await self._misbehave(reader, writer)
                return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _misbehave(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        if self.mode == "error":
            self._json(writer, 500, {"error": {"message": SECRET, "type": "server_error"}})
            await writer.drain()
            return
        if self.mode in ("headers_only", "endless"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")
        if self.mode == "malformed":  # an answer, whole, that is no stream of chunks
            body = b"data: {not json\n\n"
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            return
        if self.mode in ("endless_arguments", "endless_calls"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")
        if self.mode == "oversized":  # a JSON answer of 1 GiB
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b'content-length: %d\r\n\r\n{"data": [' % 2**30)
        with contextlib.suppress(ConnectionError):  # until the gateway leaves
            if self.mode == "endless":  # one event that never ends, as fast as it is read
                writer.write(b"6\r\ndata: \r\n")
                piece = b"%x\r\n%s\r\n" % (65536, b"x" * 65536)
                while not writer.transport.is_closing():
                    writer.write(piece)
                    await writer.drain()
            if self.mode in ("endless_arguments", "endless_calls"):
                await self._endless_calls(writer, self.mode == "endless_calls")
            if self.mode == "oversized":  # as fast as it is read
                while not writer.transport.is_closing():
                    writer.write(b" " * 65536)
                    await writer.drain()
            while await reader.read(4096):  # silent
                pass
        self.closed += 1

    @staticmethod
    async def _endless_calls(writer: asyncio.StreamWriter, new_calls: bool) -> None:
        """Argument deltas of 64 KiB, each its own event, as fast as they are read: of
        one call, or (`new_calls`) each of a new call of 256 KiB."""
        def event(delta: dict) -> bytes:
            data = b"data: %s\n\n" % json.dumps({"choices": [
                {"index": 0, "delta": {"tool_calls": [delta]}}]}).encode()
            return b"%x\r\n%s\r\n" % (len(data), data)

        fragment = "a" * 65536
        for index in itertools.count():
            if index == 0 or (new_calls and index % 4 == 0):
                writer.write(event({"index": index // 4 if new_calls else 0,
                                    "id": f"call_{index}", "type": "function",
                                    "function": {"name": "f", "arguments": ""}}))
            writer.write(event({"index": index // 4 if new_calls else 0,
                                "function": {"arguments": fragment}}))
            await writer.drain()
            if writer.transport.is_closing():
                return

    @staticmethod
    def _json(writer: asyncio.StreamWriter, status: int, payload: object) -> None:
        data = json.dumps(payload).encode()
        writer.write(b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (status, len(data), data))


def upstream_fleet(url: str, **client: object) -> Fleet:
    settings = ClientSettings(connect_timeout=5.0, **client)  # type: ignore[arg-type]
    return Fleet([ReplicaConfig(url, models=(MODEL,))],
                 FleetSettings(health_interval=3600.0, startup_wait=30.0, client=settings))


@contextlib.asynccontextmanager
async def front(url: str, *, request_timeout: float = 3600.0,
                **client: object) -> AsyncIterator[httpx.AsyncClient]:
    app, served = gateway(upstream_fleet(url, **client), request_timeout=request_timeout)
    await served.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://gateway", timeout=PATIENCE) as http:
            yield http
    finally:
        await served.aclose()


async def until(predicate, what: str) -> None:
    for _ in range(int(PATIENCE / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dialect", list(DIALECTS))
async def test_a_silent_upstream_holds_nobody_past_the_request_deadline(dialect, stream):
    """It accepts and never answers: the client gets its dialect's timeout before any
    byte, at the deadline (not the replica's much longer answer timeout), and the
    upstream connection is closed."""
    path, body, status = DIALECTS[dialect]
    with Misbehaving("silent") as upstream:
        async with front(upstream.url, request_timeout=1.0, answer_timeout=PATIENCE) as http:
            response = await http.post(path, json={**body, "stream": stream})
        assert response.status_code == status, response.text
        assert "timeout" in response.text.lower()
        await until(lambda: upstream.closed == 1, "the gateway closed the upstream connection")


@pytest.mark.parametrize("dialect", ["chat", "messages", "ollama"])
async def test_headers_then_silence_end_the_stream_at_the_deadline(dialect):
    path, body, _ = DIALECTS[dialect]
    with Misbehaving("headers_only") as upstream:
        async with front(upstream.url, request_timeout=1.0) as http:
            response = await http.post(path, json={**body, "stream": True})
        assert response.status_code == 200  # the stream began: it ends by its contract
        assert "timeout" in response.text.lower()
        await until(lambda: upstream.closed == 1, "the gateway closed the upstream connection")


async def test_a_client_that_leaves_during_the_wait_for_headers_closes_the_upstream():
    with Misbehaving("silent") as upstream:
        app, _ = gateway(upstream_fleet(upstream.url))
        with AppServer(app, lifespan="on") as server:
            async with httpx.AsyncClient(base_url=server.base_url, timeout=PATIENCE) as http:
                request = asyncio.ensure_future(http.post(
                    "/v1/chat/completions", json={"model": MODEL, "messages": ASK,
                                                  "stream": True}))
                await until(lambda: upstream.requests == 1, "the upstream got the request")
                request.cancel()  # the client leaves: its connection closes
                with contextlib.suppress(asyncio.CancelledError):
                    await request
            await until(lambda: upstream.closed == 1, "the gateway closed the upstream "
                        "connection when its client left")


@pytest.mark.parametrize("dialect", list(DIALECTS))
async def test_an_event_past_the_bound_fails_its_stream_and_its_connection(dialect):
    path, body, _ = DIALECTS[dialect]
    with Misbehaving("endless") as upstream:
        async with front(upstream.url, max_event_bytes=2**20) as http:
            response = await http.post(path, json={**body, "stream": True})
        assert response.status_code == 200
        assert "--upstream-max-event-mb" in response.text
        await until(lambda: upstream.closed == 1, "the gateway closed the upstream connection")


@pytest.mark.parametrize("path", ["/v1/embeddings", "/api/embed"])
async def test_an_embeddings_answer_past_the_bound_is_a_502_and_its_connection_closed(path):
    """Read no further than a stream's event: the answer is not taken into memory whole."""
    with Misbehaving("oversized") as upstream:
        async with front(upstream.url, max_event_bytes=2**20) as http:
            response = await http.post(path, json={"model": MODEL, "input": "Hi"})
        assert response.status_code == 502, response.text
        assert "--upstream-max-event-mb" in response.text
        error = response.json()["error"]  # the route's own envelope
        if path == "/v1/embeddings":
            assert error["code"] == "upstream_event_too_large"
        else:
            assert isinstance(error, str)  # Ollama's: the message
        await until(lambda: upstream.closed == 1, "the gateway closed the upstream connection")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dialect", list(DIALECTS))
async def test_an_upstream_500_is_a_502_that_names_the_replica_not_what_it_said(dialect,
                                                                                stream):
    path, body, _ = DIALECTS[dialect]
    with Misbehaving("error") as upstream:
        async with front(upstream.url) as http:
            response = await http.post(path, json={**body, "stream": stream})
    assert response.status_code == 502, response.text
    assert "HTTP 500" in response.text and upstream.url in response.text
    assert "sk-live" not in response.text and "trace.py" not in response.text


@pytest.mark.parametrize("mode", ["endless_arguments", "endless_calls"])
@pytest.mark.parametrize("dialect", ["chat", "responses", "messages"])
async def test_arguments_past_the_bound_fail_their_stream_and_its_connection(dialect, mode):
    """Issue 39: arguments held whole downstream are bounded, a call's by the bound of one
    event, an answer's calls together by four of those; past either the stream ends by
    its contract and the upstream connection is closed."""
    path, body, _ = DIALECTS[dialect]
    with Misbehaving(mode) as upstream:
        async with front(upstream.url, request_timeout=PATIENCE,
                         max_event_bytes=2**20) as http:
            streamed = await http.post(path, json={**body, "stream": True})
            whole = await http.post(path, json={**body, "stream": False})
        assert streamed.status_code == 200
        assert "upstream_arguments_too_large" in streamed.text or (
            dialect == "messages" and "--upstream-max-event-mb" in streamed.text)
        assert whole.status_code == 502, whole.text[:300]
        assert "--upstream-max-event-mb" in whole.text
        await until(lambda: upstream.closed == 2, "the gateway closed the upstream connections")


async def test_one_malformed_answer_fails_its_request_not_the_replica():
    """Issue 39: one bad reply ejected the only replica; every request after it was
    refused without reaching the upstream."""
    with Misbehaving("malformed") as upstream:
        fleet = upstream_fleet(upstream.url)
        app, served = gateway(fleet)
        await served.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://gateway", timeout=PATIENCE) as http:
                path, body, _ = DIALECTS["chat"]
                first = await http.post(path, json={**body, "stream": True})
                assert "upstream_disconnected" in first.text, first.text
                assert fleet.replicas[0].healthy
                second = await http.post(path, json={**body, "stream": True})
                assert "upstream_disconnected" in second.text, second.text
        finally:
            await served.aclose()
    assert upstream.requests == 2  # the second reached the replica too

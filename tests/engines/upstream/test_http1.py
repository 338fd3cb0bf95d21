"""The upstream streams' HTTP/1.1 client against a scripted server on loopback: what it
sends, chunked and sized and close-delimited bodies, keep-alive reuse, a pooled
connection the server had closed, a connection broken mid-body, and a consumer that
gives up."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from parlance.engines.upstream.http1 import (
    ConnectFailed,
    ConnectionBroken,
    StreamPool,
)

Handler = Callable[[bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


class ScriptedServer:
    """Reads one request at a time; `handler(request, reader, writer)` answers it and
    returns whether to keep the connection for another."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[bytes] = []
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> ScriptedServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                if not await self.handler(request, reader, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n")


def pool_for(server: ScriptedServer, path: str = "", *, headers: dict[str, str] | None = None,
             max_connections: int = 4) -> StreamPool:
    return StreamPool(f"http://127.0.0.1:{server.port}{path}", headers or {},
                      connect_timeout=5, max_connections=max_connections)


def answer_and_hold(response: bytes) -> Handler:
    """Writes `response` (a head and the start of a body), then holds the connection open
    until the client drops it."""

    async def answer(request, reader, writer):
        writer.write(response)
        await writer.drain()
        with contextlib.suppress(Exception):
            await reader.read()
        return False

    return answer


@contextlib.asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer(handler) as server:
        yield server


async def test_request_line_headers_and_body():
    async def answer(request, reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        return True

    async with serving(answer) as server:
        pool = pool_for(server, "/prefix", headers={"authorization": "Bearer k"})
        response = await pool.post("/v1/chat/completions", b'{"a":1}')
        assert (response.status_code, await response.aread()) == (200, b"ok")
        await response.aclose()
        pool.close()
    head, body = server.requests[0].split(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /prefix/v1/chat/completions HTTP/1.1"
    assert set(lines[1:]) == {f"Host: 127.0.0.1:{server.port}".encode(),
                              b"Content-Type: application/json",
                              b"Accept: text/event-stream", b"authorization: Bearer k",
                              b"Content-Length: 7"}
    assert body == b'{"a":1}'


async def test_chunked_body_reaches_the_consumer_piece_by_piece_and_the_connection_is_reused():
    step = asyncio.Event()

    async def answer(request, reader, writer):
        writer.write(SSE_HEAD + b"6\r\ndata: \r\n")
        await writer.drain()
        await step.wait()
        writer.write(b"3\r\none\r\n" + chunked(b"\n\n"))
        return True

    async with serving(answer) as server:
        pool = pool_for(server)
        pieces: list[bytes] = []
        for _ in range(2):
            step.clear()
            response = await pool.post("/v1/chat/completions", b"{}")
            assert response.headers["transfer-encoding"] == "chunked"
            reading = asyncio.ensure_future(response.stream(pieces.append))
            while not pieces:
                await asyncio.sleep(0.01)
            assert not reading.done()  # the first piece came before the body ended
            step.set()
            await asyncio.wait_for(reading, 10)
            assert response.complete
            await response.aclose()
        pool.close()
    assert b"".join(pieces) == b"data: one\n\n" * 2
    assert server.connections == 1


async def test_a_pooled_connection_the_server_closed_is_replaced_silently():
    async def answer_once(request, reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nx")
        await writer.drain()
        return False  # closes the connection the client keeps

    async with serving(answer_once) as server:
        pool = pool_for(server)
        for _ in range(3):
            response = await pool.post("/x", b"")
            assert await response.aread() == b"x"
            await response.aclose()  # (the server's close may not be seen yet)
        pool.close()
    assert server.connections == 3


async def test_a_body_that_ends_with_the_connection():
    async def answer(request, reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: 1\n\n")
        return False

    async with serving(answer) as server:
        pool = pool_for(server)
        response = await pool.post("/x", b"")
        assert await response.aread() == b"data: 1\n\n"
        assert response.complete
        await response.aclose()
        pool.close()


async def test_a_connection_broken_mid_body_raises_connection_broken():
    async def answer(request, reader, writer):
        writer.write(SSE_HEAD + b"9\r\ndata: 1\n\n\r\n")
        await writer.drain()
        return False  # closes before the last chunk

    async with serving(answer) as server:
        pool = pool_for(server)
        response = await pool.post("/x", b"")
        pieces: list[bytes] = []
        with pytest.raises(ConnectionBroken):
            await response.stream(pieces.append)
        assert pieces == [b"data: 1\n\n"]
        await response.aclose()
        pool.close()


async def test_what_the_consumer_raises_ends_the_response_and_drops_the_connection():
    answer = answer_and_hold(SSE_HEAD + b"1\r\na\r\n")

    class Refused(Exception):
        pass

    def consumer(piece: bytes) -> None:
        raise Refused()

    async with serving(answer) as server:
        pool = pool_for(server)
        response = await pool.post("/x", b"")
        with pytest.raises(Refused):
            await asyncio.wait_for(response.stream(consumer), 10)
        await response.aclose()
        pool.close()


async def test_aread_stops_at_its_limit():
    answer = answer_and_hold(
        b"HTTP/1.1 400 Bad Request\r\ntransfer-encoding: chunked\r\n\r\n"
        + b"".join(b"400\r\n" + b"x" * 1024 + b"\r\n" for _ in range(8)))

    async with serving(answer) as server:
        pool = pool_for(server)
        response = await pool.post("/x", b"")
        assert response.status_code == 400
        body = await asyncio.wait_for(response.aread(2048), 10)
        assert 2048 <= len(body) < 8192
        await response.aclose()
        pool.close()


async def test_an_unreachable_server_is_connect_failed():
    async with serving(lambda *a: asyncio.sleep(0, False)) as server:
        port = server.port
    pool = StreamPool(f"http://127.0.0.1:{port}", {}, connect_timeout=5, max_connections=4)
    with pytest.raises(ConnectFailed):
        await pool.post("/x", b"")


async def test_a_response_closed_before_its_end_frees_its_connection_slot():
    async with serving(answer_and_hold(SSE_HEAD + b"1\r\na\r\n")) as server:
        pool = pool_for(server, max_connections=1)
        for _ in range(3):  # one connection allowed: each close must give it back
            response = await asyncio.wait_for(pool.post("/x", b""), 10)
            await response.aclose()
        pool.close()
    assert server.connections == 3


async def test_headers_past_their_bound_break_the_response_instead_of_growing():
    async def answer(request, reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\n")
        with contextlib.suppress(ConnectionError):
            for i in range(100_000):  # 10 MB of headers, were nobody to stop them
                writer.write(b"x-filler-%d: %s\r\n" % (i, b"v" * 90))
                await writer.drain()
        return False

    async with serving(answer) as server:
        pool = pool_for(server)
        with pytest.raises(ConnectionBroken, match="unreadable HTTP response"):
            await pool.post("/x", b"")
        pool.close()

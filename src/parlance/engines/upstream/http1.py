"""Streamed POSTs to one upstream over pooled keep-alive HTTP/1.1 connections.

The relay's hot path: every upstream token arrives as its own read, and a general
HTTP client spends a lot per read (a task switch per layer, a pure-Python parser),
CPU that an upstream sharing the machine loses (bench/upstream.py: 770 µs of gateway
CPU per relayed token with httpx2, 446 with this). Here the response is parsed by
httptools (llhttp, C, which uvicorn already uses) inside the connection's read
callback, and the body is handed to the consumer's callback there and then: one
callback per read, no task in between.

Errors: `ConnectFailed` (nothing reached the server) and `ConnectionBroken` (the
connection ended before the response did). A pooled connection the server had
already closed is retried once on a fresh one, so an idle timeout on the server
is never taken for a failing replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit

import httptools

MAX_HEADER_BYTES = 64 * 1024  # of one response's headers (a server may send them forever)


class UpstreamHTTPError(Exception):
    """The upstream could not be reached, or broke the connection."""


class ConnectFailed(UpstreamHTTPError):
    pass


class ConnectionBroken(UpstreamHTTPError):
    pass


class StreamPool:
    """Keep-alive connections to one server; `post` sends one request on one of them."""

    def __init__(self, url: str, headers: dict[str, str], *, connect_timeout: float,
                 max_connections: int) -> None:
        parts = urlsplit(url)
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self._prefix = parts.path.rstrip("/")
        default_port = self._port == (443 if self._ssl else 80)
        host = f"[{self._host}]" if ":" in self._host else self._host
        head = [f"Host: {host if default_port else f'{host}:{self._port}'}",
                "Content-Type: application/json", "Accept: text/event-stream",
                *(f"{name}: {value}" for name, value in headers.items())]
        self._head = "\r\n".join(head)
        self._connect_timeout = connect_timeout
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[_Connection] = []
        self._closed = False

    async def post(self, path: str, body: bytes) -> StreamResponse:
        """Send the request; return once the status line and headers have arrived."""
        request = (f"POST {self._prefix}{path} HTTP/1.1\r\n{self._head}\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body
        await self._slots.acquire()
        try:
            while True:
                connection = self._take_idle()
                reused = connection is not None
                if connection is None:
                    connection = await self._connect()
                response = StreamResponse(self, connection)
                try:
                    connection.send(request, response)
                    await response.headers_received
                except ConnectionBroken:
                    connection.abort()
                    if reused and not response.bytes_received:
                        continue  # the server had closed it while it sat idle
                    raise
                except BaseException:
                    connection.abort()
                    raise
                return response
        except BaseException:
            self._slots.release()
            raise

    def close(self) -> None:
        self._closed = True
        for connection in self._idle:
            connection.abort()
        self._idle.clear()

    # -- connections -------------------------------------------------------------

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable:
                return connection
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(loop.create_connection(
                _Connection, self._host, self._port, ssl=self._ssl,
                server_hostname=self._host if self._ssl else None), self._connect_timeout)
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}") from None
        return connection

    def _finished(self, connection: _Connection, reusable: bool) -> None:
        """A response is done with its connection."""
        self._slots.release()
        if reusable and connection.usable and not self._closed:
            self._idle.append(connection)
        else:
            connection.abort()


class StreamResponse:
    """One response: its status and headers once `headers_received` is done; the body
    through `aread` or `stream`. `aclose` (always called) gives the connection back."""

    def __init__(self, pool: StreamPool, connection: _Connection) -> None:
        self._pool = pool
        self._connection: _Connection | None = connection
        loop = asyncio.get_running_loop()
        self.headers_received: asyncio.Future[None] = loop.create_future()
        self.status_code = 0
        self.headers: dict[str, str] = {}
        self.bytes_received = False
        self.complete = False
        self._keep_alive = False
        self._pending: list[bytes] = []
        self._consumer: Callable[[bytes], None] | None = None
        self._ended: asyncio.Future[None] | None = None

    async def stream(self, consumer: Callable[[bytes], None]) -> None:
        """Hand each piece of the body to `consumer` as it arrives (inside the read
        callback); return at the end of the body. What `consumer` raises ends the
        response and is raised here; so is `ConnectionBroken`."""
        pending, self._pending = self._pending, []
        for piece in pending:
            consumer(piece)
        if self.complete:
            return
        if self._ended is None:
            self._ended = asyncio.get_running_loop().create_future()
        self._consumer = consumer
        await self._ended

    async def aread(self, limit: int | None = None) -> bytes:
        """The body (its first `limit` bytes or a little more: the rest is dropped)."""
        out = bytearray()

        def keep(piece: bytes) -> None:
            out.extend(piece)
            if limit is not None and len(out) >= limit:
                raise _Enough()

        with contextlib.suppress(_Enough):
            await self.stream(keep)
        return bytes(out)

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        connection.response = None
        self._pool._finished(connection, self.complete and self._keep_alive)
        if not self.complete:
            self._end(ConnectionBroken("the response was closed before its end"))

    # -- from the connection -------------------------------------------------------

    def _on_headers(self, status: int, headers: dict[str, str], keep_alive: bool) -> None:
        self.status_code, self.headers, self._keep_alive = status, headers, keep_alive
        if not self.headers_received.done():
            self.headers_received.set_result(None)

    def _on_body(self, piece: bytes) -> None:
        consumer = self._consumer
        if consumer is None:
            self._pending.append(piece)
            return
        try:
            consumer(piece)
        except BaseException as exc:  # the consumer's own error ends the response
            self._consumer = None
            self._end(exc)
            if self._connection is not None:
                self._connection.abort()

    def _on_complete(self) -> None:
        self.complete = True
        self._end(None)

    def _on_lost(self, error: Exception) -> None:
        if not self.headers_received.done():
            self.headers_received.set_exception(error)
            self.headers_received.exception()  # retrieved: post() may have gone
        self._end(error)

    def _end(self, error: BaseException | None) -> None:
        self._consumer = None
        ended = self._ended
        if ended is None:
            ended = self._ended = asyncio.get_running_loop().create_future()
        if ended.done():
            return
        if error is None:
            ended.set_result(None)
        else:
            ended.set_exception(error)
            ended.exception()  # retrieved: nobody may wait for a response closed early


class _Enough(Exception):
    """`aread` has its `limit`."""


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; serves one response at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.response: StreamResponse | None = None
        self.usable = False
        self._parser: httptools.HttpResponseParser | None = None
        self._headers: dict[str, str] = {}
        self._header_bytes = 0
        self._header_name = b""
        self._eof_body = False  # neither length nor chunked: the body ends at close

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)
        self.usable = True

    def send(self, request: bytes, response: StreamResponse) -> None:
        if self.transport is None or not self.usable:
            raise ConnectionBroken("the connection is closed")
        self.usable = False
        self.response = response
        self._parser = httptools.HttpResponseParser(self)
        self._headers = {}
        self._header_bytes = 0
        self._eof_body = False
        self.transport.write(request)

    def abort(self) -> None:
        self.usable = False
        if self.transport is not None:
            self.transport.abort()

    # -- asyncio.Protocol ---------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        response, parser = self.response, self._parser
        if response is None or parser is None:
            self.abort()  # bytes nobody asked for: the connection is not reusable
            return
        response.bytes_received = True
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.abort()
            response._on_lost(ConnectionBroken(f"unreadable HTTP response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        response = self.response
        if response is None:
            return
        if exc is None and self._eof_body and response.headers_received.done():
            response._on_complete()
        else:
            response._on_lost(ConnectionBroken(
                f"the connection ended: {exc}" if exc else "the server closed the connection"))

    # -- httptools callbacks ----------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > MAX_HEADER_BYTES:  # the parser's error: the response is lost
            raise ValueError(f"response headers over {MAX_HEADER_BYTES} bytes")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self._headers[key] = f"{self._headers[key]}, {text}" if key in self._headers else text

    def on_headers_complete(self) -> None:
        parser, response = self._parser, self.response
        assert parser is not None and response is not None
        headers, self._headers = self._headers, {}
        if parser.get_status_code() < 200:
            return  # 1xx: the real response follows
        self._eof_body = ("content-length" not in headers
                          and "chunked" not in headers.get("transfer-encoding", ""))
        response._on_headers(parser.get_status_code(), headers,
                             parser.should_keep_alive() and not self._eof_body)

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response._on_body(body)

    def on_message_complete(self) -> None:
        response = self.response
        if response is not None and response.headers_received.done():
            if response._keep_alive:
                self.usable = True  # (taken back into the pool when the response closes)
            response._on_complete()

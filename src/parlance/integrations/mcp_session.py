"""One connection to an MCP server through the official `mcp` SDK.

The SDK's transports live in anyio task groups that must be entered and left by
the same task, but a request opens its servers in one task and the stream that
uses them may end in another. So each connection runs in a task of its own,
which opens the client, lists the tools and then waits to be closed; calls are
made from any task. Headers are passed to the transport and never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from parlance.net.guard import public_only_client

log = logging.getLogger("parlance.integrations")


class McpFailure(Exception):
    """The server could not be reached, or broke off while we talked to it."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a server lives: a URL (streamable HTTP, or SSE when the path ends in
    `/sse`) or a command speaking MCP over stdio."""

    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    # a server the request named: connect to public addresses only (or these hosts)
    public_only: bool = False
    allowed_hosts: tuple[str, ...] = ()

    def http_client(self, headers: dict[str, str] | None = None,
                    timeout: Any = None, auth: Any = None) -> httpx2.AsyncClient:
        """The HTTP client for this server (the SDK's factory signature)."""
        if self.public_only:
            return public_only_client(self.allowed_hosts, headers, timeout)
        return create_mcp_http_client(headers=headers, timeout=timeout)

    @property
    def uses_sse(self) -> bool:
        return self.url is not None and urlsplit(self.url).path.rstrip("/").endswith("/sse")


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool call returned; `is_error`: the tool reported failure (`isError`)."""

    text: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class RemoteTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool = False  # the server says it changes nothing (readOnlyHint)


def describe(exc: BaseException) -> str:
    """The innermost useful message of an exception (groups from task groups included)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@contextlib.asynccontextmanager
async def _client(endpoint: Endpoint) -> AsyncIterator[Client]:
    headers = dict(endpoint.headers)
    if endpoint.command is not None:
        params = StdioServerParameters(command=endpoint.command, args=list(endpoint.args),
                                       env=dict(endpoint.env) or None)
        async with Client(params) as client:
            yield client
    elif endpoint.url is None:
        raise ValueError("an MCP endpoint needs a url or a command")
    elif endpoint.uses_sse:
        async with Client(sse_client(endpoint.url, headers=headers or None,
                                     httpx_client_factory=endpoint.http_client)) as client:
            yield client
    else:
        async with (endpoint.http_client(headers=headers or None) as http,
                    Client(streamable_http_client(endpoint.url, http_client=http)) as client):
            yield client


class McpSession:
    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.tools: list[RemoteTool] = []
        self._client: Client | None = None
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def open(self, timeout: float) -> None:
        """Connect and list the tools; `McpFailure` when that fails or takes too long."""
        self._task = asyncio.create_task(self._run())
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError:
            await self.aclose()
            raise McpFailure(f"no answer within {timeout:g} s") from None

    async def _run(self) -> None:
        try:
            async with _client(self.endpoint) as client:
                self.tools = await _list_tools(client)
                self._client = client
                self._ready.set_result(None)
                await self._closing.wait()
        except BaseException as exc:  # noqa: BLE001 - reported to whoever waits on open()
            if not self._ready.done():
                self._ready.set_exception(McpFailure(describe(exc)))
            elif not isinstance(exc, asyncio.CancelledError):
                log.warning("MCP connection ended: %s", describe(exc))
        finally:
            self._client = None

    async def call(self, name: str, arguments: dict[str, Any], timeout: float) -> ToolOutput:
        """The raw output: the result's content blocks as JSON, as LM Studio reports it
        (`[{"type":"text","text":"..."}]`). An error result is output too (the model
        reads what went wrong), marked `is_error`."""
        client = self._client
        if client is None:
            raise McpFailure("the connection is closed")
        try:
            result = await asyncio.wait_for(client.call_tool(name, arguments), timeout)
        except TimeoutError:
            raise McpFailure(f"the tool '{name}' gave no answer within {timeout:g} s") from None
        except Exception as exc:
            raise McpFailure(describe(exc)) from exc
        blocks = [block.model_dump(mode="json", by_alias=True, exclude_none=True)
                  for block in result.content]
        return ToolOutput(json.dumps(blocks, ensure_ascii=False, separators=(",", ":")),
                          bool(result.is_error))

    async def aclose(self) -> None:
        self._closing.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 5)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()


async def _list_tools(client: Client) -> list[RemoteTool]:
    tools, cursor = [], None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools += [RemoteTool(t.name, t.description or "", dict(t.input_schema or {}),
                             bool(t.annotations and t.annotations.read_only_hint))
                  for t in page.tools]
        cursor = page.next_cursor
        if not cursor:
            return tools

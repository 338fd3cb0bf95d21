"""A real MCP server on loopback for tests (and `examples/`): the official SDK's
MCPServer over streamable HTTP (`/mcp`) and SSE (`/sse`), run by uvicorn on a
thread. Its `model_search` tool stands in for a model-search tool like Hugging Face's; its
`outline` tool takes a recursive pydantic model (an input schema with `$defs`)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.routing import Mount

RAN: list[str] = []  # tools run by servers in this process, in order


class Section(BaseModel):
    title: str
    sections: list[Section]


def build_server() -> MCPServer:
    server = MCPServer("huggingface")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def model_search(sort: str, limit: int = 5) -> str:
        """Search models on the Hugging Face hub."""
        RAN.append("model_search")
        return f"Showing first {limit} models sorted by {sort}: HuggingFaceTB/SmolLM2-135M"

    @server.tool()
    def add(a: int, b: int) -> str:
        """Add two integers."""
        RAN.append("add")
        return str(a + b)

    @server.tool()
    def outline(document: Section) -> str:
        """Write down the outline of a document."""
        RAN.append("outline")
        return f"Outlined {document.title!r}"

    @server.tool()
    def explode() -> str:
        """A tool that always fails."""
        raise ValueError("kaboom")

    return server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HeaderLog:
    """ASGI wrapper remembering the Authorization headers the server received."""

    def __init__(self, app) -> None:
        self.app = app
        self.seen: list[str] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if b"authorization" in headers:
                self.seen.append(headers[b"authorization"].decode())
        await self.app(scope, receive, send)


@dataclass
class RunningServer:
    port: int
    server: uvicorn.Server
    thread: threading.Thread
    headers: HeaderLog

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def sse_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/legacy/sse"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def start(port: int | None = None, build: Callable[[], MCPServer] = build_server
          ) -> RunningServer:
    """`build`: the server's tools (`build_server`'s by default)."""
    mcp = build()
    # the name the DNS rebinding tests resolve to this server is a host it accepts
    hosts = TransportSecuritySettings(allowed_hosts=["127.0.0.1:*", "localhost:*",
                                                     "rebind.test:*"])
    http_app = mcp.streamable_http_app(transport_security=hosts)
    sse_app = mcp.sse_app(transport_security=hosts)
    app = Starlette(routes=[Mount("/legacy", app=sse_app), Mount("/", app=http_app)],
                    lifespan=http_app.router.lifespan_context)
    port = port or free_port()
    logged = HeaderLog(app)
    server = uvicorn.Server(uvicorn.Config(logged, host="127.0.0.1", port=port,
                                           log_level="error", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60  # a generous bound: the machine may be busy
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test MCP server did not start")
        time.sleep(0.02)
    return RunningServer(port, server, thread, logged)


if __name__ == "__main__":  # stdio, for mcp.json `command` entries in tests
    build_server().run("stdio")

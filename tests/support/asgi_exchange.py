"""One request driven over raw ASGI, keeping what httpx's ASGITransport hides: the
response as it is sent (several requests may run at once) and whether the body was
ended (`more_body: False`, the final zero-length chunk on the wire)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.sse import sse_data


@dataclass
class Exchange:
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    ended: bool = False  # the app sent the body's last message

    @property
    def text(self) -> str:
        return b"".join(self.chunks).decode()

    def json(self) -> Any:
        return json.loads(self.text)

    def sse(self) -> list[Any]:
        return sse_data(self.text)

    def events(self) -> list[str]:
        """The `event:` names of an SSE body, in order."""
        return [line.removeprefix("event: ") for line in self.text.split("\n")
                if line.startswith("event: ")]


async def exchange(app: Callable[..., Awaitable[None]], path: str, body: Any = None, *,
                   method: str = "POST", headers: tuple[tuple[bytes, bytes], ...] = (),
                   raw: bytes | None = None, leave: asyncio.Event | None = None,
                   leave_after: int | None = None, timeout: float = 30.0,
                   out: Exchange | None = None) -> Exchange:
    """Send `body` (JSON) or `raw` bytes; when `leave` is set, or once `leave_after`
    body chunks have come, the client disconnects (for a raw body sent with more to
    come: in the middle of the body). Pass `out` to watch the response while it
    arrives."""
    out = out if out is not None else Exchange()
    payload = raw if raw is not None else json.dumps(body).encode() if body is not None else b""
    delivered = False
    gone = leave or asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": payload,
                    "more_body": raw is not None and leave is not None}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out.status = message["status"]
            out.headers = {k.decode(): v.decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            if message.get("body"):
                out.chunks.append(message["body"])
                if leave_after is not None and len(out.chunks) >= leave_after:
                    gone.set()
            if not message.get("more_body", False):
                out.ended = True

    path, _, query = path.partition("?")  # (a query in `path` is the query string)
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": query.encode(), "headers": [(b"content-type", b"application/json"),
                                              *headers],
             "server": ("test", 80), "client": ("test", 1)}
    await asyncio.wait_for(app(scope, receive, send), timeout)
    return out


async def until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait until `predicate()` holds (polling the loop); fail after a generous timeout."""
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.005)

    try:
        await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        raise AssertionError(f"not within {timeout}s: {what}") from None

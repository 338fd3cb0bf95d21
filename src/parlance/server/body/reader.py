"""Reading a request's JSON body: bounded in size and decoded strictly, with the
decoding and the endpoint's own parsing done off the event loop when the body is
large, so one big request does not stall every other client (and `/health`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
from starlette.requests import Request

from parlance.core.errors import PayloadTooLarge
from parlance.dialects.base import Incoming
from parlance.dialects.shared.wire import M, parse_body
from parlance.server.body import strict_json
from parlance.server.body.gc_pause import collector_paused

T = TypeVar("T")

# Bodies up to this size are decoded and parsed on the loop: a thread hop would cost
# more than the work (tens of microseconds); above it the work grows with the body.
INLINE_BYTES = 64 * 1024


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is larger than this server accepts "
                           f"({limit // 2**20} MiB; parlance serve --max-body-mb).")


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refused (413) as soon as it is known to exceed `limit` bytes: from
    Content-Length before reading anything, else while the chunks arrive."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _identity(value: Any) -> Any:
    return value


async def read_json(request: Request, limit: int,
                    parse: Callable[[Any], T] = _identity) -> T:
    """`parse(decoded body)`; errors are `InvalidRequest` (400) or `PayloadTooLarge`.
    `parse` must be pure (no I/O, no event loop): it may run on a worker thread."""
    return await parse_json(await read_body(request, limit), parse)


async def read_incoming(request: Request, limit: int, parse: Callable[[Incoming], T]) -> T:
    """`parse` of the request as a dialect reads it: its decoded body, with the URL's
    path parameters and query (`read_json`'s rules)."""
    path, query = dict(request.path_params), dict(request.query_params)
    return await read_json(request, limit, lambda body: parse(Incoming(body, path, query)))


async def read_wire(request: Request, limit: int, model: type[M]) -> M:
    """The body as a dialect's request shape (a `WireModel`): errors name the field."""
    return await read_json(request, limit, functools.partial(parse_body, model))


async def parse_json(raw: bytes, parse: Callable[[Any], T] = _identity) -> T:
    """`parse(decoded raw)`, as for a body (a WebSocket message is read this way too)."""

    if len(raw) <= INLINE_BYTES:
        return parse(strict_json.decode(raw))

    def work() -> T:
        with collector_paused():
            return parse(strict_json.decode(raw))

    return await anyio.to_thread.run_sync(work)

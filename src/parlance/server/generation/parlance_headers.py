"""Per-request switches no LLM API has a field for, the same on every route: rather than
add an unknown body field to each dialect's schema, a header says it (for WebSocket
mode, once in the handshake, for every call of the connection). Each is `on` or `off`;
any other value is a 400 in the route's own envelope.

- `X-Parlance-Speculative: off` opts the request out of speculative decoding
  (llama-server's `speculative.*` body fields tune its own drafter and are not part of
  any API this server speaks). Speculation never changes what a request generates;
  the opt-out only gives back the batch rows its drafts would take (a latency-critical
  neighbour, a measurement without speculation).
- `X-Parlance-Progress: on` asks for prompt-processing progress in a stream whose API
  has no event for it (`Call.progress`; Responses sends `parlance.prompt_progress`).
  A client that does not ask gets the API's own stream, byte for byte."""

from __future__ import annotations

import dataclasses

from starlette.requests import HTTPConnection

from parlance.core.errors import InvalidRequest
from parlance.dialects.base import Call

SPECULATIVE = "X-Parlance-Speculative"
PROGRESS = "X-Parlance-Progress"
_OFF, _ON = ("off", "0", "false", "no"), ("on", "1", "true", "yes", "auto")


def with_parlance_headers(connection: HTTPConnection, call: Call) -> Call:
    """The call as the request's Parlance headers change it."""
    if switch(connection, SPECULATIVE) is False:
        call = dataclasses.replace(call, request=dataclasses.replace(call.request,
                                                                     speculative=False))
    if switch(connection, PROGRESS):
        call = dataclasses.replace(call, progress=True)
    return call


def switch(connection: HTTPConnection, name: str) -> bool | None:
    """The header's value as a switch; None when it is not sent."""
    raw = connection.headers.get(name)
    if raw is None:
        return None
    value = raw.strip().lower()
    if value in _ON:
        return True
    if value not in _OFF:
        raise InvalidRequest(f"The {name} header must be 'on' or 'off', not {raw!r}.",
                             param=name)
    return False

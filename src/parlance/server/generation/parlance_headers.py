"""Per-request switches no LLM API has a field for, the same on every route: rather than
add an unknown body field to each dialect's schema, a header says it (for WebSocket
mode, once in the handshake, for every call of the connection). Each is `on` or `off`
(in any case), the one spelling the docs (docs/apis/index.md) and the OpenAPI document
give; any other value (`1`, `true` or `yes` too) is a 400 in the route's own envelope.

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
from parlance.server.openapi.operation import Query

SPECULATIVE = "X-Parlance-Speculative"
PROGRESS = "X-Parlance-Progress"
SWITCH = {"on": True, "off": False}  # a switch's values, and what each means

_SWITCH = {"type": "string", "enum": list(SWITCH)}
# The headers every generation route reads, as `/openapi.json` documents them
PARLANCE_HEADERS = (
    Query(SPECULATIVE, _SWITCH, "off: no speculative decoding for this request (it never "
          "changes what is generated; it gives back the batch rows drafts would take)."),
    Query(PROGRESS, _SWITCH, "on: prompt processing shown in a stream whose API has no "
          "event for it. /v1/responses (and its WebSocket mode, in the handshake) then "
          "also sends `parlance.prompt_progress` events: {type, sequence_number, done, "
          "total}, prompt tokens evaluated of the total, per chunk, numbered with the "
          "others (never for a background response). Without it, the API's stream "
          "exactly."),
)


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
    value = SWITCH.get(raw.strip().lower())
    if value is None:
        raise InvalidRequest(f"The {name} header must be 'on' or 'off', not {raw!r}.",
                             param=name)
    return value

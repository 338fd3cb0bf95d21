"""The per-request opt-out of speculative decoding, the same for every dialect.

No LLM API has a field for it (llama-server's `speculative.*` body fields tune its
own drafter and are not part of any API this server speaks), so rather than add an
unknown body field to each dialect's schema, a header says it: `X-Parlance-Speculative:
off`. Speculation never changes what a request generates; the opt-out only gives
back the batch rows its drafts would take (a latency-critical neighbour, a
measurement without speculation)."""

from __future__ import annotations

import dataclasses

from starlette.requests import HTTPConnection

from parlance.core.errors import InvalidRequest
from parlance.dialects.base import Call

HEADER = "x-parlance-speculative"
_OFF, _ON = ("off", "0", "false", "no"), ("on", "1", "true", "yes", "auto")


def with_speculation_header(connection: HTTPConnection, call: Call) -> Call:
    raw = connection.headers.get(HEADER)
    if raw is None:
        return call
    value = raw.strip().lower()
    if value in _ON:
        return call
    if value not in _OFF:
        raise InvalidRequest(f"The X-Parlance-Speculative header must be 'on' or 'off', not "
                             f"{raw!r}.", param="X-Parlance-Speculative")
    return dataclasses.replace(call, request=dataclasses.replace(call.request,
                                                                 speculative=False))

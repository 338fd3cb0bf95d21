"""What an upstream's refusal means here: the client's fault (the same request would
be refused by every replica, so it is answered now, in the client's own dialect) or
the replica's (another replica is tried).

The error shapes of the servers behind us:
- OpenAI, llama-server, Parlance, SGLang: `{"error": {"message", "type", "code", "param"}}`
  (llama-server's context overflow: `type: exceed_context_size_error`).
- vLLM: the same, or before 0.9 a bare `{"object": "error", "message", "type", "code"}`.
- FastAPI validation (vLLM, SGLang): 422 `{"detail": [...]}`.
- Ollama: `{"error": {"message", "type"}}`, or `{"error": "text"}` on its own API.
vLLM and SGLang say a prompt overflows the context only in words ("maximum context
length"), so those words are read; a `code` of `context_length_exceeded` (OpenAI,
Parlance) is read first.

A refusal that is the client's fault keeps the upstream's words (they say what to
change). A server's own failure (5xx, an error inside its stream) is told by its status
alone: its body may hold secrets or internals, so only the operator's log sees it
(`upstream_message`).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from typing import Any

from parlance.core.errors import (
    ContextOverflow,
    InvalidRequest,
    NotImplementedHere,
    Overloaded,
    ParlanceError,
    PayloadTooLarge,
    UpstreamFailure,
)

_OVERFLOW_WORDS = re.compile(r"context (length|size|window)|too many tokens|"
                             r"prompt is too long|exceeds the available context", re.I)
_OVERFLOW_TYPES = {"exceed_context_size_error", "context_length_exceeded",
                   "tokens_exceeded_error"}
MAX_MESSAGE = 2000  # an upstream's message quoted back, at most this long


@dataclass(frozen=True, slots=True)
class Refusal:
    error: ParlanceError
    client_fault: bool  # True: answer the client; False: try another replica


def _fields(body: Any) -> tuple[str, str | None, str | None, str | None]:
    """(message, type, code, param) from any of the shapes above."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, str):
            return inner, None, None, None
        if isinstance(inner, dict):
            message = inner.get("message") or inner.get("detail") or ""
            if not isinstance(message, str):
                message = json.dumps(message)
            kind, code, param = inner.get("type"), inner.get("code"), inner.get("param")
            return (message, str(kind) if kind else None,
                    str(code) if code is not None else None, str(param) if param else None)
    if isinstance(body, str):
        return body, None, None, None
    return "", None, None, None


def upstream_message(body: Any) -> str:
    """What an upstream said in an error body, for the operator's log only."""
    return _fields(body)[0][:MAX_MESSAGE]


def parse_body(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", errors="replace").strip()


def _overflow(message: str, kind: str | None, code: str | None) -> bool:
    return (code in _OVERFLOW_TYPES or kind in _OVERFLOW_TYPES
            or bool(_OVERFLOW_WORDS.search(message)))


def classify(status: int, body: Any, retry_after: str | None = None) -> Refusal:
    """A refusal from an upstream's HTTP status and decoded body."""
    message, kind, code, param = _fields(body)
    message = message[:MAX_MESSAGE] or f"The upstream server answered HTTP {status}."
    if 400 <= status < 500 and status != 429 and _overflow(message, kind, code):
        # (Parlance answers an overflow with 403 tokens_exceeded_error, as LM Studio does)
        return Refusal(ContextOverflow(message, param=param or "messages",
                                       code="context_length_exceeded"), True)
    if status in (400, 422):
        return Refusal(InvalidRequest(message, param=param, code=code if code and not
                                      code.isdigit() else None), True)
    if status == 413:
        return Refusal(PayloadTooLarge(message), True)
    if status == 501:
        return Refusal(NotImplementedHere(message, code="not_implemented"), True)
    if status == 429:
        seconds = 1.0
        if retry_after is not None:
            with contextlib.suppress(ValueError):
                seconds = max(1.0, float(retry_after))
        return Refusal(Overloaded("Every replica of this model is busy (HTTP 429).",
                                  retry_after=seconds), False)
    return Refusal(UpstreamFailure(f"The upstream server answered HTTP {status}."), False)


def stream_error(body: Any) -> ParlanceError:
    """An error object an upstream sent inside its stream."""
    message, kind, code, _ = _fields(body if isinstance(body, dict) and "error" in body
                                     else {"error": body})
    message = message[:MAX_MESSAGE]
    if _overflow(message, kind, code):
        return ContextOverflow(message, param="messages", code="context_length_exceeded")
    return UpstreamFailure("The upstream server reported an error while generating.")

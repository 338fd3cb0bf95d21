"""The `/api/chat` and `/api/generate` objects: the pieces every line shares (model,
`created_at`), the final line's `done_reason` and metrics, and the whole answer of a
`stream: false` call, built from the same accumulator as the stream.

Fields come in the order of Ollama's Go structs, and empty ones are left out as Go's
`omitempty` leaves them out (metrics that are zero, empty `thinking`, no calls).
Durations are nanoseconds: `prompt_eval_duration` from the request's admission to its
first token, `eval_duration` from the first token to the last, `load_duration` the
time this request waited for its model to be ready (a load, or a few microseconds to
find it loaded: sent even then, as Ollama always sends it), `total_duration` from the
parsed request to the answer.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from parlance.core.accumulate import ChoiceResult, Completion, ToolCallResult
from parlance.core.events import FinishReason, TokenLogprob, Usage

_DONE_REASONS = {FinishReason.STOP: "stop", FinishReason.LENGTH: "length",
                 FinishReason.TOOL_CALLS: "stop"}  # Ollama ends a turn of calls with "stop"


def clock_ns() -> int:
    """A monotonic clock, for `total_duration`."""
    return time.perf_counter_ns()


def timestamp() -> str:
    """`created_at`: RFC 3339 in UTC with nanoseconds, trailing zeros dropped (Go's
    RFC3339Nano)."""
    ns = time.time_ns()
    seconds, fraction = divmod(ns, 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{fraction:09d}".rstrip("0")
    return f"{stamp}.{digits}Z" if digits else f"{stamp}Z"


def _ns(seconds: float | None) -> int:
    return round(seconds * 1e9) if seconds else 0


def metrics(usage: Usage | None, ready_seconds: float, received_ns: int) -> dict[str, int]:
    """The final line's metrics; zero ones are omitted, as Go omits them (a wait for
    the model always took some time)."""
    usage = usage or Usage(0, 0)
    values = {
        "total_duration": max(0, clock_ns() - received_ns),
        "load_duration": max(1, _ns(ready_seconds)),
        "prompt_eval_count": usage.prompt_tokens,
        "prompt_eval_duration": _ns(usage.first_token_seconds),
        "eval_count": usage.completion_tokens,
        "eval_duration": _ns(usage.decode_seconds),
    }
    return {key: value for key, value in values.items() if value}


def done_reason(choice: ChoiceResult | None) -> str:
    if choice is None or choice.finish_reason is None:
        return "stop"
    return _DONE_REASONS[choice.finish_reason]


def arguments(text: str) -> dict[str, Any]:
    """A call's `arguments` object. Text that is not a JSON object (only a model
    writing calls without its grammar produces it) is kept under "input"."""
    try:
        parsed = json.loads(text or "{}")
    except ValueError:
        return {"input": text}
    return parsed if isinstance(parsed, dict) else {"input": parsed}


def tool_call(call: ToolCallResult, index: int) -> dict[str, Any]:
    return {"id": call.call_id,
            "function": {"index": index, "name": call.name,
                         "arguments": arguments(call.arguments)}}


def logprobs(tokens: list[TokenLogprob] | tuple[TokenLogprob, ...]) -> list[dict[str, Any]]:
    """Ollama's `logprobs` entries: token, logprob, bytes, top_logprobs."""
    out = []
    for t in tokens:
        entry: dict[str, Any] = {"token": t.token, "logprob": t.logprob or 0.0,
                                 "bytes": list(t.bytes)}
        if t.top:
            entry["top_logprobs"] = [{"token": a.token, "logprob": a.logprob,
                                      "bytes": list(a.bytes)} for a in t.top]
        out.append(entry)
    return out


def assistant_message(content: str, thinking: str = "",
                      calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking:
        message["thinking"] = thinking
    if calls:
        message["tool_calls"] = calls
    return message


def chat_answer(model: str, completion: Completion, *, ready_seconds: float,
                received_ns: int, with_logprobs: bool) -> dict[str, Any]:
    """The whole `/api/chat` answer of a `stream: false` call."""
    choice = completion.choices.get(0) or ChoiceResult(0)
    calls = [tool_call(c, i) for i, c in enumerate(choice.tool_calls)]
    body: dict[str, Any] = {
        "model": model, "created_at": timestamp(),
        "message": assistant_message(choice.text, choice.reasoning, calls),
        "done": True, "done_reason": done_reason(choice)}
    if with_logprobs and choice.logprobs:
        body["logprobs"] = logprobs(choice.logprobs)
    return {**body, **metrics(completion.usage, ready_seconds, received_ns)}


def generate_answer(model: str, completion: Completion, *, ready_seconds: float,
                    received_ns: int, with_logprobs: bool,
                    context: list[int] | None) -> dict[str, Any]:
    """The whole `/api/generate` answer of a `stream: false` call."""
    choice = completion.choices.get(0) or ChoiceResult(0)
    body: dict[str, Any] = {"model": model, "created_at": timestamp(),
                            "response": choice.text}
    if choice.reasoning:
        body["thinking"] = choice.reasoning
    body |= {"done": True, "done_reason": done_reason(choice)}
    if context:
        body["context"] = context
    body |= metrics(completion.usage, ready_seconds, received_ns)
    if with_logprobs and choice.logprobs:
        body["logprobs"] = logprobs(choice.logprobs)
    return body


def load_answer(model: str, generate: bool, unloaded: bool) -> dict[str, Any]:
    """The answer to a call that only loads (or unloads) its model."""
    body: dict[str, Any] = {"model": model, "created_at": timestamp()}
    body |= {"response": ""} if generate else {"message": assistant_message("")}
    return {**body, "done": True, "done_reason": "unload" if unloaded else "load"}

"""The Message object (non-stream body) and the pieces the stream shares with it."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from typing import Any

from parlance.core.accumulate import ChoiceResult, Completion, TextPart, ToolCallResult
from parlance.core.events import Finish, FinishReason, ToolsListed, Usage
from parlance.dialects.anthropic import mcp
from parlance.dialects.anthropic.ids import tool_use_id

_STOP_REASONS = {FinishReason.STOP: "end_turn", FinishReason.LENGTH: "max_tokens",
                 FinishReason.TOOL_CALLS: "tool_use"}


def new_message_id() -> str:
    return "msg_" + secrets.token_hex(12)


def message_shell(message_id: str, model: str) -> dict[str, Any]:
    return {"id": message_id, "type": "message", "role": "assistant", "model": model}


def signature(thinking: str) -> str:
    """A thinking block's `signature`: a digest of its text. Clients hand it back
    opaque; Parlance reads thinking blocks back without checking it."""
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest()).decode()


def stop_fields(finish: Finish | None) -> tuple[str, str | None]:
    """`stop_reason` and `stop_sequence` (the stop string that ended the output)."""
    if finish is None:
        return "end_turn", None
    if finish.reason is FinishReason.STOP and finish.stop_sequence is not None:
        return "stop_sequence", finish.stop_sequence
    return _STOP_REASONS[finish.reason], None


def usage(counts: Usage | None) -> dict[str, Any]:
    """As on Anthropic, `input_tokens` are the prompt tokens evaluated for this request and
    `cache_read_input_tokens` those an earlier request left in the engine's cache (prefix
    reuse); together they are the whole prompt. Parlance keeps every prompt it evaluates
    without a write premium, so `cache_creation_input_tokens` is always 0."""
    counts = counts or Usage(0, 0)
    return {"input_tokens": counts.prompt_tokens - counts.cached_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": counts.cached_tokens,
            "output_tokens": counts.completion_tokens}


def start_usage(prompt_tokens: int) -> dict[str, Any]:
    """`message_start`'s usage: the whole prompt. How much of it the cache holds is known
    only once the engine admits the request, so `message_delta` carries the split."""
    return {"input_tokens": prompt_tokens, "output_tokens": 0}


def _tool_input(arguments: str) -> dict[str, Any]:
    """A call's `input` object; arguments that are not a JSON object are kept whole
    under `input` rather than lost (only an unconstrained model writes those)."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return {"input": arguments}
    return parsed if isinstance(parsed, dict) else {"input": parsed}


def content(choice: ChoiceResult) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in choice.parts:
        if isinstance(part, ToolsListed):
            blocks.append(mcp.listing_block(part))
        elif isinstance(part, TextPart) and part.kind == "text" and part.text:
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, TextPart) and part.kind == "reasoning" and part.text:
            blocks.append({"type": "thinking", "thinking": part.text,
                           "signature": signature(part.text)})
        elif isinstance(part, ToolCallResult) and part.provider is not None:
            blocks.append(mcp.use_block(part.call_id, part.name, part.provider.label,
                                        _tool_input(part.arguments)))
            outcome = part.refused if part.refused is not None else part.output
            if outcome is not None:
                blocks.append(mcp.result_block(part.call_id, outcome, part.output_is_error))
        elif isinstance(part, ToolCallResult):
            blocks.append({"type": "tool_use", "id": tool_use_id(part.call_id),
                           "name": part.name,
                           "input": _tool_input(part.arguments)})
    return blocks


def message(message_id: str, model: str, completion: Completion) -> dict[str, Any]:
    choice = completion.choices.get(0) or ChoiceResult(0)
    finish = Finish(choice.finish_reason or FinishReason.STOP, 0, choice.stop_sequence)
    reason, stop_sequence = stop_fields(finish)
    return {**message_shell(message_id, model), "content": content(choice),
            "stop_reason": reason, "stop_sequence": stop_sequence,
            "usage": usage(completion.usage)}

"""The `/api/v1/chat` result body (non-stream answer and `chat.end`'s `result`), and
the conversation it leaves behind for a later `previous_response_id`.

Output items keep generation order: reasoning, message, tool_call and
invalid_tool_call items interleave as the model produced them.
"""

from __future__ import annotations

import json
from typing import Any

from parlance.core.accumulate import Completion, TextPart, ToolCallResult
from parlance.core.events import ToolRefused, Usage
from parlance.core.messages import Message, ToolCall
from parlance.core.tools import ToolProvider


def provider_info(provider: ToolProvider) -> dict[str, str]:
    key = "server_label" if provider.kind == "ephemeral_mcp" else "plugin_id"
    return {"type": provider.kind, key: provider.label}


def arguments_object(text: str) -> dict[str, Any] | None:
    """A call's arguments as the object LM Studio reports; None when not an object."""
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def failure_metadata(call: ToolCallResult, refused: ToolRefused) -> dict[str, Any]:
    metadata: dict[str, Any] = {"type": refused.kind, "tool_name": call.name}
    if refused.kind == "invalid_arguments":
        arguments = arguments_object(call.arguments)
        if arguments is not None:
            metadata["arguments"] = arguments
        if call.provider is not None:
            metadata["provider_info"] = provider_info(call.provider)
    return metadata


def _call_item(call: ToolCallResult) -> dict[str, Any] | None:
    if call.refused is not None:
        return {"type": "invalid_tool_call", "reason": call.refused.reason,
                "metadata": failure_metadata(call, call.refused)}
    if call.provider is None or call.output is None:
        return None  # the stream ended before the tool ran
    return {"type": "tool_call", "tool": call.name,
            "arguments": arguments_object(call.arguments) or {},
            "output": call.output, "provider_info": provider_info(call.provider)}


def output_items(completion: Completion) -> list[dict[str, Any]]:
    items = []
    for part in completion.choice(0).parts:
        if isinstance(part, TextPart):
            kind = "message" if part.kind == "text" else "reasoning"
            items.append({"type": kind, "content": part.text})
        elif isinstance(part, ToolCallResult) and (item := _call_item(part)) is not None:
            items.append(item)
    return items


def stats(usage: Usage | None, load_seconds: float | None) -> dict[str, Any]:
    usage = usage or Usage(0, 0)
    rate = usage.throughput_after_first_token
    if rate is None and usage.decode_seconds:
        rate = usage.completion_tokens / usage.decode_seconds
    out: dict[str, Any] = {
        "input_tokens": usage.prompt_tokens,
        "total_output_tokens": usage.completion_tokens,
        "reasoning_output_tokens": usage.reasoning_tokens,
        "tokens_per_second": round(rate or 0.0, 2),
        "time_to_first_token_seconds": round(usage.first_token_seconds or 0.0, 3),
    }
    if load_seconds is not None:
        out["model_load_time_seconds"] = round(load_seconds, 3)
    return out


def result_body(model: str, completion: Completion, response_id: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"model_instance_id": model, "output": output_items(completion),
                            "stats": stats(completion.usage, completion.load_seconds)}
    if response_id is not None:
        body["response_id"] = response_id
    return body


def thread_messages(output: list[dict[str, Any]]) -> list[Message]:
    """What a stored answer adds to the conversation: the assistant's words, its
    calls and their results (reasoning is not carried into later turns)."""
    messages: list[Message] = []
    text, calls, results = "", list[ToolCall](), list[Message]()

    def flush() -> None:
        nonlocal text, calls, results
        if text or calls:
            messages.append(Message("assistant", text, tool_calls=tuple(calls)))
        messages.extend(results)
        text, calls, results = "", list[ToolCall](), list[Message]()

    for n, item in enumerate(output):
        kind = item.get("type")
        if kind == "message":
            if calls:
                flush()
            text += item.get("content", "")
        elif kind in ("tool_call", "invalid_tool_call"):
            call_id = f"call_{n}"
            if kind == "tool_call":
                name, arguments, answer = item["tool"], item.get("arguments", {}), item["output"]
            else:
                meta = item.get("metadata", {})
                name, arguments = meta.get("tool_name", ""), meta.get("arguments", {})
                answer = item.get("reason", "")
            calls.append(ToolCall(call_id, name, json.dumps(arguments)))
            results.append(Message("tool", answer, name=name, tool_call_id=call_id))
    flush()
    return messages

"""The response object of `/v1/responses`, as every answer and stream event carries it:
its fields (those the Open Responses specification requires included), its usage,
its output items built from the call, and a stored response replayed as the
stream that made it (`GET /v1/responses/{id}?stream=true`)."""

from __future__ import annotations

from typing import Any

from parlance.core.accumulate import Completion
from parlance.core.errors import ParlanceError
from parlance.core.events import FinishReason, Usage
from parlance.dialects.base import DONE, Frame
from parlance.dialects.openai.common import now
from parlance.dialects.openai.responses.output import OutputBuilder
from parlance.dialects.openai.responses.request import REASONING, ResponsesCall
from parlance.dialects.openai.responses.tools import toolset
from parlance.dialects.shared.sealed import Sealer

ENCRYPTED_REASONING = "reasoning.encrypted_content"


def response_object(call: ResponsesCall, model: str, *, status: str,
                    output: list[dict[str, Any]], usage: Usage | None = None,
                    error: ParlanceError | None = None) -> dict[str, Any]:
    body = call.body
    fmt = body.text.format if body.text and body.text.format else None
    return {
        "id": call.id, "object": "response", "created_at": call.created_at,
        "status": status, "background": body.background,
        "completed_at": now() if status == "completed" else None,
        "error": ({"code": error.code or "server_error", "message": error.message}
                  if error else None),
        "incomplete_details": ({"reason": "max_output_tokens"} if status == "incomplete"
                               else None),
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "metadata": body.metadata or {},
        "model": model,
        "output": output,
        "parallel_tool_calls": body.parallel_tool_calls,
        "previous_response_id": body.previous_response_id,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None,
                      "summary": body.reasoning.summary if body.reasoning else None},
        "store": body.store,
        "temperature": body.temperature if body.temperature is not None else 1.0,
        "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt
                 else {"type": "text"}},
        "tool_choice": (body.tool_choice if isinstance(body.tool_choice, str | None)
                        else body.tool_choice.model_dump()) or "auto",
        "tools": [t.echoed() for t in body.tools or ()],
        "top_logprobs": body.top_logprobs or 0,
        "top_p": body.top_p if body.top_p is not None else 1.0,
        "truncation": body.truncation,
        "usage": usage_object(usage) if usage else None,
        # fixed here, required by the Open Responses specification
        "presence_penalty": 0.0, "frequency_penalty": 0.0, "max_tool_calls": None,
        "service_tier": "default", "safety_identifier": None,
        "prompt_cache_key": body.prompt_cache_key,
    }


def usage_object(usage: Usage) -> dict[str, Any]:
    return {"input_tokens": usage.prompt_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens,
                                     "cache_write_tokens": 0},
            "output_tokens": usage.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            "total_tokens": usage.total_tokens}


def output_builder(call: ResponsesCall, sealer: Sealer) -> OutputBuilder:
    """Output items for this call; a server whose tools the conversation has listed
    already is not listed again (as on OpenAI). Reasoning items carry their text
    sealed when the client asks (`include`), to hand it back without the store."""
    listed = frozenset(str(item.get("server_label")) for item in call.context
                       if item.get("type") == "mcp_list_tools")
    seal = None
    if ENCRYPTED_REASONING in (call.body.include or []):
        def seal(text: str) -> str:
            return sealer.seal(REASONING, text)
    return OutputBuilder(logprobs=call.request.logprobs is not None, listed=listed,
                         tools=toolset(call.body.tools or [], call.context), seal=seal)


def finished_response(call: ResponsesCall, model: str, completion: Completion,
                      sealer: Sealer) -> dict[str, Any]:
    """The answer to a call without `stream`: its finished choice's items, the last one
    incomplete when the output cap cut it short."""
    builder = output_builder(call, sealer)
    choice = completion.choice(0)
    builder.replay(choice)
    incomplete = choice.finish_reason is FinishReason.LENGTH
    if incomplete and builder.items:
        builder.items[-1]["status"] = "incomplete"
    return response_object(call, model, status="incomplete" if incomplete else "completed",
                           output=builder.items, usage=completion.usage)


def terminal_event(status: str) -> str:
    """The one event that ends a stream with this status (cancelled ends incomplete)."""
    return {"completed": "response.completed", "failed": "response.failed"}.get(
        status, "response.incomplete")


def replay(response: dict[str, Any], starting_after: int | None) -> list[Frame]:
    """A stored response as the stream that produced it (GET ...?stream=true)."""
    output = response.get("output", [])
    builder = OutputBuilder(ids=iter([item["id"] for item in output]))
    start = {**response, "status": "in_progress", "output": [], "usage": None}
    events = [("response.created", {"response": start}),
              ("response.in_progress", {"response": start}),
              *builder.replay_items(output)]
    status = str(response.get("status"))
    if status != "in_progress":
        events.append((terminal_event(status), {"response": response}))
    frames = [Frame({"type": kind, "sequence_number": n, **fields}, event=kind)
              for n, (kind, fields) in enumerate(events)
              if starting_after is None or n > starting_after]
    return [*frames, Frame(DONE)]

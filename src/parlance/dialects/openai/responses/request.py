"""`POST /v1/responses` at the wire: the request body, checked, and the call it
becomes: its input items (with the stored conversation's before them, for a chained
request) turned into neutral messages and the neutral request. Items are kept (with
ids) so they can be stored, listed and chained."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from parlance.core.errors import InvalidRequest
from parlance.core.messages import Message, ToolCall, unanswered_result
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams
from parlance.core.stored import StoredResponse
from parlance.core.tools import ReasoningRequest, ResponseFormat, ToolChoice, ToolSpec
from parlance.dialects.base import Call
from parlance.dialects.openai import tools as openai_tools
from parlance.dialects.openai.common import new_id
from parlance.dialects.openai.responses import items as calls
from parlance.dialects.openai.responses import mcp
from parlance.dialects.openai.responses.mcp import NamedMcp
from parlance.dialects.openai.responses.tools import (
    FunctionTool,
    NamedCustom,
    NamedFunction,
    NamedHosted,
    NamedShell,
    Tool,
    model_name,
    toolset,
)
from parlance.dialects.openai.tools import FunctionName
from parlance.dialects.shared import tools as neutral_tools
from parlance.dialects.shared.sealed import Sealer
from parlance.dialects.shared.wire import WireModel

__all__ = ["FunctionTool", "NamedFunction", "Tool"]
LOGPROBS_INCLUDE = "message.output_text.logprobs"
NamedTool = NamedFunction | NamedCustom | NamedShell | NamedHosted | NamedMcp


class Reasoning(WireModel):
    effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


class TextFormat(WireModel):
    type: Literal["text", "json_object", "json_schema"]
    name: FunctionName | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None
    description: str | None = None


class TextConfig(WireModel):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ResponsesRequest(WireModel):
    model: str | None = None
    input: str | Annotated[list[dict[str, Any]], Field(min_length=1)]
    instructions: str | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | Annotated[
        NamedTool, Field(discriminator="type")] | None = None
    parallel_tool_calls: bool = True
    # OpenAI's floor is 16; Codex warms a local model up with 1
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    include: list[str] | None = None
    reasoning: Reasoning | None = None
    text: TextConfig | None = None
    metadata: dict[str, str] | None = None
    store: bool = True
    previous_response_id: str | None = None
    truncation: Literal["auto", "disabled"] = "disabled"
    stream: bool = False
    background: bool = False
    seed: int | None = None
    prompt_cache_key: str | None = None  # echoed; prompt prefixes are cached anyway

    @field_validator("metadata")
    @classmethod
    def _metadata_limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return value
        if len(value) > 16:
            raise ValueError("at most 16 key-value pairs")
        for key, item in value.items():
            if len(key) > 64:
                raise ValueError(f"key {key[:20]!r}… is longer than 64 characters")
            if len(item) > 512:
                raise ValueError(f"the value of {key!r} is longer than 512 characters")
        return value


@dataclass(frozen=True, slots=True)
class ResponsesCall(Call):
    id: str
    created_at: int
    body: ResponsesRequest
    items: tuple[dict[str, Any], ...]  # this request's input items
    context: tuple[dict[str, Any], ...]  # every input item the model sees, chain included
    # WebSocket mode: the lane its events echo, and whether the model runs at all
    lane: str | None = field(default=None, kw_only=True)
    generate: bool = field(default=True, kw_only=True)


def generation_request(body: ResponsesRequest, context: list[dict[str, Any]],
                       sealer: Sealer, *, whole: bool = True) -> GenerationRequest:
    """`whole`: the context is the whole conversation (not yet the case while a
    chained request's stored turns are unknown)."""
    tools = toolset(body.tools or [], context).specs
    servers = mcp.tool_servers(body.tools or [])
    messages = messages_of(context, sealer)
    if whole:
        _refuse_unanswered_outputs(messages, context)
    if body.instructions:
        messages.insert(0, Message("system", body.instructions))
    logprobs = None
    if LOGPROBS_INCLUDE in (body.include or []):
        logprobs = body.top_logprobs or 0
    return GenerationRequest(
        model=body.model or "",
        prompts=(ChatInput(tuple(messages)),),
        sampling=SamplingParams(
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p, seed=body.seed),
        sampling_set=frozenset(k for k in ("temperature", "top_p", "seed")
                               if k in body.model_fields_set),
        max_tokens=body.max_output_tokens,
        logprobs=logprobs,
        tools=tools,
        tool_choice=tool_choice(body, tools),
        parallel_tool_calls=body.parallel_tool_calls,
        response_format=response_format(body.text),
        reasoning=reasoning(body),
        tool_servers=servers,
        approved_calls=mcp.approved_calls(context, servers) if whole else (),
    )


def _refuse_unanswered_outputs(messages: list[Message], context: list[dict[str, Any]]) -> None:
    """A call's output item whose call_id no earlier call has (in the input or the
    stored chain) is refused, in OpenAI's words."""
    unanswered = unanswered_result(messages)
    if unanswered is None:
        return
    call_id = unanswered[1]
    kind = next((str(item.get("type")) for item in context if item.get("call_id") == call_id
                 and str(item.get("type")).endswith("_output")), "function_call_output")
    raise InvalidRequest(f"No tool call found for {kind.replace('_', ' ')} with call_id "
                         f"{call_id}.", param="input")


def conversation(previous: StoredResponse) -> list[dict[str, Any]]:
    """Every item of a stored response's conversation: what it saw, then what it said."""
    return [*previous.context, *previous.response.get("output", [])]


def resolve_references(items: list[dict[str, Any]],
                       known: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_id = {item.get("id"): item for item in known}
    out = []
    for i, item in enumerate(items):
        if item.get("type") == "item_reference":
            found = by_id.get(item.get("id"))
            if found is None:
                raise InvalidRequest(f"No item with id '{item.get('id')}' in the stored "
                                     "conversation.", param=f"input[{i}].id")
            item = found
        out.append(item)
    return out


def tool_choice(req: ResponsesRequest, tools: tuple[ToolSpec, ...]) -> ToolChoice:
    """The client's choice. A named MCP tool is checked once its server has listed
    its tools; an MCP server without a name means some tool must be called; `auto`
    with no tools is no tool (Chat Completions refuses it, Responses does not)."""
    if isinstance(req.tool_choice, NamedMcp):
        name = req.tool_choice.name
        return ToolChoice("required") if name is None else ToolChoice("named", name)
    if isinstance(req.tool_choice, NamedHosted):
        raise InvalidRequest(f"tool_choice names the tool type '{req.tool_choice.type}', "
                             "which OpenAI runs itself; this server cannot run it.",
                             param="tool_choice.type", code="unsupported_value")
    if isinstance(req.tool_choice, NamedShell):
        return neutral_tools.tool_choice(None, "shell", tools)
    if isinstance(req.tool_choice, NamedFunction | NamedCustom):
        return neutral_tools.tool_choice(None, _called(req.tool_choice.name, tools), tools)
    if req.tools and not tools:  # MCP servers only: their tools are known later
        return ToolChoice(req.tool_choice or "auto")
    if req.tool_choice == "auto" and not tools:
        # Nothing to call: OpenAI's Responses API takes it, and Codex sends it (`tools: []`)
        # for its compaction turn.
        return ToolChoice("none")
    return neutral_tools.tool_choice(req.tool_choice, None, tools)


def _called(name: str, tools: tuple[ToolSpec, ...]) -> str:
    """A named tool's name to the model: as is, or the one namespaced tool it names."""
    if any(t.name == name for t in tools):
        return name
    namespaced = [t.name for t in tools if t.name.endswith(f".{name}")]
    return namespaced[0] if len(namespaced) == 1 else name


def response_format(text: TextConfig | None) -> ResponseFormat | None:
    fmt = text.format if text else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return ResponseFormat("json_object", param="text.format")
    if fmt.name is None:
        raise InvalidRequest("text.format of type 'json_schema' needs a name.",
                             param="text.format.name")
    return ResponseFormat("json_schema", fmt.schema_ or {"type": "object"}, fmt.name,
                          bool(fmt.strict), param="text.format.schema")


def reasoning(req: ResponsesRequest) -> ReasoningRequest | None:
    return openai_tools.reasoning(req.reasoning.effort if req.reasoning else None,
                                  "reasoning.effort")


# -- input items ----------------------------------------------------------------------

_ID_PREFIX = {"message": "msg_", "function_call": "fc_", "function_call_output": "fco_",
              "reasoning": "rs_", "mcp_list_tools": "mcpl_", "mcp_call": "mcp_",
              "mcp_approval_request": "mcpr_", "mcp_approval_response": "mcpa_",
              "compaction": "cmp_", **calls.ID_PREFIX}

# A compaction item (`POST /v1/responses/compact`) seals its summary for this purpose; the
# model reads it back as its own earlier turn.
COMPACTION = "compaction"
SUMMARY_HEADING = "Summary of the conversation so far:\n"
# A reasoning item's text, sealed in its encrypted_content (include:
# ["reasoning.encrypted_content"]), so a client that keeps no state on the server
# (store: false) hands the model its own reasoning back.
REASONING = "reasoning"


def input_items(value: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's input as items, each with a type and an id (for storage and listing)."""
    if isinstance(value, str):
        value = [{"type": "message", "role": "user", "content": value}]
    items = []
    for i, raw in enumerate(value):
        item = dict(raw)
        kind = item.setdefault("type", "message")
        if kind not in (*_ID_PREFIX, "item_reference"):
            raise InvalidRequest(f"Input items of type '{kind}' are not supported.",
                                 param=f"input[{i}].type")
        if kind != "item_reference":
            item.setdefault("id", new_id(_ID_PREFIX[kind]))
        if kind == "message":
            item.setdefault("status", "completed")
            if isinstance(item.get("content"), str):  # stored and listed as parts
                part = ("output_text" if item.get("role") == "assistant" else "input_text")
                extra: dict[str, Any] = {"annotations": []} if part == "output_text" else {}
                item["content"] = [{"type": part, "text": item["content"], **extra}]
        items.append(item)
    return items


def messages_of(items: list[dict[str, Any]], sealer: Sealer) -> list[Message]:
    """Items in order as chat messages: calls join the assistant turn before them; a
    compaction item stands for the turns it summarised; a reasoning item's text goes
    with the assistant turn after it."""
    out: list[Message] = []
    declined = mcp.declined(items)
    reasoning: str | None = None  # of the assistant turn to come
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type")
        match kind:
            case "message":
                out.append(_message(item, where))
            case "function_call":
                namespace = item.get("namespace")
                name = model_name(_text_field(item, "name", where),
                                  namespace if isinstance(namespace, str) else None)
                _join_call(out, ToolCall(_text_field(item, "call_id", where), name,
                                         str(item.get("arguments", ""))))
            case _ if kind in calls.CALLS:
                _join_call(out, calls.tool_call(item, where))
            case _ if kind in calls.OUTPUTS:
                out.append(calls.tool_output(item, where))
            case "mcp_call" | "mcp_approval_request":
                ran = mcp.call_messages(item, declined)
                if ran is not None:
                    _join_call(out, ran[0])
                    out.append(ran[1])
            case "function_call_output":
                output = item.get("output", "")
                text = output if isinstance(output, str) else calls.parts_text(output, where)
                out.append(Message("tool", text,
                                   tool_call_id=_text_field(item, "call_id", where)))
            case "compaction":
                summary = sealer.unseal(COMPACTION, item.get("encrypted_content"),
                                        param=f"{where}.encrypted_content")
                out.append(Message("assistant", SUMMARY_HEADING + str(summary)))
            case "reasoning":
                reasoning = _reasoning_text(item, where, sealer)
                continue
        if reasoning is not None and out and out[-1].role == "assistant":
            last = out[-1]
            both = f"{last.reasoning}\n{reasoning}" if last.reasoning else reasoning
            out[-1] = replace(last, reasoning=both)
        reasoning = None
    return out


def _reasoning_text(item: dict[str, Any], where: str, sealer: Sealer) -> str | None:
    """What a reasoning item says: its sealed text (a 400 if it was altered), else its
    reasoning text parts."""
    sealed = item.get("encrypted_content")
    if sealed is not None:
        return str(sealer.unseal(REASONING, sealed, param=f"{where}.encrypted_content"))
    parts = item.get("content")
    texts = [str(p.get("text", "")) for p in parts or []
             if isinstance(p, dict) and p.get("type") == "reasoning_text"]
    return "".join(texts) or None


def _join_call(out: list[Message], call: ToolCall) -> None:
    """The call joins the assistant turn just before it, or starts one."""
    if out and out[-1].role == "assistant":
        out[-1] = replace(out[-1], tool_calls=(*out[-1].tool_calls, call))
    else:
        out.append(Message("assistant", "", tool_calls=(call,)))


def _text_field(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"Missing required parameter: '{where}.{key}'.",
                             param=f"{where}.{key}", code="missing_required_parameter")
    return value


def _message(item: dict[str, Any], where: str) -> Message:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise InvalidRequest(f"Invalid value for '{where}.role': {role!r}.",
                             param=f"{where}.role", code="invalid_value")
    content = item.get("content", "")
    text = content if isinstance(content, str) else calls.parts_text(content, f"{where}.content")
    return Message(role, text)

"""The Messages request at the wire and its neutral form.

Blocks are read loosely (a `type` and the fields each kind needs) so that fields a
newer client adds, `cache_control` anywhere included, are ignored: a 400 is fatal to
Claude Code, which never retries without the field.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import Field

from parlance.core.errors import InvalidRequest
from parlance.core.messages import Message, ToolCall
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams
from parlance.core.tools import (
    ReasoningEffort,
    ReasoningRequest,
    ResponseFormat,
    ToolChoice,
    ToolSpec,
)
from parlance.dialects.anthropic import mcp
from parlance.dialects.anthropic.mcp import McpServerIn
from parlance.dialects.shared import tools as neutral_tools
from parlance.dialects.shared.wire import Probability, WireModel

MIN_THINKING_BUDGET = 1024  # Anthropic's floor for thinking.budget_tokens


class Block(WireModel):
    """A content block of any kind; which fields matter depends on `type`."""

    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    content: str | list[Block] | None = None
    is_error: bool | None = None
    thinking: str | None = None
    source: dict[str, Any] | None = None
    title: str | None = None


class MessageIn(WireModel):
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


class ToolIn(WireModel):
    """A custom tool. Anthropic's versioned server tools (`web_search_…`) carry a
    `type` of their own and are refused by name."""

    type: str | None = None
    name: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_\-]{1,128}$")]
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    strict: bool | None = None


class ToolChoiceIn(WireModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class ThinkingIn(WireModel):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = None


class OutputFormatIn(WireModel):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfigIn(WireModel):
    effort: Literal["low", "medium", "high", "max"] | None = None
    format: OutputFormatIn | None = None


class MessagesRequest(WireModel):
    model: str
    messages: list[MessageIn]
    max_tokens: Annotated[int, Field(ge=1)] | None = None  # required to generate
    system: str | list[Block] | None = None
    stream: bool = False
    stop_sequences: list[str] | None = None
    temperature: Probability | None = None
    top_p: Probability | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    tools: list[ToolIn] | None = None
    tool_choice: ToolChoiceIn | None = None
    thinking: ThinkingIn | None = None
    output_config: OutputConfigIn | None = None
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    mcp_servers: list[McpServerIn] | None = None  # the MCP connector, run server-side


def _no_vision(where: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: image blocks are not supported by this model (it has "
                          "no vision input).", param=where)


def _document_text(block: Block, where: str) -> str:
    source = block.source or {}
    if source.get("type") != "text" or not isinstance(source.get("data"), str):
        raise InvalidRequest(f"{where}: only documents with a text source are supported "
                             "(source.type 'text').", param=f"{where}.source")
    return f"{block.title}\n\n{source['data']}" if block.title else source["data"]


def _text_blocks(blocks: str | list[Block] | None, where: str) -> str:
    """Text of a system prompt or a tool result: text and text documents only."""
    if blocks is None or isinstance(blocks, str):
        return blocks or ""
    texts = []
    for j, block in enumerate(blocks):
        at = f"{where}[{j}]"
        if block.type == "text":
            texts.append(block.text or "")
        elif block.type == "document":
            texts.append(_document_text(block, at))
        elif block.type == "image":
            raise _no_vision(at)
        else:
            raise InvalidRequest(f"{at}: a block of type '{block.type}' is not allowed here.",
                                 param=f"{at}.type")
    return "\n\n".join(texts)


def _user_messages(role: Literal["user", "system"], blocks: list[Block],
                   where: str) -> list[Message]:
    """A user turn: tool results become tool messages, in order with the text."""
    out: list[Message] = []
    texts: list[str] = []
    for j, block in enumerate(blocks):
        at = f"{where}[{j}]"
        match block.type:
            case "text":
                texts.append(block.text or "")
            case "document":
                texts.append(_document_text(block, at))
            case "image":
                raise _no_vision(at)
            case "tool_result":
                if not block.tool_use_id:
                    raise InvalidRequest(f"{at}.tool_use_id is required.",
                                         param=f"{at}.tool_use_id")
                if texts:
                    out.append(Message(role, "\n\n".join(texts)))
                    texts = []
                result = _text_blocks(block.content, f"{at}.content")
                if block.is_error:  # the model must know the call failed
                    result = f"Error: {result}"
                out.append(Message("tool", result, tool_call_id=block.tool_use_id))
            case "thinking" | "redacted_thinking":
                pass  # only meaningful in assistant turns; harmless here
            case other:
                raise InvalidRequest(f"{at}: a block of type '{other}' is not allowed in a "
                                     f"{role} message.", param=f"{at}.type")
    if texts or not out:
        out.append(Message(role, "\n\n".join(texts)))
    return out


def _assistant_messages(blocks: list[Block], where: str) -> list[Message]:
    """An assistant turn. The server's own MCP calls in it (`mcp_tool_use`, then its
    `mcp_tool_result`) split it: what was said up to the call, the tool's answer, the
    rest, as the model saw them when it made the call."""
    out: list[Message] = []
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    for j, block in enumerate(blocks):
        at = f"{where}[{j}]"
        match block.type:
            case "text":
                texts.append(block.text or "")
            case "thinking":
                reasoning.append(block.thinking or "")
            case "redacted_thinking":
                pass  # encrypted by another server: nothing this model can read
            case "mcp_tool_listing":
                pass  # Anthropic's cached tool list: the servers are asked again anyway
            case "tool_use" | "mcp_tool_use":
                if not block.id or not block.name:
                    raise InvalidRequest(f"{at}: {block.type} blocks need an id and a name.",
                                         param=at)
                calls.append(ToolCall(block.id, block.name, json.dumps(block.input or {})))
            case "mcp_tool_result":
                if not block.tool_use_id:
                    raise InvalidRequest(f"{at}.tool_use_id is required.",
                                         param=f"{at}.tool_use_id")
                if texts or reasoning or calls:
                    out.append(Message("assistant", "".join(texts), tool_calls=tuple(calls),
                                       reasoning="".join(reasoning) or None))
                    texts, reasoning, calls = [], [], []
                result = _text_blocks(block.content, f"{at}.content")
                out.append(Message("tool", f"Error: {result}" if block.is_error else result,
                                   tool_call_id=block.tool_use_id))
            case other:
                raise InvalidRequest(f"{at}: a block of type '{other}' is not allowed in an "
                                     "assistant message.", param=f"{at}.type")
    if texts or reasoning or calls or not out:
        out.append(Message("assistant", "".join(texts), tool_calls=tuple(calls),
                           reasoning="".join(reasoning) or None))
    return out


def _merged(messages: list[Message]) -> list[Message]:
    """Consecutive user (or assistant) turns are one turn, as Anthropic merges them."""
    out: list[Message] = []
    for m in messages:
        last = out[-1] if out else None
        if last is not None and m.role == last.role == "user":
            out[-1] = Message("user", f"{last.content}\n\n{m.content}")
        elif (last is not None and m.role == last.role == "assistant"
              and not last.tool_calls):
            reasoning = (last.reasoning or "") + (m.reasoning or "")
            out[-1] = Message("assistant", last.content + m.content, tool_calls=m.tool_calls,
                              reasoning=reasoning or None)
        else:
            out.append(m)
    return out


# Claude Code opens `system` with a line for Anthropic's billing, e.g.
# `x-anthropic-billing-header: cc_version=2.1.197.c40; cc_entrypoint=sdk-cli; cch=…;`,
# whose digits change on every request. Anthropic's service reads it and leaves it out of
# the prompt; kept in, it would end the cached prompt prefix a dozen tokens in, and every
# agent turn would evaluate its whole prompt again. Only a line of exactly this form
# (`key=value;` pairs after the header name) is dropped.
_PAIR = r"[ \t]*[A-Za-z_][\w.-]*=[^;\n]*"
_BILLING_LINE = re.compile(rf"x-anthropic-billing-header:(?:{_PAIR};)*(?:{_PAIR})?[ \t]*")


def _without_billing_lines(system: str | list[Block]) -> str | list[Block]:
    """`system` without Claude Code's billing-header line (a block of its own, or the
    first line of a string)."""
    if isinstance(system, str):
        first, _, rest = system.partition("\n")
        return rest if _is_billing_line(first) else system
    return [b for b in system if not (b.type == "text" and _is_billing_line(b.text or ""))]


def _is_billing_line(text: str) -> bool:
    return _BILLING_LINE.fullmatch(text.strip()) is not None


def conversation(req: MessagesRequest) -> tuple[Message, ...]:
    messages: list[Message] = []
    system = _without_billing_lines(req.system) if req.system else None
    if system:
        messages.append(Message("system", _text_blocks(system, "system")))
    for i, m in enumerate(req.messages):
        where = f"messages[{i}].content"
        blocks = [Block(type="text", text=m.content)] if isinstance(m.content, str) else m.content
        if m.role == "assistant":
            messages.extend(_assistant_messages(blocks, where))
        else:
            messages.extend(_user_messages(m.role, blocks, where))
    _check_tool_results(req.messages)
    return tuple(_merged(messages))


def _check_tool_results(messages: list[MessageIn]) -> None:
    """Each `tool_result` answers a `tool_use` of the assistant turn just before it
    (consecutive messages of one role being one turn), as Anthropic requires."""
    held: set[str] = set()
    previous = None
    for i, m in enumerate(messages):
        blocks = [] if isinstance(m.content, str) else m.content
        if m.role == "assistant":
            if previous != "assistant":
                held = set()
            held.update(b.id for b in blocks if b.type == "tool_use" and b.id)
        else:
            for j, block in enumerate(blocks):
                if block.type == "tool_result" and block.tool_use_id not in held:
                    at = f"messages[{i}].content[{j}]"
                    raise InvalidRequest(
                        f"{at}: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{block.tool_use_id}. Each `tool_result` block must have a "
                        "corresponding `tool_use` block in the previous message.",
                        param=f"{at}.tool_use_id")
        previous = m.role


def tools(req: MessagesRequest) -> tuple[ToolSpec, ...]:
    specs = []
    seen: set[str] = set()
    for i, tool in enumerate(req.tools or ()):
        if tool.type not in (None, "custom"):
            raise InvalidRequest(f"tools[{i}]: server tool '{tool.type}' is not supported "
                                 "here; only custom tools with an input_schema.",
                                 param=f"tools[{i}].type")
        if tool.name in seen:
            raise InvalidRequest(f"Tool names must be unique; '{tool.name}' appears twice.",
                                 param=f"tools[{i}].name")
        seen.add(tool.name)
        if tool.input_schema is None:
            raise InvalidRequest(f"tools[{i}].input_schema is required.",
                                 param=f"tools[{i}].input_schema")
        specs.append(ToolSpec(tool.name, tool.description or "", tool.input_schema,
                              strict=bool(tool.strict), param=f"tools[{i}].input_schema"))
    return tuple(specs)


def tool_choice(choice: ToolChoiceIn | None, specs: tuple[ToolSpec, ...],
                servers: bool = False) -> ToolChoice:
    """`any` and `tool` are the neutral forced modes (grammar-guaranteed, as in Chat).
    With `servers` (MCP servers whose tools join later) the model may call tools even
    when the request itself defines none."""
    if choice is None:
        return ToolChoice("auto") if servers else neutral_tools.tool_choice(None, None, specs)
    if choice.type == "tool":
        if not choice.name:
            raise InvalidRequest("tool_choice of type 'tool' needs a name.",
                                 param="tool_choice.name")
        if servers:  # checked once the servers have listed their tools
            return ToolChoice("named", choice.name)
        return neutral_tools.tool_choice(None, choice.name, specs)
    mode: Literal["auto", "required", "none"] = (
        "required" if choice.type == "any" else choice.type)
    if servers:
        return ToolChoice(mode)
    if not specs and choice.type == "any":
        raise InvalidRequest("tool_choice of type 'any' needs tools.", param="tool_choice")
    if mode == "auto" and not specs:
        return ToolChoice("none")
    return neutral_tools.tool_choice(mode, None, specs)


_EFFORTS = {"low": ReasoningEffort.LOW, "medium": ReasoningEffort.MEDIUM,
            "high": ReasoningEffort.HIGH, "max": ReasoningEffort.HIGH}


def reasoning(req: MessagesRequest, *, counting: bool) -> ReasoningRequest | None:
    """`thinking` turns reasoning on or off; `output_config.effort` says how hard."""
    thinking = req.thinking
    if thinking is not None and thinking.type == "enabled":
        budget = thinking.budget_tokens
        if budget is None:
            raise InvalidRequest("thinking.budget_tokens is required when thinking is "
                                 "enabled.", param="thinking.budget_tokens")
        if budget < MIN_THINKING_BUDGET:
            raise InvalidRequest(f"thinking.budget_tokens: must be at least "
                                 f"{MIN_THINKING_BUDGET}.", param="thinking.budget_tokens")
        if not counting and req.max_tokens is not None and budget >= req.max_tokens:
            raise InvalidRequest("max_tokens must be greater than thinking.budget_tokens.",
                                 param="max_tokens")
    # Anthropic's models take thinking settings they cannot honour without a 400 (and a
    # 400 ends Claude Code's turn), so each is a preference: best effort.
    if thinking is not None and thinking.type == "disabled":
        return ReasoningRequest(ReasoningEffort.NONE, param="thinking", best_effort=True)
    budget = (thinking.budget_tokens if thinking is not None and thinking.type == "enabled"
              else None)  # reasoning is cut there, and the answer follows
    effort = req.output_config.effort if req.output_config else None
    if effort is not None:
        return ReasoningRequest(_EFFORTS[effort], param="output_config.effort",
                                best_effort=True, budget_tokens=budget)
    if thinking is not None:
        return ReasoningRequest(ReasoningEffort.ON, param="thinking", best_effort=True,
                                budget_tokens=budget)
    return None


def sampling(req: MessagesRequest) -> tuple[SamplingParams, frozenset[str]]:
    params = SamplingParams(
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=req.top_k or 0)
    chosen = req.model_fields_set & {"temperature", "top_p", "top_k"}
    return params, frozenset(chosen)


def response_format(req: MessagesRequest) -> ResponseFormat | None:
    """`output_config.format`: the answer is JSON valid for the schema (grammar-enforced)."""
    fmt = req.output_config.format if req.output_config else None
    if fmt is None:
        return None
    return ResponseFormat("json_schema", fmt.schema_, strict=True,
                          param="output_config.format.schema")


def generation_request(req: MessagesRequest, *, counting: bool = False) -> GenerationRequest:
    if req.max_tokens is None and not counting:
        raise InvalidRequest("max_tokens: Field required", param="max_tokens")
    if not req.messages:
        raise InvalidRequest("messages: at least one message is required.", param="messages")
    specs = tools(req)
    servers = mcp.tool_servers(req.mcp_servers)
    choice = tool_choice(req.tool_choice, specs, bool(servers))
    params, chosen = sampling(req)
    return GenerationRequest(
        model=req.model,
        prompts=(ChatInput(conversation(req)),),
        sampling=params,
        sampling_set=chosen,
        max_tokens=req.max_tokens,
        continue_final=req.messages[-1].role == "assistant",  # a prefilled answer
        stop=tuple(s for s in req.stop_sequences or () if s),
        tools=specs,
        tool_choice=choice,
        parallel_tool_calls=not (req.tool_choice and req.tool_choice.disable_parallel_tool_use),
        response_format=response_format(req),
        reasoning=reasoning(req, counting=counting),
        tool_servers=servers,
    )

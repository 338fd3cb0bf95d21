"""The `POST /api/v1/chat` request body, and how it becomes a neutral request.

LM Studio accepts text items typed `"text"` (its own examples) or `"message"` (its
schema), and `integrations` as a plugin id string, a plugin object or an
ephemeral MCP object; we take all of them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from parlance.core.errors import InvalidRequest
from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams
from parlance.core.tools import (
    ReasoningEffort,
    ReasoningRequest,
    ToolChoice,
    ToolProvider,
    ToolServerRef,
)
from parlance.dialects.shared.wire import Probability, WireModel

REASONING = {"off": ReasoningEffort.NONE, "low": ReasoningEffort.LOW,
             "medium": ReasoningEffort.MEDIUM, "high": ReasoningEffort.HIGH,
             "on": ReasoningEffort.ON}


class InputItem(WireModel):
    type: Literal["text", "message", "image"]
    content: str | None = None
    data_url: str | None = None


class PluginIntegration(WireModel):
    type: Literal["plugin"]
    id: Annotated[str, Field(min_length=1)]
    allowed_tools: list[str] | None = None


class EphemeralMcp(WireModel):
    type: Literal["ephemeral_mcp"]
    server_label: Annotated[str, Field(min_length=1)]
    server_url: Annotated[str, Field(min_length=1)]
    allowed_tools: list[str] | None = None
    headers: dict[str, str] | None = None


Integration = Annotated[PluginIntegration | EphemeralMcp, Field(discriminator="type")]


class ChatRequest(WireModel):
    model: Annotated[str, Field(min_length=1)]
    input: str | list[InputItem]
    system_prompt: str | None = None
    integrations: list[Integration] | None = None
    stream: bool = False
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Probability | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    min_p: Probability | None = None
    repeat_penalty: Annotated[float, Field(gt=0.0)] | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    reasoning: Literal["off", "low", "medium", "high", "on"] | None = None
    context_length: int | None = None  # range checked by the load plan (models/load_plan.py)
    store: bool = True
    previous_response_id: str | None = None
    # Parlance extensions (LM Studio has neither): whether the model must call one of
    # the integrations' tools first, and whether it may call several at once.
    tool_choice: Literal["auto", "required", "none"] = "auto"
    parallel_tool_calls: bool = True

    @field_validator("integrations", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        """A bare string is a plugin id."""
        if isinstance(value, list):
            return [{"type": "plugin", "id": v} if isinstance(v, str) else v for v in value]
        return value


def user_text(value: str | list[InputItem]) -> str:
    """The user's turn: a string, or its text items joined (images are refused:
    no model this server runs has vision)."""
    if isinstance(value, str):
        return value
    texts = []
    for i, item in enumerate(value):
        if item.type == "image":
            raise InvalidRequest("This model does not support image input (it has no "
                                 "vision capability); send text items only.",
                                 param=f"input[{i}]", code="unsupported_input")
        if item.content is None:
            raise InvalidRequest(f"Missing required parameter: 'input[{i}].content'.",
                                 param=f"input[{i}].content", code="missing_required_parameter")
        texts.append(item.content)
    return "\n\n".join(texts)


def tool_servers(integrations: list[Any] | None) -> tuple[ToolServerRef, ...]:
    out = []
    for i, entry in enumerate(integrations or ()):
        param = f"integrations[{i}]"
        allowed = tuple(entry.allowed_tools) if entry.allowed_tools is not None else None
        if isinstance(entry, PluginIntegration):
            out.append(ToolServerRef(ToolProvider("plugin", entry.id), None, allowed, (),
                                     param))
        else:
            out.append(ToolServerRef(ToolProvider("ephemeral_mcp", entry.server_label),
                                     entry.server_url, allowed,
                                     tuple((entry.headers or {}).items()), param))
    labels = [ref.provider.label for ref in out]
    for i, label in enumerate(labels):
        if label in labels[:i]:
            raise InvalidRequest(f"Two integrations are named '{label}'.",
                                 param=f"integrations[{i}]")
    return tuple(out)


def generation_request(body: ChatRequest, messages: list[Message]) -> GenerationRequest:
    sampling = SamplingParams(
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=body.top_k or 0,
        min_p=body.min_p or 0.0,
        repeat_penalty=body.repeat_penalty or 1.0,
    )
    return GenerationRequest(
        model=body.model,
        prompts=(ChatInput(tuple(messages)),),
        sampling=sampling,
        sampling_set=frozenset(body.model_fields_set & set(SamplingParams.__dataclass_fields__)),
        max_tokens=body.max_output_tokens,
        reasoning=(ReasoningRequest(REASONING[body.reasoning], param="reasoning")
                   if body.reasoning else None),
        tool_servers=tool_servers(body.integrations),
        tool_choice=ToolChoice(body.tool_choice),
        parallel_tool_calls=body.parallel_tool_calls,
    )


def with_system_prompt(messages: list[Message], system_prompt: str | None) -> list[Message]:
    """The thread with this system prompt: a follow-up turn's `system_prompt`
    replaces the stored one (LM Studio answers it with a 500)."""
    if system_prompt is None:
        return messages
    rest = [m for m in messages if m.role != "system"]
    return [Message("system", system_prompt), *rest]

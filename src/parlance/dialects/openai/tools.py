"""Chat Completions `tools`, `tool_choice`, `response_format` and `reasoning_effort`,
checked at the wire and turned into the neutral tool and format specs."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from parlance.core.errors import InvalidRequest
from parlance.core.tools import (
    ReasoningEffort,
    ReasoningRequest,
    ResponseFormat,
    ToolChoice,
    ToolSpec,
)
from parlance.dialects.shared.tools import tool_choice
from parlance.dialects.shared.wire import WireModel

FunctionName = Annotated[str, Field(pattern=r"^[a-zA-Z0-9_\-]{1,64}$")]


class FunctionDef(WireModel):
    name: FunctionName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ChatTool(WireModel):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(WireModel):
    name: str


class NamedToolChoice(WireModel):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(WireModel):
    name: FunctionName
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormatIn(WireModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


ToolChoiceIn = Literal["none", "auto", "required"] | NamedToolChoice
EffortIn = Literal["none", "minimal", "low", "medium", "high"]


def chat_tool_choice(choice: ToolChoiceIn | None, tools: tuple[ToolSpec, ...]) -> ToolChoice:
    if isinstance(choice, NamedToolChoice):
        return tool_choice(None, choice.function.name, tools)
    return tool_choice(choice, None, tools)


def response_format(fmt: ResponseFormatIn | None) -> ResponseFormat | None:
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return ResponseFormat("json_object")
    if fmt.json_schema is None:
        raise InvalidRequest("response_format of type 'json_schema' needs a 'json_schema' "
                             "object.", param="response_format.json_schema")
    spec = fmt.json_schema
    return ResponseFormat("json_schema", spec.schema_ or {"type": "object"}, spec.name,
                          bool(spec.strict), param="response_format.json_schema.schema")


def reasoning(effort: str | None, param: str) -> ReasoningRequest | None:
    return ReasoningRequest(ReasoningEffort(effort), param=param) if effort else None

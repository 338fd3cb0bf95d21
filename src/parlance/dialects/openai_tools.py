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
from parlance.dialects.wire import WireModel

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
    name: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_\-]{1,64}$")]
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormatIn(WireModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


ToolChoiceIn = Literal["none", "auto", "required"] | NamedToolChoice
EffortIn = Literal["none", "minimal", "low", "medium", "high"]


def tool_specs(tools: list[ChatTool] | None) -> tuple[ToolSpec, ...]:
    specs = []
    seen: set[str] = set()
    for i, tool in enumerate(tools or ()):
        f = tool.function
        if f.name in seen:
            raise InvalidRequest(f"Tool names must be unique; '{f.name}' appears twice.",
                                 param=f"tools[{i}].function.name")
        seen.add(f.name)
        specs.append(ToolSpec(
            name=f.name, description=f.description or "",
            parameters=f.parameters if f.parameters is not None else {"type": "object",
                                                                      "properties": {}},
            strict=bool(f.strict), param=f"tools[{i}].function.parameters"))
    return tuple(specs)


def tool_choice(choice: ToolChoiceIn | None, tools: tuple[ToolSpec, ...]) -> ToolChoice:
    if choice is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(choice, NamedToolChoice):
        name = choice.function.name
        if name not in {t.name for t in tools}:
            raise InvalidRequest(f"tool_choice names the function '{name}', which is not "
                                 "in tools.", param="tool_choice")
        return ToolChoice("named", name)
    if choice != "none" and not tools:
        raise InvalidRequest(f"tool_choice '{choice}' is only allowed when tools are "
                             "specified.", param="tool_choice")
    return ToolChoice(choice)


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


def reasoning(effort: EffortIn | None) -> ReasoningRequest | None:
    if effort is None:
        return None
    return ReasoningRequest(ReasoningEffort(effort), param="reasoning_effort")

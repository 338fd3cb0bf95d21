"""Chat Completions `tools`, `tool_choice`, `response_format` and `reasoning_effort`,
checked at the wire and turned into the neutral tool and format specs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, Protocol

from pydantic import Field

from parlance.core.errors import InvalidRequest
from parlance.core.tools import (
    ReasoningEffort,
    ReasoningRequest,
    ResponseFormat,
    ToolChoice,
    ToolSpec,
)
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


class Function(Protocol):
    """A function declaration, nested (Chat) or flat (Responses)."""

    name: str
    description: str | None
    parameters: dict[str, Any] | None
    strict: bool | None


def tool_specs(functions: Sequence[Function], where: str) -> tuple[ToolSpec, ...]:
    """Neutral tool specs; `where` spells the i-th function's place, e.g. `tools[{i}]`."""
    specs = []
    seen: set[str] = set()
    for i, f in enumerate(functions):
        at = where.format(i=i)
        if f.name in seen:
            raise InvalidRequest(f"Tool names must be unique; '{f.name}' appears twice.",
                                 param=f"{at}.name")
        seen.add(f.name)
        specs.append(ToolSpec(
            name=f.name, description=f.description or "",
            parameters=f.parameters if f.parameters is not None else {"type": "object",
                                                                      "properties": {}},
            strict=bool(f.strict), param=f"{at}.parameters"))
    return tuple(specs)


def tool_choice(choice: str | None, named: str | None,
                tools: tuple[ToolSpec, ...]) -> ToolChoice:
    """`choice` is none/auto/required; `named` the function a client names instead."""
    if named is not None:
        if named not in {t.name for t in tools}:
            raise InvalidRequest(f"tool_choice names the function '{named}', which is not "
                                 "in tools.", param="tool_choice")
        return ToolChoice("named", named)
    if choice is None:
        return ToolChoice("auto" if tools else "none")
    if choice != "none" and not tools:
        raise InvalidRequest(f"tool_choice '{choice}' is only allowed when tools are "
                             "specified.", param="tool_choice")
    return ToolChoice(choice)  # type: ignore[arg-type]


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

"""Function declarations and tool choices as the neutral specs, read the same way by
every dialect whose tools are functions with a JSON Schema (OpenAI Chat and Responses,
Ollama, Anthropic): unique names, a missing schema is an empty object, a named
choice must name a declared function."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from parlance.core.errors import InvalidRequest
from parlance.core.tools import ToolChoice, ToolSpec


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

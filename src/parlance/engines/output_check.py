"""The finished value checked against the client's own schema, for an engine that
constrains its output with a grammar.

The grammar enforces most of JSON Schema while the model writes (docs/structured-output.md
lists which keywords); what it cannot enforce (`uniqueItems`, `propertyNames`,
`contains`, `not`, `if`/`then`/`else`, `dependentRequired`, the `format`s it does not
know, ...) and where llguidance departs from the standard (`oneOf` taken as `anyOf`) is
checked here, on each call's arguments and on structured output once the choice
finishes. Output that breaks the schema, or is no JSON at all, never ends with a normal
finish: the generation fails instead, naming the keyword and the place (not the value),
as the upstream path fails a broken `tool_choice` promise.

Output cut on purpose is no breach: by `max_tokens` (`length`) or by the client's own
stop sequence. The checks are linear in the value (`json_schema.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from parlance.core.errors import InvalidRequest
from parlance.core.events import (
    Event,
    Finish,
    FinishReason,
    TextDelta,
    ToolCallArgs,
    ToolCallStart,
)
from parlance.core.request import GenerationRequest
from parlance.engines.json_schema import SchemaCheck, SchemaUnreadable

_ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(slots=True)
class _Choice:
    text: list[str] = field(default_factory=list)
    calls: dict[int, tuple[str, list[str]]] = field(default_factory=dict)


class OutputCheck:
    """The calls and structured output of every choice of one request."""

    def __init__(self, tools: dict[str, tuple[SchemaCheck, str]],
                 content: tuple[SchemaCheck, str] | None) -> None:
        """`tools`: each JSON tool's check and the client's parameter for it;
        `content`: structured output's check and parameter (None: no structured output)."""
        self._tools = tools
        self._content = content
        self._choices: dict[int, _Choice] = {}

    @classmethod
    def of(cls, request: GenerationRequest) -> OutputCheck | None:
        """The check of `request`, or None where nothing it generates has a schema. A
        schema this check cannot read is an `InvalidRequest` naming its parameter."""
        tools = {t.name: (_build(t.parameters, t.param), t.param)
                 for t in request.callable_tools if not t.freeform}
        fmt = request.response_format
        content = None
        if fmt is not None and not request.echo:
            schema = fmt.schema if fmt.kind == "json_schema" and fmt.schema else _ANY_OBJECT
            content = (_build(schema, fmt.param), fmt.param)
        if not tools and content is None:
            return None
        return cls(tools, content)

    def breach(self, event: Event) -> InvalidRequest | None:
        """Follow one event; the error that fails the generation, at a choice's end
        whose output breaks its schema."""
        if isinstance(event, TextDelta):
            if self._content is not None:
                self._choice(event.index).text.append(event.text)
        elif isinstance(event, ToolCallStart):
            if event.name in self._tools:
                self._choice(event.index).calls[event.call_index] = (event.name, [])
        elif isinstance(event, ToolCallArgs):
            call = self._choice(event.index).calls.get(event.call_index)
            if call is not None:
                call[1].append(event.fragment)
        elif isinstance(event, Finish):
            choice = self._choices.pop(event.index, _Choice())
            if event.reason is not FinishReason.LENGTH and event.stop_sequence is None:
                return self._finished(choice)
        return None

    def _choice(self, index: int) -> _Choice:
        choice = self._choices.get(index)
        if choice is None:
            choice = self._choices[index] = _Choice()
        return choice

    def _finished(self, choice: _Choice) -> InvalidRequest | None:
        for name, fragments in choice.calls.values():
            check, param = self._tools[name]
            problem = _problem(check, "".join(fragments) or "{}")
            if problem:
                return _unmet(f"The arguments of a call to `{name}` {problem}", param)
        text = "".join(choice.text)
        if self._content is not None and (text.strip() or not choice.calls):
            check, param = self._content
            problem = _problem(check, text)
            if problem:
                return _unmet(f"The structured output {problem}", param)
        return None


def _build(schema: dict[str, Any], param: str) -> SchemaCheck:
    try:
        return SchemaCheck(schema, formats=True)
    except SchemaUnreadable as exc:
        raise InvalidRequest(f"Invalid JSON Schema: {exc}", param=param,
                             code="invalid_schema") from None


def _problem(check: SchemaCheck, text: str) -> str | None:
    """What is wrong with `text` (never quoting it), or None."""
    try:
        value = json.loads(text)
    except ValueError:
        return "did not come out as whole JSON"
    breach = check.breach(value)
    if breach is None:
        return None
    return (f"broke the schema at {breach.where} (its `{breach.keyword}`, at "
            f"{breach.rule} in the schema)")


def _unmet(what: str, param: str) -> InvalidRequest:
    return InvalidRequest(
        f"{what}, which the grammar could not enforce while the model wrote it; the "
        "answer is refused rather than returned. Retry (a sampled answer may differ) or "
        "leave that keyword out (docs/structured-output.md lists the keywords enforced "
        "while generating).", param=param, code="schema_unmet")

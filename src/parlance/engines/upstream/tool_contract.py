"""What `tool_choice` promises, checked on an upstream's answer.

Parlance's own engine forces a call with a grammar, so a required call is there and
its arguments fit the tool's schema. An upstream server is only asked (`tool_choice:
"required"`, which llama-server turns into a grammar where the model's chat template
has a call syntax, and vLLM into structured output); one that answers anyway with
plain text, a call to a tool it was not offered, or arguments that do not validate
would have Parlance relay a broken promise. The check watches one choice's events
and names the breach; the generation then fails the request by its dialect's
contract (an error response, or the stream's error event) instead of passing it on.

A call cut by `max_tokens` (`length`) is no breach: the client sees it was cut. An
answer cut before any call began is one.

The schemas are the client's, checked on the event loop, so the check is linear in the
arguments (`engines/json_schema.py`: no backtracking `pattern`); a schema it cannot
build is refused before the request goes upstream, as the local engine refuses it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from parlance.core.errors import InvalidRequest
from parlance.core.events import (
    Event,
    Finish,
    FinishReason,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
)
from parlance.core.request import GenerationRequest
from parlance.core.tools import ToolSpec
from parlance.engines.json_schema import SchemaCheck, SchemaUnreadable


@dataclass(slots=True)
class _Call:
    name: str
    arguments: list[str] = field(default_factory=list)


class ToolContract:
    """The calls of one choice of a request whose `tool_choice` requires one."""

    def __init__(self, tools: tuple[ToolSpec, ...],
                 checks: dict[str, SchemaCheck] | None = None) -> None:
        """`checks`: each non-freeform tool's schema, built (`of` builds them once)."""
        self._tools = {t.name: t for t in tools}
        self._checks = checks if checks is not None else _checks(tools)
        self._calls: dict[int, _Call] = {}
        self._valid = 0

    @classmethod
    def of(cls, request: GenerationRequest) -> ToolContract | None:
        """The contract of `request`, or None where it promises no call. A schema the
        check cannot read is an `InvalidRequest` naming the tool's parameter."""
        if not request.tool_choice.forced or not request.tools:
            return None
        return cls(request.callable_tools)

    def fresh(self) -> ToolContract:
        """The same promise for another choice, its schemas built once."""
        return ToolContract(tuple(self._tools.values()), self._checks)

    def breach(self, events: list[Event]) -> str | None:
        """What in `events` breaks the contract (our words, never the upstream's)."""
        for event in events:
            if isinstance(event, ToolCallStart):
                if event.name not in self._tools:
                    return f"a call to `{event.name}`, a tool tool_choice does not allow"
                self._calls[event.call_index] = _Call(event.name)
            elif isinstance(event, ToolCallArgs):
                call = self._calls.get(event.call_index)
                if call is not None:
                    call.arguments.append(event.fragment)
            elif isinstance(event, ToolCallEnd):
                problem = self._check(self._calls.get(event.call_index))
                if problem:
                    return problem
            elif isinstance(event, Finish) and not (
                    self._valid or (event.reason is FinishReason.LENGTH and self._calls)):
                return "an answer without the tool call tool_choice requires"
        return None

    def _check(self, call: _Call | None) -> str | None:
        if call is None:
            return None
        tool = self._tools[call.name]
        if tool.freeform:  # raw text input: the tool's grammar is not checked here
            self._valid += 1
            return None
        text = "".join(call.arguments) or "{}"
        try:
            value = json.loads(text)
        except ValueError:
            return f"arguments for `{call.name}` that are not JSON"
        if not isinstance(value, dict):
            return f"arguments for `{call.name}` that are not a JSON object"
        problem = self._checks[call.name].problem(value)
        if problem:
            return f"arguments for `{call.name}` that break its schema ({problem})"
        self._valid += 1
        return None


def _checks(tools: tuple[ToolSpec, ...]) -> dict[str, SchemaCheck]:
    checks = {}
    for tool in tools:
        if tool.freeform:
            continue
        try:
            checks[tool.name] = SchemaCheck(tool.parameters)
        except SchemaUnreadable as exc:
            raise InvalidRequest(f"Invalid JSON Schema: {exc}", param=tool.param,
                                 code="invalid_schema") from None
    return checks

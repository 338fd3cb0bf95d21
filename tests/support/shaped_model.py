"""A fake engine that answers each request in the shape it asks for, so an SDK's every
kind of call can be checked over the server's real HTTP stack: a forced function call
(arguments from the tool's schema: each string property "Paris"), JSON for a response
schema (`{"name": "Ada", "age": 36}`, the oracle scripts' Person), thoughts then an
answer when thinking is asked for, else the default reply."""

from __future__ import annotations

import json
from typing import Any

from parlance.core.events import Finish, FinishReason, Usage
from parlance.core.prompts import PromptInfo
from parlance.core.request import GenerationRequest
from parlance.core.tools import ReasoningEffort
from parlance.engines.fake import FakeEngine, Generated, ScriptItem

PERSON = {"name": "Ada", "age": 36}
THOUGHT, ANSWER = "Rayleigh scattering favours short wavelengths.", "Blue light scatters most."


def _arguments(schema: dict[str, Any]) -> dict[str, Any]:
    return {name: "Paris" for name, prop in schema.get("properties", {}).items()
            if prop.get("type") == "string"}


class ShapedModel(FakeEngine):
    def _default_script(self, request: GenerationRequest, prompts: tuple[PromptInfo, ...],
                        limit: int) -> list[ScriptItem]:
        usage = Usage(prompts[0].n_tokens, 12, reasoning_tokens=0)
        if request.tool_choice.forced and request.callable_tools:
            tool = request.callable_tools[0]
            call = {"name": tool.name, "arguments": _arguments(tool.parameters)}
            return [Generated(f"<tool_call>\n{json.dumps(call)}\n</tool_call>"),
                    Finish(FinishReason.TOOL_CALLS), usage]
        if request.response_format is not None:
            return [Generated(json.dumps(PERSON)), Finish(FinishReason.STOP), usage]
        reasoning = request.reasoning
        if reasoning is not None and reasoning.effort is not ReasoningEffort.NONE:
            return [Generated(f"<think>{THOUGHT}</think>{ANSWER}"), Finish(FinishReason.STOP),
                    Usage(prompts[0].n_tokens, 12, reasoning_tokens=7)]
        return super()._default_script(request, prompts, limit)

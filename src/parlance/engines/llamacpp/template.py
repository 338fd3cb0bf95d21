"""Renders the model's own GGUF chat template with sandboxed Jinja.

Templates are written for Hugging Face transformers, so we provide the same
globals they rely on (`raise_exception`, `strftime_now`, a `tojson` that keeps
non-ASCII text) and the OpenAI-shaped message dicts they expect.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from parlance.core.errors import InvalidRequest
from parlance.core.messages import Message, ToolCall
from parlance.engines.chat_messages import FREEFORM_FIELD, openai_message
from parlance.engines.parsing.syntax import reasoning_for_template, syntax_for_template

# Used when a GGUF carries no template: plain ChatML, understood by most small models.
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _raise_exception(message: str) -> None:
    raise InvalidRequest(f"The chat template rejected the conversation: {message}",
                         param="messages")


def _tojson(value: Any, indent: int | None = None, **_: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _arguments(call: ToolCall) -> Any:
    """Templates write call arguments with `tojson`, so they expect an object; a
    freeform tool's call is a function of one string (the tool's description says how
    the model calls it)."""
    if call.freeform:
        return {FREEFORM_FIELD: call.arguments}
    try:
        return json.loads(call.arguments)
    except json.JSONDecodeError:
        return call.arguments


class ChatTemplate:
    """A model's chat template and what it can do: whether it renders `tools`, which
    call syntax it teaches, its reasoning markers and the switch that turns
    thinking on and off (`enable_thinking`, or `reasoning_effort` levels)."""

    def __init__(self, source: str | None, *, bos_token: str, eos_token: str) -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        self.source = source or CHATML
        self._template = env.from_string(self.source)
        self._bos = bos_token
        self._eos = eos_token
        self.supports_tools = "tools" in self.source
        self.tool_syntax = syntax_for_template(self.source)
        self.reasoning = reasoning_for_template(self.source)
        self.thinking_switch = next(
            (name for name in ("enable_thinking", "reasoning_effort") if name in self.source), None)

    def render(self, messages: Sequence[Message], **extra: Any) -> str:
        try:
            return self._template.render(
                messages=[openai_message(m, _arguments) for m in messages],
                add_generation_prompt=True,
                bos_token=self._bos,
                eos_token=self._eos,
                **extra,
            )
        except InvalidRequest:
            raise
        except TemplateError as exc:
            raise InvalidRequest(f"The chat template could not render the messages: {exc}",
                                 param="messages") from exc

"""Renders the model's own GGUF chat template with sandboxed Jinja.

Templates are written for Hugging Face transformers, so we provide the same
globals they rely on (`raise_exception`, `strftime_now`, a `tojson` that keeps
non-ASCII text) and the OpenAI-shaped message dicts they expect.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

from parlance.core.errors import InvalidRequest
from parlance.core.messages import Message, ToolCall
from parlance.engines.chat_messages import FREEFORM_FIELD, openai_message
from parlance.engines.parsing.formats import format_for_template, format_named
from parlance.engines.parsing.spelling import spell_calls
from parlance.engines.parsing.syntax import HERMES, ToolSyntax, reasoning_for_template

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


def _arguments_text(call: ToolCall) -> str:
    """For templates that write arguments as they are (Functionary v3.2): JSON text."""
    if call.freeform:
        return json.dumps({FREEFORM_FIELD: call.arguments}, ensure_ascii=False)
    return call.arguments


def _short_id(call_id: str) -> str:
    """A call id as Mistral's templates demand it (nine letters or digits), the same
    for a call and its result."""
    if len(call_id) == 9 and call_id.isascii() and call_id.isalnum():
        return call_id
    return hashlib.sha256(call_id.encode()).hexdigest()[:9]


def _with_calls_in_content(message: Message, syntax: ToolSyntax) -> Message:
    """An assistant turn's calls written after its text in the family's markup, for a
    template that renders no `tool_calls` (LFM2's, as llama.cpp's handler writes them)."""
    if not message.tool_calls:
        return message
    calls = spell_calls(syntax, [(c.name, _arguments(c)) for c in message.tool_calls])
    return replace(message, content=message.content + calls, tool_calls=())


class _TemplateEnvironment(ImmutableSandboxedEnvironment):
    """Hugging Face's sandbox, plus `append`, `pop` and `extend` on lists, which
    templates use to build lists of their own (Kimi K2's queue of call ids); llama.cpp's
    renderer allows them too. Every render gets its own copies of its inputs, so no
    change outlives the render."""

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if isinstance(obj, list) and attr in ("append", "pop", "extend"):
            return SandboxedEnvironment.is_safe_attribute(self, obj, attr, value)
        return super().is_safe_attribute(obj, attr, value)


# What a template is asked to render once at load, to learn how it wants a conversation
# with calls: arguments as an object or as text, and call ids as sent or Mistral's.
_PROBE_ARGUMENT = "parlance_probe_value"
_PROBE = (Message("user", "?"),
          Message("assistant", "", tool_calls=(
              ToolCall("call_parlance_probe", "probe", json.dumps({"q": _PROBE_ARGUMENT})),)),
          Message("tool", "ok", tool_call_id="call_parlance_probe"))


class ChatTemplate:
    """A model's chat template and what it can do: whether it renders `tools`, which
    call syntax it teaches, its reasoning markers and the switch that turns
    thinking on and off (`enable_thinking`, or `reasoning_effort` levels)."""

    def __init__(self, source: str | None, *, bos_token: str, eos_token: str,
                 chat_format: str | None = None) -> None:
        env = _TemplateEnvironment(trim_blocks=True, lstrip_blocks=True,
                                   extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        self.source = source or CHATML
        self._template = env.from_string(self.source)
        self._bos = bos_token
        self._eos = eos_token
        self.supports_tools = "tools" in self.source
        # the family's format: detected from the template, or named by an override
        self.format = (format_named(chat_format) if chat_format
                       else format_for_template(self.source))
        self.tool_syntax = self.format.syntax
        self.reasoning = self.format.reasoning_markers(reasoning_for_template(self.source))
        self.thinking_switch = "flags" if self.format.thinking_flags else next(
            (name for name in ("enable_thinking", "reasoning_effort", "thinking")
             if name in self.source and (name != "thinking" or self.format.thinking_switch
                                         == "thinking")), None)
        self._arguments: Callable[[ToolCall], Any] = _arguments
        self._short_ids = False
        self._none_content = False  # an assistant turn of calls alone goes with content None
        self._thinking_chunks = False  # reasoning goes as a `thinking` chunk (Ministral)
        # a template that takes no tools may still write earlier calls in the family's
        # markup (DeepSeek's): the tools are then described by Parlance, calls go native
        self.renders_calls = False
        if self.supports_tools:
            self._learn_call_shape()
        elif self.format.native_tools:
            self.renders_calls = self._learn_call_shape()
        self._thinking_chunks = "thinking" in self.source and self._takes_thinking_chunks()

    @property
    def call_syntax(self) -> ToolSyntax:
        """The syntax calls are written, parsed and forced in: the family's where the
        template takes tools or writes calls its way, else the built-in prompt's (Hermes)."""
        return self.tool_syntax if self.supports_tools or self.renders_calls else HERMES

    def _learn_call_shape(self) -> bool:
        """Render a call and its result the ways templates take them (as llama.cpp's
        renderer probes a template's capabilities) and keep the first that renders with
        the call's argument in it; none: the default, whose errors name the request.
        Whether one rendered it."""
        shapes = [(_arguments, False, False), (_arguments_text, False, False),
                  (_arguments, True, False), (_arguments_text, True, False),
                  (_arguments, False, True), (_arguments_text, False, True)]
        if not self.supports_tools:  # DeepSeek's: a turn of calls alone has no text at all
            shapes = shapes[4:] + shapes[:4]
        for arguments, short_ids, none_content in shapes:
            self._arguments, self._short_ids = arguments, short_ids
            self._none_content = none_content
            try:
                if _PROBE_ARGUMENT in self.render(_PROBE):
                    return True
            except InvalidRequest:
                continue
        self._arguments, self._short_ids, self._none_content = _arguments, False, False
        return False

    def _takes_thinking_chunks(self) -> bool:
        """Whether the template reads an assistant's reasoning as a `thinking` content
        chunk (Mistral's reasoning templates), learnt by rendering one."""
        turn = {"role": "assistant", "content": [
            {"type": "thinking", "thinking": _PROBE_ARGUMENT}, {"type": "text", "text": "ok"}]}
        try:
            text = self._template.render(messages=[{"role": "user", "content": "?"}, turn],
                                         add_generation_prompt=False, bos_token=self._bos,
                                         eos_token=self._eos)
        except Exception:  # noqa: BLE001  # any refusal means: not this shape
            return False
        return _PROBE_ARGUMENT in text

    def _message(self, message: Message, in_progress: bool = False) -> dict[str, Any]:
        """`in_progress`: the message is in the turn after the last user message."""
        out = openai_message(message, self._arguments)
        if message.reasoning:  # harmony's template reads it as `thinking`
            out["thinking"] = message.reasoning
            if self._thinking_chunks and in_progress and message.role == "assistant":
                chunks = [{"type": "thinking", "thinking": message.reasoning}]
                out["content"] = chunks + ([{"type": "text", "text": message.content}]
                                           if message.content else [])
        if self._none_content and message.tool_calls and not message.content:
            out["content"] = None
        if self._short_ids:
            for call in out.get("tool_calls", ()):
                call["id"] = _short_id(call["id"])
            if message.tool_call_id is not None:
                out["tool_call_id"] = _short_id(message.tool_call_id)
        return out

    def _history(self, messages: Sequence[Message]) -> list[Message]:
        """The messages as the family's template takes them: a turn with several calls as
        one message per call where it writes one a message (its reasoning and text with
        the first)."""
        if self.format.calls_in_content:
            return [_with_calls_in_content(m, self.format.syntax) for m in messages]
        if not self.format.call_per_message:
            return list(messages)
        out: list[Message] = []
        for m in messages:
            if len(m.tool_calls) < 2:
                out.append(m)
                continue
            out.append(replace(m, tool_calls=m.tool_calls[:1]))
            out += [replace(m, content="", reasoning=None, tool_calls=(call,))
                    for call in m.tool_calls[1:]]
        return out

    def render(self, messages: Sequence[Message], **extra: Any) -> str:
        history = self._history(messages)
        last_user = max((i for i, m in enumerate(history) if m.role == "user"), default=-1)
        try:
            return self._template.render(
                messages=[self._message(m, i > last_user) for i, m in enumerate(history)],
                add_generation_prompt=True,
                bos_token=self._bos,
                eos_token=self._eos,
                **copy.deepcopy(extra),
            )
        except InvalidRequest:
            raise
        except (TemplateError, TypeError, ValueError, KeyError, AttributeError,
                IndexError, ArithmeticError, RecursionError) as exc:
            # a template is a program: whatever it raises on this conversation is the
            # conversation's refusal, never the server's failure
            raise InvalidRequest(f"The chat template could not render the messages: {exc}",
                                 param="messages") from exc

"""The `/api/chat` and `/api/generate` bodies at the wire (Ollama's `api/types.go`) and
their neutral form.

Ollama's defaults apply where a client sets nothing: streaming, `think` as the model
has it, sampling at temperature 0.8, top_k 40, top_p 0.9 (a model preset's sampling
comes before those, as a Modelfile's parameters do), `num_predict` a ceiling cut to
the context, the oldest turns dropped when a chat overflows the context (`truncate`).
Options a llama.cpp server has no use for (`num_gpu`, `num_thread`, `use_mmap`, ...)
are accepted and ignored, as Ollama ignores options it does not know.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from parlance.core.errors import InvalidRequest
from parlance.core.messages import Message, ToolCall
from parlance.core.request import SamplingParams
from parlance.core.tools import ReasoningEffort, ReasoningRequest, ResponseFormat, ToolSpec
from parlance.dialects.shared import tools as neutral_tools
from parlance.dialects.shared.wire import Probability, WireModel

# Ollama's DefaultOptions (api/types.go) for the sampling fields a client leaves unset.
OLLAMA_SAMPLING = {"temperature": 0.8, "top_k": 40, "top_p": 0.9}
# The sampling fields `options` may set, by their Ollama names.
_SAMPLING_OPTIONS = {"temperature", "top_k", "top_p", "min_p", "seed", "repeat_penalty",
                     "presence_penalty", "frequency_penalty", "repeat_last_n"}

_THINK = {"low": ReasoningEffort.LOW, "medium": ReasoningEffort.MEDIUM,
          "high": ReasoningEffort.HIGH, "max": ReasoningEffort.HIGH}

# Go's time.ParseDuration: a sequence of decimal numbers, each with a unit.
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
                 "m": 60.0, "h": 3600.0}


class Options(WireModel):
    """`options`: Modelfile parameters. Ollama's ranges are loose (it passes values on
    to llama.cpp), so only what no sampler could take is refused."""

    num_ctx: Annotated[int, Field(ge=1)] | None = None
    num_predict: int | None = None  # -1: no limit, -2: fill the context (both: a ceiling)
    num_keep: int | None = None  # tokens kept on a context shift; no shifting here
    seed: int | None = None  # negative: a random seed
    temperature: Annotated[float, Field(ge=0.0)] | None = None
    top_k: int | None = None  # 0 or less: off
    top_p: Probability | None = None
    min_p: Probability | None = None
    typical_p: float | None = None  # accepted; not among the samplers here
    repeat_penalty: Annotated[float, Field(gt=0.0)] | None = None
    repeat_last_n: Annotated[int, Field(ge=-1)] | None = None  # 0: off, -1: the context
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop: list[str] | None = None

    def sampling(self) -> tuple[SamplingParams, frozenset[str]]:
        """The sampling parameters, and which of them the client set."""
        chosen = {name for name in self.model_fields_set & _SAMPLING_OPTIONS
                  if getattr(self, name) is not None}
        window: dict[str, Any] = (  # unset: the engine's default window
            {} if self.repeat_last_n is None else {"repeat_last_n": self.repeat_last_n})
        params = SamplingParams(
            temperature=self._or("temperature"),
            top_k=max(0, self._or("top_k")),
            top_p=self._or("top_p"),
            min_p=self.min_p or 0.0,
            seed=self.seed if self.seed is not None and self.seed >= 0 else None,
            repeat_penalty=self.repeat_penalty or 1.0,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            **window,
        )
        if self.seed is not None and self.seed < 0:
            chosen.discard("seed")
        return params, frozenset(chosen)

    def _or(self, name: str) -> Any:
        value = getattr(self, name)
        return OLLAMA_SAMPLING[name] if value is None else value

    def max_tokens(self) -> int | None:
        """`num_predict`: a positive count; 0 or negative is no limit (the context's)."""
        return self.num_predict if self.num_predict is not None and self.num_predict > 0 else None


class FunctionCallIn(WireModel):
    """A call in an assistant turn sent back: arguments are an object (Ollama's), or
    the JSON text of one (what OpenAI-minded clients send)."""

    index: int | None = None
    name: Annotated[str, Field(min_length=1)]
    arguments: dict[str, Any] | str | None = None


class ToolCallIn(WireModel):
    id: str | None = None
    function: FunctionCallIn


class MessageIn(WireModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None

    @field_validator("role", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        """Go's Message.UnmarshalJSON lowercases the role."""
        return value.lower() if isinstance(value, str) else value


class ToolFunctionIn(WireModel):
    name: Annotated[str, Field(min_length=1)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolIn(WireModel):
    type: Literal["function"] = "function"
    function: ToolFunctionIn


Think = bool | Literal["low", "medium", "high", "max"]


class CommonRequest(WireModel):
    """What `/api/chat` and `/api/generate` share."""

    model: Annotated[str, Field(min_length=1)]
    stream: bool | None = None  # None: streaming, Ollama's default
    format: str | dict[str, Any] | None = None
    options: Options | None = None
    keep_alive: float | int | str | None = None
    think: Think | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=20)] = 0
    truncate: bool | None = None
    shift: bool | None = None  # context shifting; never done here (a full context stops)

    @property
    def opts(self) -> Options:
        return self.options or Options()


class ChatRequest(CommonRequest):
    messages: list[MessageIn] | None = None
    tools: list[ToolIn] | None = None


class GenerateRequest(CommonRequest):
    prompt: str | None = None
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    raw: bool = False
    images: list[str] | None = None
    context: list[int] | None = None


# -- the parts of a request ------------------------------------------------------


def keep_alive_seconds(value: float | int | str | None) -> float | None:
    """`keep_alive` in seconds (None: not given; inf: forever). A number counts seconds,
    a string is a Go duration ("5m", "1h30m", "0"); a negative value keeps the model
    loaded forever."""
    if value is None:
        return None
    seconds = _duration(value) if isinstance(value, str) else float(value)
    if math.isnan(seconds):
        raise _bad_keep_alive(value)
    return math.inf if seconds < 0 else seconds


def _duration(text: str) -> float:
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    body = body.lstrip("+-")
    if body == "0":
        return 0.0
    total, at = 0.0, 0
    for match in _DURATION_PART.finditer(body):
        if match.start() != at:
            raise _bad_keep_alive(text)
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        at = match.end()
    if at != len(body) or not body:
        raise _bad_keep_alive(text)
    return sign * total


def _bad_keep_alive(value: object) -> InvalidRequest:
    return InvalidRequest(f"time: invalid duration {json.dumps(value)} (keep_alive: a number "
                          "of seconds or a duration such as \"5m\" or \"1h30m\").",
                          param="keep_alive")


def reasoning(think: Think | None) -> ReasoningRequest | None:
    """`think`: true or a level asks for reasoning (a model that cannot reason is a 400,
    as in Ollama: "does not support thinking"); false turns it off where it can be."""
    if think is None:
        return None
    if think is False:
        return ReasoningRequest(ReasoningEffort.NONE, param="think", best_effort=True)
    if think is True:
        return ReasoningRequest(ReasoningEffort.ON, param="think")
    return ReasoningRequest(_THINK[think], param="think")


def response_format(value: str | dict[str, Any] | None) -> ResponseFormat | None:
    """`format`: "json" (any JSON object) or a JSON Schema, enforced by grammar."""
    if value is None or value == "":
        return None
    if value == "json":
        return ResponseFormat("json_object", param="format")
    if isinstance(value, dict):
        return ResponseFormat("json_schema", value, strict=True, param="format")
    raise InvalidRequest(f'invalid format: expected "json" or a valid JSON schema, got '
                         f'{json.dumps(value)}.', param="format")


def tools(entries: list[ToolIn] | None) -> tuple[ToolSpec, ...]:
    return neutral_tools.tool_specs([t.function for t in entries or ()], "tools[{i}].function")


def no_images(images: list[str] | None, param: str) -> None:
    if images:
        raise InvalidRequest("This model does not support image input (it has no vision "
                             "capability); send text only.", param=param,
                             code="unsupported_input")


def _arguments(value: dict[str, Any] | str | None, param: str) -> str:
    if value is None:
        return "{}"
    if isinstance(value, str):
        try:
            parsed = json.loads(value or "{}")
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise InvalidRequest("Tool call arguments must be a JSON object.", param=param)
        return json.dumps(parsed, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


def messages(entries: list[MessageIn]) -> tuple[Message, ...]:
    """The conversation. Calls sent back without an id get one, and each tool result
    is matched to the call it answers (its `tool_call_id`, or the earliest unanswered
    call of that `tool_name`), so templates that pair them by id can."""
    out: list[Message] = []
    unanswered: list[ToolCall] = []
    for i, m in enumerate(entries):
        at = f"messages[{i}]"
        no_images(m.images, f"{at}.images")
        content = m.content or ""
        if m.role == "assistant":
            calls = tuple(
                ToolCall(c.id or f"call_{i}_{j}", c.function.name,
                         _arguments(c.function.arguments, f"{at}.tool_calls[{j}].function"
                                    ".arguments"))
                for j, c in enumerate(m.tool_calls or ()))
            unanswered = list(calls)
            out.append(Message("assistant", content, tool_calls=calls,
                               reasoning=m.thinking or None))
        elif m.role == "tool":
            answered = _answered(unanswered, m.tool_call_id, m.tool_name)
            out.append(Message("tool", content, name=m.tool_name or (
                answered.name if answered else None),
                tool_call_id=m.tool_call_id or (answered.id if answered else None)))
        else:
            out.append(Message(m.role, content))
    return tuple(out)


def _answered(unanswered: list[ToolCall], call_id: str | None,
              name: str | None) -> ToolCall | None:
    """The call a tool message answers (taken off the unanswered list)."""
    for call in unanswered:
        if (call.id == call_id) if call_id else (name is None or call.name == name):
            unanswered.remove(call)
            return call
    return None


def shorter(thread: tuple[Message, ...]) -> tuple[Message, ...] | None:
    """The conversation without its oldest exchange (a user turn and what answers it, up
    to the next user turn), system messages and the last message kept, as Ollama
    truncates a chat that overflows the context; None when nothing more may go. Whole
    exchanges go, so the roles still alternate as strict templates require."""
    last = len(thread) - 1
    start = next((i for i, m in enumerate(thread[:last]) if m.role != "system"), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, last) if thread[i].role == "user"), last)
    kept = tuple(m for m in thread[start:end] if m.role == "system")
    return thread[:start] + kept + thread[end:]

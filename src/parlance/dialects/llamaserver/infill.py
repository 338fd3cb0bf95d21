"""llama-server's `POST /infill`, what llama.vim and llama.vscode call: `input_prefix`
and `input_suffix` (both required), `input_extra` (`[{filename?, text}]`, other files
as context), `prompt` (the text from the prefix's end to the cursor), `n_predict`,
`stop`, `stream`, `n_cmpl` (that many choices: an array answers), the sampling
fields, `response_fields` (only those fields, a path `timings/prompt_n` flattened to
that literal key, as llama.vim reads them). The editor's latency knobs
(`t_max_prompt_ms`, `t_max_predict_ms`, `n_indent`, `cache_prompt`, `id_slot`,
`samplers`) are accepted; prompts are always cached here.

The answer is llama-server's `/completion` object (`content`, `stop`, `stop_type`,
`tokens_predicted`, `tokens_evaluated`, `tokens_cached`, `timings`, …); a stream is
SSE `data:` events of `{index, content, stop: false}` and, per choice, a last one with
`stop: true` and the counts (no `[DONE]`). A model without FIM tokens is a 400 in
llama-server's envelope.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from parlance.core.accumulate import ChoiceResult, Completion
from parlance.core.errors import InvalidRequest, ParlanceError
from parlance.core.events import Event, Finish, FinishReason, TextDelta, Usage
from parlance.core.request import ExtraFile, GenerationRequest, SamplingParams, TextInput
from parlance.dialects.base import Call, CallFacts, ErrorResponse, Frame, Framing, Incoming
from parlance.dialects.shared.llama_server import render_error
from parlance.dialects.shared.wire import WireModel, parse_body

MAX_EXTRA = 256  # files of context per request


class ExtraChunk(WireModel):
    text: str
    filename: str = "tmp"


class InfillBody(WireModel):
    model: str | None = None
    input_prefix: str
    input_suffix: str
    input_extra: Annotated[list[ExtraChunk], Field(max_length=MAX_EXTRA)] = []
    prompt: str = ""
    n_predict: Annotated[int, Field(ge=-1)] = -1
    stop: list[str] = []
    stream: bool = False
    n_cmpl: Annotated[int, Field(ge=1, le=16)] = 1
    temperature: Annotated[float, Field(ge=0.0)] | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    top_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    seed: int | None = None
    response_fields: list[str] = []


@dataclass(frozen=True, slots=True)
class InfillCall(Call):
    response_fields: tuple[str, ...] = field(default=(), kw_only=True)
    n_cmpl: int = field(default=1, kw_only=True)


def _sampling(body: InfillBody) -> tuple[SamplingParams, frozenset[str]]:
    given = {name: getattr(body, name) for name in ("temperature", "top_k", "top_p", "min_p",
                                                     "seed") if getattr(body, name) is not None}
    return SamplingParams(**given), frozenset(given)


def _stop_type(choice: ChoiceResult) -> tuple[str, str]:
    if choice.stop_sequence is not None:
        return "word", choice.stop_sequence
    if choice.finish_reason is FinishReason.LENGTH:
        return "limit", ""
    return "eos", ""


def _timings(usage: Usage | None, completion_tokens: int) -> dict[str, Any]:
    prompt_ms = 1000 * (usage.first_token_seconds or 0.0) if usage else 0.0
    predicted_ms = 1000 * (usage.decode_seconds or 0.0) if usage else 0.0
    prompt_n = usage.prompt_tokens - usage.cached_tokens if usage else 0
    steps = completion_tokens - 1  # (decode time runs from the first token on)
    return {"cache_n": usage.cached_tokens if usage else 0, "prompt_n": prompt_n,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n > 0 else 0.0,
            "prompt_per_second": 1000 * prompt_n / prompt_ms if prompt_ms else 0.0,
            "predicted_n": completion_tokens, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / steps if steps > 0 else 0.0,
            "predicted_per_second": (1000 * completion_tokens / predicted_ms
                                     if predicted_ms else 0.0)}


def _choice_object(call: InfillCall, served: CallFacts, choice: ChoiceResult,
                   usage: Usage | None, content: str) -> dict[str, Any]:
    stop_type, word = _stop_type(choice)
    generated = len(choice.token_ids or ()) or (usage.completion_tokens if usage and
                                                call.n_cmpl == 1 else 0)
    prompt = served.prompts[0].n_tokens if served.prompts else 0
    whole = {"index": choice.index, "content": content, "tokens": [], "id_slot": 0,
             "stop": True, "model": served.model, "tokens_predicted": generated,
             "tokens_evaluated": prompt, "has_new_line": "\n" in choice.text,
             "truncated": False, "stop_type": stop_type, "stopping_word": word,
             "tokens_cached": usage.cached_tokens if usage else 0,
             "timings": _timings(usage, generated)}
    return _only(whole, call.response_fields)


def _only(body: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """The fields asked for, a nested one under its path as a literal key."""
    if not fields:
        return body
    out = {}
    for path in fields:
        value: Any = body
        for key in path.split("/"):
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            out[path] = value
    return out


class InfillEncoder:
    def __init__(self, call: InfillCall, served: CallFacts) -> None:
        self.call, self.served = call, served
        self.choices: dict[int, ChoiceResult] = {}

    def open(self) -> list[Frame]:
        return []

    def feed(self, event: Event) -> list[Frame]:
        if isinstance(event, TextDelta):
            self._choice(event.index).text += event.text
            return [Frame({"index": event.index, "content": event.text, "stop": False})]
        if isinstance(event, Finish):
            choice = self._choice(event.index)
            choice.finish_reason, choice.stop_sequence = event.reason, event.stop_sequence
            choice.token_ids = event.token_ids
        if isinstance(event, Usage):
            return [Frame(_choice_object(self.call, self.served, c, event, ""))
                    for _, c in sorted(self.choices.items())]
        return []

    def close(self) -> list[Frame]:
        return []

    def fail(self, error: ParlanceError) -> list[Frame]:
        return [Frame(render_error(error).body)]

    def _choice(self, index: int) -> ChoiceResult:
        return self.choices.setdefault(index, ChoiceResult(index))


class Infill:
    framing: Framing = "sse"
    body_model = InfillBody

    def parse(self, incoming: Incoming) -> InfillCall:
        body = incoming.body
        if isinstance(body, dict):
            for name in ("input_prefix", "input_suffix"):
                if name not in body:
                    raise InvalidRequest(f'"{name}" is required', param=name)
        req = parse_body(self.body_model, body)
        prompt = TextInput(text=req.input_prefix, suffix=req.input_suffix, infill=True,
                           cursor=req.prompt,
                           extra=tuple(ExtraFile(c.text, c.filename) for c in req.input_extra))
        sampling, given = _sampling(req)
        request = GenerationRequest(
            model=req.model or "", prompts=(prompt,), sampling=sampling, sampling_set=given,
            max_tokens=None if req.n_predict < 0 else req.n_predict, stop=tuple(req.stop),
            n=req.n_cmpl)
        return InfillCall(request, req.stream, response_fields=tuple(req.response_fields),
                          n_cmpl=req.n_cmpl)

    def encoder(self, call: InfillCall, served: CallFacts) -> InfillEncoder:
        return InfillEncoder(call, served)

    def render(self, call: InfillCall, served: CallFacts,
               completion: Completion) -> dict[str, Any] | list[dict[str, Any]]:
        objects = [_choice_object(call, served, c, completion.usage, c.text)
                   for _, c in sorted(completion.choices.items())]
        return objects[0] if call.n_cmpl == 1 and objects else objects

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return render_error(error)

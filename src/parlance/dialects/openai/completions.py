"""OpenAI legacy Completions (`POST /v1/completions`).

`prompt` may be a string, a list of strings (one choice each), a list of token
ids, or a list of such lists. Per-chunk logprobs cover that chunk's tokens;
`text_offset` counts characters from the start of the prompt, so the first
generated offset equals the prompt length even without `echo` (as OpenAI does).
Each choice ends with its own chunk carrying `finish_reason` and empty text.
With `n` > 1 every prompt gets n choices: choice `index` = prompt * n + k.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from parlance.core.accumulate import ChoiceResult, Completion
from parlance.core.errors import InvalidRequest, ParlanceError
from parlance.core.events import Finish, TextDelta, TokenLogprob
from parlance.core.request import GenerationRequest, TextInput
from parlance.dialects.base import Call, CallFacts, ErrorResponse, Frame, Framing, Incoming
from parlance.dialects.openai.common import (
    ChunkEncoder,
    SamplingFields,
    new_id,
    now,
    token_spelling,
    usage_object,
)
from parlance.dialects.openai.errors import render_error
from parlance.dialects.shared.wire import parse_body

TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | TokenIds | list[TokenIds]
    max_tokens: Annotated[int, Field(ge=0)] | None = 16
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: Annotated[int, Field(ge=1)] | None = None


def _prompts(prompt: str | list[Any], suffix: str | None) -> tuple[TextInput, ...]:
    if isinstance(prompt, str):
        return (TextInput(text=prompt, suffix=suffix),)
    if not prompt:
        raise InvalidRequest("The prompt list is empty.", param="prompt")
    if all(isinstance(p, int) for p in prompt):
        return (TextInput(token_ids=tuple(prompt), suffix=None),)
    if all(isinstance(p, str) for p in prompt):
        return tuple(TextInput(text=p, suffix=suffix) for p in prompt)
    return tuple(TextInput(token_ids=tuple(p)) for p in prompt)


@dataclass(frozen=True, slots=True)
class CompletionCall(Call):
    id: str
    created: int
    include_usage: bool


class _Offsets:
    """Running character offsets per choice, for `text_offset` (choice i answers prompt i // n)."""

    def __init__(self, served: CallFacts, request: GenerationRequest) -> None:
        self._start = [0 if request.echo else len(p.text) for p in served.prompts]
        self._n = request.n
        self._next: dict[int, int] = {}

    def take(self, index: int, tokens: tuple[TokenLogprob, ...] | list[TokenLogprob]) -> list[int]:
        offsets = []
        position = self._next.get(index)
        if position is None:
            position = self._start[index // self._n] if index // self._n < len(self._start) else 0
        for token in tokens:
            offsets.append(position)
            position += len(token.token)
        self._next[index] = position
        return offsets


def _logprobs_object(tokens: tuple[TokenLogprob, ...] | list[TokenLogprob],
                     offsets: list[int]) -> dict[str, Any]:
    return {
        "tokens": [t.token for t in tokens],
        "token_logprobs": [t.logprob for t in tokens],
        # Nothing predicts the first token of an echoed prompt: null, as OpenAI sends.
        "top_logprobs": [{token_spelling(a): a.logprob for a in t.top}
                         if t.logprob is not None else None
                         for t in tokens],
        "text_offset": offsets,
    }


class CompletionEncoder(ChunkEncoder):
    object_type = "text_completion"

    def __init__(self, call: CompletionCall, served: CallFacts) -> None:
        super().__init__(id=call.id, created=call.created, model=served.model,
                         include_usage=call.include_usage)
        self._offsets = _Offsets(served, call.request)

    def on_text(self, delta: TextDelta) -> list[Frame]:
        lp = None
        if delta.logprobs is not None:
            lp = _logprobs_object(delta.logprobs, self._offsets.take(delta.index, delta.logprobs))
        choice = {"text": delta.text, "index": delta.index, "logprobs": lp,
                  "finish_reason": None}
        return [self.chunk([choice])]

    def on_finish(self, finish: Finish) -> list[Frame]:
        choice = {"text": "", "index": finish.index, "logprobs": None,
                  "finish_reason": finish.reason.value}
        return [self.chunk([choice])]


class OpenAICompletions:
    framing: Framing = "sse"
    body_model = CompletionRequest

    def parse(self, incoming: Incoming) -> CompletionCall:
        req = parse_body(self.body_model, incoming.body)
        if req.best_of is not None and req.best_of > 1:
            raise InvalidRequest("best_of > 1 is not supported.", param="best_of",
                                 code="unsupported_value")
        if req.max_tokens == 0 and not req.echo:
            raise InvalidRequest("max_tokens must be at least 1 unless echo is set.",
                                 param="max_tokens")
        request = GenerationRequest(
            model=req.model or "",
            prompts=_prompts(req.prompt, req.suffix),
            sampling=req.sampling(),
            sampling_set=req.sampling_set(),
            max_tokens=req.max_tokens,
            stop=req.stops(),
            logprobs=req.logprobs,
            echo=req.echo,
            n=req.n,
        )
        return CompletionCall(request, req.stream, new_id("cmpl-"), now(), req.include_usage())

    def encoder(self, call: CompletionCall, served: CallFacts) -> CompletionEncoder:
        return CompletionEncoder(call, served)

    def render(self, call: CompletionCall, served: CallFacts,
               completion: Completion) -> dict[str, Any]:
        offsets = _Offsets(served, call.request)
        return {
            "id": call.id, "object": "text_completion", "created": call.created,
            "model": served.model,
            "choices": [_render_choice(c, offsets, call.request.logprobs is not None)
                        for c in completion.ordered_choices()],
            "usage": usage_object(completion.usage),
        }

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return render_error(error)


def _render_choice(choice: ChoiceResult, offsets: _Offsets, with_logprobs: bool) -> dict[str, Any]:
    lp = None
    if with_logprobs:
        tokens = choice.logprobs or []
        lp = _logprobs_object(tokens, offsets.take(choice.index, tokens))
    return {"text": choice.text, "index": choice.index, "logprobs": lp,
            "finish_reason": choice.finish_reason.value if choice.finish_reason else "stop"}

"""Mistral's fill-in-the-middle API (`POST /v1/fim/completions`, Codestral's), shapes from
the mistralai SDK's `FIMCompletionRequest` / `FIMCompletionResponse` / completion
chunks.

`prompt` (the code before the cursor), `suffix` (after it; absent: a plain
completion of `prompt`), `max_tokens`, `min_tokens` (refused above 0: the engine has
no floor), `temperature`, `top_p`, `stop`, `random_seed`, `stream`. The answer is a
`chat.completion` whose one choice's message holds the middle; a stream is SSE
`chat.completion.chunk`s (the role first, then text deltas, then one with
`finish_reason` and `usage`) and `[DONE]`. The prompt is `[FIM_PRE]prompt[FIM_SUF]
suffix[FIM_MID]` in the model's own tokens; a model without them is a 400.
Errors: Mistral's `{"object": "error", "message", "type", "param", "code"}`.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from parlance.core.accumulate import Completion
from parlance.core.errors import InvalidRequest, ParlanceError
from parlance.core.events import Event, Finish, FinishReason, TextDelta, Usage
from parlance.core.request import GenerationRequest, SamplingParams, TextInput
from parlance.dialects.base import DONE, Call, CallFacts, ErrorResponse, Frame, Framing, Incoming
from parlance.dialects.shared.errors import status_of
from parlance.dialects.shared.wire import WireModel, parse_body

PATHS = ("/v1/fim",)
_ids = itertools.count(1)
_TYPES = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}


class FIMBody(WireModel):
    model: str | None = None
    prompt: str
    suffix: str | None = None
    temperature: Annotated[float, Field(ge=0.0, le=1.5)] | None = None
    top_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    max_tokens: Annotated[int, Field(ge=0)] | None = None
    min_tokens: Annotated[int, Field(ge=0)] | None = None
    stream: bool = False
    stop: str | list[str] | None = None
    random_seed: Annotated[int, Field(ge=0)] | None = None


@dataclass(frozen=True, slots=True)
class FIMCall(Call):
    id: str = field(default="", kw_only=True)
    created: int = field(default=0, kw_only=True)


def _finish(reason: FinishReason | None) -> str:
    return "length" if reason is FinishReason.LENGTH else "stop"


def _usage(usage: Usage | None) -> dict[str, int]:
    prompt = usage.prompt_tokens if usage else 0
    completion = usage.completion_tokens if usage else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


class FIMEncoder:
    def __init__(self, call: FIMCall, served: CallFacts) -> None:
        self.call, self.model = call, served.model
        self.reason: FinishReason | None = None

    def _chunk(self, delta: dict[str, Any], finish: str | None = None,
               usage: Usage | None = None) -> Frame:
        body: dict[str, Any] = {
            "id": self.call.id, "object": "chat.completion.chunk", "created": self.call.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if finish is not None:
            body["usage"] = _usage(usage)
        return Frame(body)

    def open(self) -> list[Frame]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def feed(self, event: Event) -> list[Frame]:
        if isinstance(event, TextDelta) and event.text:
            return [self._chunk({"content": event.text})]
        if isinstance(event, Finish):
            self.reason = event.reason
        if isinstance(event, Usage):
            return [self._chunk({"content": ""}, _finish(self.reason), event)]
        return []

    def close(self) -> list[Frame]:
        return [Frame(DONE)]

    def fail(self, error: ParlanceError) -> list[Frame]:
        return [Frame(render_error(error).body), Frame(DONE)]


class MistralFIM:
    framing: Framing = "sse"
    body_model = FIMBody

    def parse(self, incoming: Incoming) -> FIMCall:
        req = parse_body(self.body_model, incoming.body)
        if req.min_tokens:
            raise InvalidRequest("min_tokens is not supported here: the engine cannot hold "
                                 "off the end of an answer.", param="min_tokens")
        given: dict[str, Any] = {}
        if req.temperature is not None:
            given["temperature"] = req.temperature
        if req.top_p is not None:
            given["top_p"] = req.top_p
        if req.random_seed is not None:
            given["seed"] = req.random_seed
        stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
        prompt = TextInput(text=req.prompt, suffix=req.suffix)
        request = GenerationRequest(
            model=req.model or "", prompts=(prompt,), sampling=SamplingParams(**given),
            sampling_set=frozenset(given), max_tokens=req.max_tokens, stop=stop)
        return FIMCall(request, req.stream, id=f"fim-{next(_ids)}", created=int(time.time()))

    def encoder(self, call: FIMCall, served: CallFacts) -> FIMEncoder:
        return FIMEncoder(call, served)

    def render(self, call: FIMCall, served: CallFacts, completion: Completion) -> dict[str, Any]:
        choice = completion.choices.get(0)
        return {"id": call.id, "object": "chat.completion", "model": served.model,
                "created": call.created, "usage": _usage(completion.usage),
                "choices": [{"index": 0,
                             "message": {"role": "assistant",
                                         "content": choice.text if choice else ""},
                             "finish_reason": _finish(choice.finish_reason if choice
                                                      else None)}]}

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return render_error(error)


def render_error(error: ParlanceError) -> ErrorResponse:
    status = status_of(error, {})
    kind = _TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    return ErrorResponse.of(error, status, {"object": "error", "message": error.message,
                                            "type": kind, "param": error.param,
                                            "code": error.code})

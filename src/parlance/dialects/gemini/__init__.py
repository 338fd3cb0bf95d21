"""Google's Gemini API (`v1beta`, and `v1` where it exists), as the google-genai SDKs
and Gemini CLI speak it: `models/{model}:generateContent`, `:streamGenerateContent`
(SSE with `?alt=sse`, else one JSON array), `:countTokens`, `:embedContent`,
`:batchEmbedContents`, and the model list. The model and the stream switch are in the
URL, so every `parse` reads the request's path and query as well as its body.

`request.py` reads the body (`schema.py` its OpenAPI-style schemas), `stream.py`
encodes the stream, `result.py` renders the response, `thoughts.py` the thought
signatures, `errors.py` the error envelope, `embed.py` the embeddings, `models.py`
the Model resource."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from parlance.core.accumulate import Completion
from parlance.core.errors import ParlanceError
from parlance.dialects.base import Call, CallFacts, ErrorResponse, Framing, Incoming
from parlance.dialects.gemini import errors, result
from parlance.dialects.gemini.request import (
    CountTokensRequest,
    GenerateContentRequest,
    count_request,
    generation_request,
    model_name,
    shows_thoughts,
)
from parlance.dialects.gemini.stream import GenerateEncoder
from parlance.dialects.shared.wire import parse_body

render_error = errors.render_error


@dataclass(frozen=True, slots=True)
class GenerateCall(Call):
    id: str
    show_thoughts: bool = False


class GenerateContent:
    """Gemini's `:generateContent` (one answer), or with `streaming`
    `:streamGenerateContent` (SSE with `?alt=sse`, else one JSON array)."""

    framing: Framing = "sse"
    body_model = GenerateContentRequest

    def __init__(self, *, streaming: bool = False) -> None:
        self.streaming = streaming

    def parse(self, incoming: Incoming) -> GenerateCall:
        req = parse_body(self.body_model, incoming.body)
        model = model_name(incoming.path.get("model", ""))
        sse = incoming.query.get("alt", "").lower() == "sse"
        framing: Framing | None = None if sse or not self.streaming else "json"
        return GenerateCall(generation_request(req, model), self.streaming,
                            result.new_response_id(),
                            shows_thoughts(req.generation_config), framing=framing)

    def encoder(self, call: GenerateCall, served: CallFacts) -> GenerateEncoder:
        prompt_tokens = served.prompts[0].n_tokens if served.prompts else 0
        return GenerateEncoder(call.id, served.model, prompt_tokens,
                               show_thoughts=call.show_thoughts, array=call.framing == "json",
                               logprobs=call.request.logprobs is not None)

    def render(self, call: GenerateCall, served: CallFacts,
               completion: Completion) -> dict[str, Any]:
        prompt_tokens = served.prompts[0].n_tokens if served.prompts else 0
        return result.response(call.id, served.model, prompt_tokens, completion,
                               call.show_thoughts, call.request.n)

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return errors.render_error(error)


class CountTokens:
    """`:countTokens`: `{"totalTokens": N}`, counted as the same contents would be
    evaluated by `:generateContent`."""

    body_model = CountTokensRequest

    def parse(self, incoming: Incoming) -> Call:
        req = parse_body(self.body_model, incoming.body)
        return Call(count_request(req, model_name(incoming.path.get("model", ""))), False)

    def render_count(self, tokens: int) -> dict[str, Any]:
        return {"totalTokens": tokens,
                "promptTokensDetails": [{"modality": "TEXT", "tokenCount": tokens}]}

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return errors.render_error(error)

"""Anthropic Messages (`POST /v1/messages`, `POST /v1/messages/count_tokens`), as Claude
Code and the Claude Agent SDK speak it: SSE streams whose event names equal their
`type`, kept alive by `ping` events.

`request.py` reads the body, `stream.py` encodes the SSE stream, `result.py` renders
the Message object, `errors.py` the error envelope, `models.py` the model list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from parlance.core.accumulate import Completion
from parlance.core.errors import ParlanceError
from parlance.dialects.anthropic import errors, result
from parlance.dialects.anthropic.request import MessagesRequest, generation_request
from parlance.dialects.anthropic.stream import PING, MessageEncoder
from parlance.dialects.base import Call, CallFacts, ErrorResponse, Framing, Incoming
from parlance.dialects.shared.wire import parse_body

PATHS = ("/v1/messages", "/messages")  # Anthropic's API: these paths and what lies under them

render_error = errors.render_error


@dataclass(frozen=True, slots=True)
class MessagesCall(Call):
    id: str


class AnthropicMessages:
    framing: Framing = "sse"
    body_model = MessagesRequest
    ping = PING  # sent while the engine is silent, as Anthropic's own streams do

    def parse(self, incoming: Incoming) -> MessagesCall:
        req = parse_body(self.body_model, incoming.body)
        return MessagesCall(generation_request(req), req.stream, result.new_message_id())

    def encoder(self, call: MessagesCall, served: CallFacts) -> MessageEncoder:
        prompt_tokens = served.prompts[0].n_tokens if served.prompts else 0
        return MessageEncoder(call.id, served.model, prompt_tokens)

    def render(self, call: MessagesCall, served: CallFacts,
               completion: Completion) -> dict[str, Any]:
        return result.message(call.id, served.model, completion)

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return errors.render_error(error)


class AnthropicCount:
    """`POST /v1/messages/count_tokens`: a Messages request without `max_tokens` or
    `stream`, answered `{"input_tokens": N}`."""

    body_model = MessagesRequest

    def parse(self, incoming: Incoming) -> Call:
        req = parse_body(self.body_model, incoming.body)
        return Call(generation_request(req, counting=True), False)

    def render_count(self, tokens: int) -> dict[str, Any]:
        return {"input_tokens": tokens}

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return errors.render_error(error)

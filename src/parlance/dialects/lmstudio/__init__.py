"""LM Studio's native chat API (`POST /api/v1/chat`): named SSE events, stateful
chats continued by `previous_response_id`, server-side tools (`integrations`).

`request.py` reads the body, `stream.py` encodes the SSE events, `result.py` renders
the chat result, `errors.py` the error envelope every LM Studio endpoint uses,
`models.py` the model management bodies.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from typing import Any

from parlance.core.accumulate import Completion
from parlance.core.errors import InvalidRequest, ParlanceError
from parlance.core.messages import Message
from parlance.core.stored import StoredResponse
from parlance.dialects.base import Call, CallFacts, ErrorResponse, Framing, Incoming
from parlance.dialects.lmstudio import errors
from parlance.dialects.lmstudio.request import (
    ChatRequest,
    generation_request,
    user_text,
    with_system_prompt,
)
from parlance.dialects.lmstudio.result import result_body, thread_messages
from parlance.dialects.lmstudio.stream import ChatEventEncoder
from parlance.dialects.shared.wire import parse_body

PATHS = ("/api/v1", "/api/v0")  # LM Studio's APIs: these paths and what lies under them

render_error = errors.render_error


def new_response_id() -> str:
    """`resp_` and 48 hex digits, the shape of LM Studio's ids."""
    return "resp_" + secrets.token_hex(24)


@dataclass(frozen=True, slots=True)
class ChatCall(Call):
    body: ChatRequest
    response_id: str | None  # None: store is false
    thread: tuple[Message, ...]  # what the model sees, this turn's input included


class LMStudioChat:
    framing: Framing = "sse"
    body_model = ChatRequest
    stored_kind = "chat"
    reports_model_load = True

    def parse(self, incoming: Incoming) -> ChatCall:
        req = parse_body(self.body_model, incoming.body)
        if req.previous_response_id is not None and not req.previous_response_id.startswith(
                "resp_"):
            raise InvalidRequest("previous_response_id must start with 'resp_'.",
                                 param="previous_response_id", code="invalid_value")
        if req.tool_choice == "required" and not req.integrations:
            raise InvalidRequest("tool_choice 'required' needs integrations whose tools the "
                                 "model can call.", param="tool_choice", code="invalid_value")
        thread = with_system_prompt([Message("user", user_text(req.input))], req.system_prompt)
        return ChatCall(generation_request(req, thread), req.stream, req,
                        new_response_id() if req.store else None, tuple(thread),
                        context_length=req.context_length)

    # -- state ------------------------------------------------------------------

    def previous_id(self, call: ChatCall) -> str | None:
        return call.body.previous_response_id

    def continued(self, call: ChatCall, previous: StoredResponse) -> ChatCall:
        earlier = [Message.from_json(m) for m in previous.context]
        earlier += thread_messages(previous.response.get("output", []))
        thread = with_system_prompt([*earlier, *(m for m in call.thread if m.role != "system")],
                                    call.body.system_prompt)
        return replace(call, request=generation_request(call.body, thread), thread=tuple(thread))

    def record(self, call: ChatCall, response: dict[str, Any]) -> StoredResponse | None:
        if call.response_id is None:
            return None
        return StoredResponse(call.response_id, response, [m.to_json() for m in call.thread],
                              kind=self.stored_kind)

    def cancelled(self, response: dict[str, Any]) -> dict[str, Any]:
        return response  # kept as far as it got; the client never saw its response_id

    # -- the rest of the dialect ------------------------------------------------

    def encoder(self, call: ChatCall, served: CallFacts) -> ChatEventEncoder:
        return ChatEventEncoder(served.model,
                                lambda completion: self.render(call, served, completion),
                                errors.error_object)

    def render(self, call: ChatCall, served: CallFacts, completion: Completion) -> dict[str, Any]:
        return result_body(served.model, completion, call.response_id)

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return errors.render_error(error)

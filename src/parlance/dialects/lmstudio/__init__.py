"""LM Studio's native chat API (`POST /api/v1/chat`): named SSE events, stateful
chats continued by `previous_response_id`, server-side tools (`integrations`).

Errors use LM Studio's envelope `{"error": {type, message, code?, param?}}`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from typing import Any

from parlance.core.accumulate import Completion
from parlance.core.errors import InvalidRequest, ParlanceError, ToolServerUnreachable
from parlance.core.messages import Message
from parlance.dialects.base import Call, ErrorResponse, Framing, Served
from parlance.dialects.lmstudio.request import (
    ChatRequest,
    generation_request,
    user_text,
    with_system_prompt,
)
from parlance.dialects.lmstudio.result import result_body, thread_messages
from parlance.dialects.lmstudio.stream import ChatEventEncoder
from parlance.dialects.wire import parse_body
from parlance.store.responses import StoredResponse

# kind -> (HTTP status, LM Studio error type)
_ERRORS = {
    "invalid_request": (400, "invalid_request"),
    "payload_too_large": (413, "invalid_request"),
    "authentication": (401, "invalid_request"),
    "forbidden": (403, "invalid_request"),
    "model_not_found": (404, "model_not_found"),
    "route_not_found": (404, "invalid_request"),
    "not_found": (404, "invalid_request"),
    "method_not_allowed": (405, "invalid_request"),
    "context_overflow": (400, "invalid_request"),
    "overloaded": (429, "unknown"),
    "unavailable": (503, "unknown"),
    "timeout": (408, "unknown"),
    "not_implemented": (501, "not_implemented"),
    "engine_failure": (500, "internal_error"),
    "upstream_failure": (502, "internal_error"),
    "internal": (500, "internal_error"),
}


def error_object(error: ParlanceError) -> dict[str, Any]:
    _, kind = _ERRORS.get(error.kind, _ERRORS["internal"])
    if isinstance(error, ToolServerUnreachable):
        kind = error.code or "mcp_connection_error"
    elif error.code == "job_not_found":
        kind = "job_not_found"
    out = {"type": kind, "message": error.message}
    if error.code:
        out["code"] = error.code
    if error.param:
        out["param"] = error.param
    return out


def render_error(error: ParlanceError) -> ErrorResponse:
    status, _ = _ERRORS.get(error.kind, _ERRORS["internal"])
    if isinstance(error, ToolServerUnreachable):
        status = 500 if error.server_fault else 400
    return ErrorResponse.of(error, status, {"error": error_object(error)})


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
    stored_kind = "chat"
    reports_model_load = True

    def parse(self, body: Any) -> ChatCall:
        req = parse_body(ChatRequest, body)
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

    def encoder(self, call: ChatCall, served: Served) -> ChatEventEncoder:
        return ChatEventEncoder(served.model,
                                lambda completion: self.render(call, served, completion),
                                error_object)

    def render(self, call: ChatCall, served: Served, completion: Completion) -> dict[str, Any]:
        return result_body(served.model, completion, call.response_id)

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return render_error(error)

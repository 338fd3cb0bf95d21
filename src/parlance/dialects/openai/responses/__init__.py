"""OpenAI Responses (`POST /v1/responses`): stored and chained responses, background
responses, WebSocket mode, function, custom, shell and MCP tools.

`request.py` reads the body into a call, `stream.py` encodes its events, `result.py`
is the response object (and replays a stored one); `output.py` folds events into
output items, `items.py` and `tools.py` are the tool calls in the client's terms,
`mcp.py` the MCP servers a request names, `sealed.py` the sealed `encrypted_content`,
`socket.py` WebSocket mode, `compact.py` the compaction endpoint."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from parlance.core.accumulate import Completion
from parlance.core.errors import InvalidRequest, ParlanceError
from parlance.core.stored import StoredResponse
from parlance.dialects.base import CallFacts, ErrorResponse, Frame, Framing, Incoming
from parlance.dialects.openai.common import new_id, now
from parlance.dialects.openai.errors import in_responses_terms, render_error
from parlance.dialects.openai.responses import socket
from parlance.dialects.openai.responses.request import (
    ResponsesCall,
    ResponsesRequest,
    conversation,
    generation_request,
    input_items,
    resolve_references,
)
from parlance.dialects.openai.responses.result import finished_response
from parlance.dialects.openai.responses.stream import ResponsesEncoder
from parlance.dialects.shared.sealed import Sealer
from parlance.dialects.shared.wire import parse_body


class OpenAIResponses:
    framing: Framing = "sse"
    body_model = ResponsesRequest
    stored_kind = "response"

    def __init__(self, sealer: Sealer | None = None) -> None:
        """`sealer`: the server's, so sealed items read back whichever endpoint wrote them."""
        self.sealer = sealer or Sealer.ephemeral()

    def parse(self, incoming: Incoming) -> ResponsesCall:
        req = parse_body(self.body_model, incoming.body)
        # (continued() rebuilds the request once the stored conversation is known)
        if req.background and not req.store:
            raise InvalidRequest("A background response must be stored: send it without "
                                 "store: false.", param="background", code="invalid_value")
        if req.previous_response_id is not None and not req.previous_response_id.startswith(
                "resp_"):
            raise InvalidRequest("previous_response_id must start with 'resp_'.",
                                 param="previous_response_id")
        items = input_items(req.input)
        plain = [i for i in items if i.get("type") != "item_reference"]
        if len(plain) != len(items) and req.previous_response_id is None:
            raise InvalidRequest("item_reference needs previous_response_id to refer to.",
                                 param="input")
        request = generation_request(req, plain, self.sealer,
                                     whole=req.previous_response_id is None)
        return ResponsesCall(request, req.stream, new_id("resp_"), now(), req,
                             tuple(items), tuple(plain))

    # -- state: what a response continues, and what is kept of it ---------------

    def previous_id(self, call: ResponsesCall) -> str | None:
        return call.body.previous_response_id

    def continued(self, call: ResponsesCall, previous: StoredResponse) -> ResponsesCall:
        """The call with the stored conversation before its own input."""
        earlier = conversation(previous)
        context = [*earlier, *resolve_references(list(call.items), earlier)]
        return replace(call, request=generation_request(call.body, context, self.sealer),
                       context=tuple(context))

    def record(self, call: ResponsesCall, response: dict[str, Any]) -> StoredResponse | None:
        if not call.body.store:
            return None
        return StoredResponse(call.id, response, list(call.context))

    def cancelled(self, response: dict[str, Any]) -> dict[str, Any]:
        return {**response, "status": "cancelled", "completed_at": None,
                "incomplete_details": None}

    def interrupted(self, response: dict[str, Any]) -> dict[str, Any]:
        return {**response, "status": "failed", "completed_at": None,
                "error": {"code": "server_error", "message": "The server stopped before this "
                          "background response finished."}}

    # -- background responses ---------------------------------------------------

    def in_background(self, call: ResponsesCall) -> bool:
        return call.body.background

    def progress(self, frame: Frame) -> dict[str, Any] | None:
        data = frame.data
        if isinstance(data, dict) and data.get("type") in (
                "response.created", "response.queued", "response.in_progress"):
            response: dict[str, Any] = data["response"]
            return response
        return None

    # -- WebSocket mode -----------------------------------------------------------

    def socket_call(self, message: Any) -> ResponsesCall | None:
        create = socket.create_message(message)
        if create is None:
            return None
        body, lane, generate = create
        return replace(self.parse(Incoming(body)), lane=lane, generate=generate)

    def prepares_only(self, call: ResponsesCall) -> bool:
        """`generate: false`: the response records its input for later turns; no output."""
        return not call.generate

    def socket_event(self, call: ResponsesCall, frame: Frame) -> dict[str, Any] | None:
        return socket.event(frame, call.lane)

    def socket_error(self, error: ParlanceError) -> dict[str, Any]:
        return socket.error_event(in_responses_terms(error))

    def remembered(self, call: ResponsesCall, response: dict[str, Any]) -> StoredResponse:
        return StoredResponse(call.id, response, list(call.context))

    def shorter(self, call: ResponsesCall) -> ResponsesCall | None:
        """`truncation: "auto"`: the call without its oldest turn, when the context
        overflows (None: nothing left to drop, or truncation is disabled)."""
        if call.body.truncation != "auto" or len(call.context) < 2:
            return None
        context = list(call.context[1:])
        while len(context) > 1 and not (context[0].get("type") == "message"
                                        and context[0].get("role") == "user"):
            context.pop(0)  # never start with a call result whose call was dropped
        return replace(call, request=generation_request(call.body, context, self.sealer),
                       context=tuple(context))

    # -- the rest of the dialect ------------------------------------------------

    def encoder(self, call: ResponsesCall, served: CallFacts) -> ResponsesEncoder:
        return ResponsesEncoder(call, served, self.sealer)

    def render(self, call: ResponsesCall, served: CallFacts,
               completion: Completion) -> dict[str, Any]:
        return finished_response(call, served.model, completion, self.sealer)

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return render_error(in_responses_terms(error))

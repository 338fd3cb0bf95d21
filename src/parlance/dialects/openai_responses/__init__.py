"""OpenAI Responses (`POST /v1/responses`): stream lifecycle, function tools, stored
and chained responses.

Stream contract (seed 003, stream-contracts A.5/A.6): `event:` + `data:` frames with
`sequence_number` from 0; `response.created`, `response.in_progress`, then each
output item opened and closed in turn, exactly one terminal event
(`completed`, `incomplete` at the output cap, or `failed`), then `data: [DONE]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from parlance.core.accumulate import Completion
from parlance.core.errors import Cancelled, ContextOverflow, InvalidRequest, ParlanceError
from parlance.core.events import Event, Finish, FinishReason, Usage
from parlance.core.messages import Message, unanswered_result
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams
from parlance.dialects.base import DONE, Call, ErrorResponse, Frame, Framing, Served
from parlance.dialects.openai_common import new_id, now, render_error
from parlance.dialects.openai_responses import mcp, socket
from parlance.dialects.openai_responses import request as wire
from parlance.dialects.openai_responses.output import OutputBuilder
from parlance.dialects.openai_responses.sealed import Sealer
from parlance.dialects.openai_responses.tools import toolset
from parlance.dialects.wire import parse_body
from parlance.store.responses import StoredResponse

LOGPROBS_INCLUDE = "message.output_text.logprobs"
ENCRYPTED_REASONING = "reasoning.encrypted_content"


@dataclass(frozen=True, slots=True)
class ResponsesCall(Call):
    id: str
    created_at: int
    body: wire.ResponsesRequest
    items: tuple[dict[str, Any], ...]  # this request's input items
    context: tuple[dict[str, Any], ...]  # every input item the model sees, chain included
    # WebSocket mode: the lane its events echo, and whether the model runs at all
    lane: str | None = field(default=None, kw_only=True)
    generate: bool = field(default=True, kw_only=True)


def _request(body: wire.ResponsesRequest, context: list[dict[str, Any]], sealer: Sealer, *,
             whole: bool = True) -> GenerationRequest:
    """`whole`: the context is the whole conversation (not yet the case while a
    chained request's stored turns are unknown)."""
    tools = toolset(body.tools or [], context).specs
    servers = mcp.tool_servers(body.tools or [])
    messages = wire.messages_of(context, sealer)
    if whole:
        _refuse_unanswered_outputs(messages, context)
    if body.instructions:
        messages.insert(0, Message("system", body.instructions))
    logprobs = None
    if LOGPROBS_INCLUDE in (body.include or []):
        logprobs = body.top_logprobs or 0
    return GenerationRequest(
        model=body.model or "",
        prompts=(ChatInput(tuple(messages)),),
        sampling=SamplingParams(
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p, seed=body.seed),
        sampling_set=frozenset(k for k in ("temperature", "top_p", "seed")
                               if k in body.model_fields_set),
        max_tokens=body.max_output_tokens,
        logprobs=logprobs,
        tools=tools,
        tool_choice=wire.tool_choice(body, tools),
        parallel_tool_calls=body.parallel_tool_calls,
        response_format=wire.response_format(body.text),
        reasoning=wire.reasoning(body),
        tool_servers=servers,
        approved_calls=mcp.approved_calls(context, servers) if whole else (),
    )


def _refuse_unanswered_outputs(messages: list[Message], context: list[dict[str, Any]]) -> None:
    """A call's output item whose call_id no earlier call has (in the input or the
    stored chain) is refused, in OpenAI's words."""
    unanswered = unanswered_result(messages)
    if unanswered is None:
        return
    call_id = unanswered[1]
    kind = next((str(item.get("type")) for item in context if item.get("call_id") == call_id
                 and str(item.get("type")).endswith("_output")), "function_call_output")
    raise InvalidRequest(f"No tool call found for {kind.replace('_', ' ')} with call_id "
                         f"{call_id}.", param="input")


def conversation(previous: StoredResponse) -> list[dict[str, Any]]:
    """Every item of a stored response's conversation: what it saw, then what it said."""
    return [*previous.context, *previous.response.get("output", [])]


def resolve_references(items: list[dict[str, Any]],
                       known: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_id = {item.get("id"): item for item in known}
    out = []
    for i, item in enumerate(items):
        if item.get("type") == "item_reference":
            found = by_id.get(item.get("id"))
            if found is None:
                raise InvalidRequest(f"No item with id '{item.get('id')}' in the stored "
                                     "conversation.", param=f"input[{i}].id")
            item = found
        out.append(item)
    return out


def response_object(call: ResponsesCall, model: str, *, status: str,
                    output: list[dict[str, Any]], usage: Usage | None = None,
                    error: ParlanceError | None = None) -> dict[str, Any]:
    body = call.body
    fmt = body.text.format if body.text and body.text.format else None
    return {
        "id": call.id, "object": "response", "created_at": call.created_at,
        "status": status, "background": body.background,
        "completed_at": now() if status == "completed" else None,
        "error": ({"code": error.code or "server_error", "message": error.message}
                  if error else None),
        "incomplete_details": ({"reason": "max_output_tokens"} if status == "incomplete"
                               else None),
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "metadata": body.metadata or {},
        "model": model,
        "output": output,
        "parallel_tool_calls": body.parallel_tool_calls,
        "previous_response_id": body.previous_response_id,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None,
                      "summary": body.reasoning.summary if body.reasoning else None},
        "store": body.store,
        "temperature": body.temperature if body.temperature is not None else 1.0,
        "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt
                 else {"type": "text"}},
        "tool_choice": (body.tool_choice if isinstance(body.tool_choice, str | None)
                        else body.tool_choice.model_dump()) or "auto",
        "tools": [t.echoed() for t in body.tools or ()],
        "top_logprobs": body.top_logprobs or 0,
        "top_p": body.top_p if body.top_p is not None else 1.0,
        "truncation": body.truncation,
        "usage": usage_object(usage) if usage else None,
        # fixed here, required by the Open Responses specification
        "presence_penalty": 0.0, "frequency_penalty": 0.0, "max_tool_calls": None,
        "service_tier": "default", "safety_identifier": None,
        "prompt_cache_key": body.prompt_cache_key,
    }


def usage_object(usage: Usage) -> dict[str, Any]:
    return {"input_tokens": usage.prompt_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens,
                                     "cache_write_tokens": 0},
            "output_tokens": usage.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            "total_tokens": usage.total_tokens}


def _builder(call: ResponsesCall, sealer: Sealer) -> OutputBuilder:
    """Output items for this call; a server whose tools the conversation has listed
    already is not listed again (as on OpenAI). Reasoning items carry their text
    sealed when the client asks (`include`), to hand it back without the store."""
    listed = frozenset(str(item.get("server_label")) for item in call.context
                       if item.get("type") == "mcp_list_tools")
    seal = None
    if ENCRYPTED_REASONING in (call.body.include or []):
        def seal(text: str) -> str:
            return sealer.seal(wire.REASONING, text)
    return OutputBuilder(logprobs=call.request.logprobs is not None, listed=listed,
                         tools=toolset(call.body.tools or [], call.context), seal=seal)


class ResponsesEncoder:
    def __init__(self, call: ResponsesCall, served: Served, sealer: Sealer) -> None:
        self._call = call
        self._model = served.model
        self._builder = _builder(call, sealer)
        self._sequence = 0
        self._usage: Usage | None = None
        self._reason: FinishReason | None = None
        self._queued = call.body.background  # until its first event
        self.final: dict[str, Any] | None = None  # the terminal response, once sent

    def _frame(self, kind: str, fields: dict[str, Any]) -> Frame:
        frame = Frame({"type": kind, "sequence_number": self._sequence, **fields}, event=kind)
        self._sequence += 1
        return frame

    def _frames(self, events: list[tuple[str, dict[str, Any]]]) -> list[Frame]:
        return [self._frame(kind, fields) for kind, fields in events]

    def snapshot(self, status: str, error: ParlanceError | None = None) -> dict[str, Any]:
        return response_object(self._call, self._model, status=status,
                               output=self._builder.items, usage=self._usage, error=error)

    def open(self) -> list[Frame]:
        """A background response is queued until its generation's first event."""
        if self._queued:
            start = self.snapshot("queued")
            return [self._frame("response.created", {"response": start}),
                    self._frame("response.queued", {"response": start})]
        start = self.snapshot("in_progress")
        return [self._frame("response.created", {"response": start}),
                self._frame("response.in_progress", {"response": start})]

    def _running(self) -> list[Frame]:
        if not self._queued:
            return []
        self._queued = False
        return [self._frame("response.in_progress", {"response": self.snapshot("in_progress")})]

    def feed(self, event: Event) -> list[Frame]:
        return self._running() + self._feed(event)

    def _feed(self, event: Event) -> list[Frame]:
        match event:
            case Usage():
                self._usage = event
                return []
            case Finish(reason=reason):
                self._reason = reason
                return self._frames(self._builder.close(
                    incomplete=reason is FinishReason.LENGTH))
        return self._frames(self._builder.feed(event))

    def close(self) -> list[Frame]:
        incomplete = self._reason is FinishReason.LENGTH
        return self._end("incomplete" if incomplete else "completed")

    def fail(self, error: ParlanceError) -> list[Frame]:
        """`Cancelled` (a background response's cancel) ends it as cancelled, not failed."""
        if isinstance(error, Cancelled):
            return self._end("cancelled")
        return self._end("failed", error)

    def _end(self, status: str, error: ParlanceError | None = None) -> list[Frame]:
        """Close the open item, then the one terminal event, then [DONE]."""
        frames = self._running()
        frames += self._frames(self._builder.close(incomplete=status != "completed"))
        self.final = self.snapshot(status, error)
        terminal = self._frame(terminal_event(status), {"response": self.final})
        return [*frames, terminal, Frame(DONE)]

    def outcome(self) -> dict[str, Any]:
        """What is stored: the terminal response, or, for a stream that never reached
        its end (the client left), the response so far as `cancelled`."""
        if self.final is not None:
            return self.final
        self._builder.close(incomplete=True)
        return self.snapshot("cancelled")


class OpenAIResponses:
    framing: Framing = "sse"
    stored_kind = "response"

    def __init__(self, sealer: Sealer | None = None) -> None:
        """`sealer`: the server's, so sealed items read back whichever endpoint wrote them."""
        self.sealer = sealer or Sealer.ephemeral()

    def parse(self, body: Any) -> ResponsesCall:
        req = parse_body(wire.ResponsesRequest, body)
        # (continued() rebuilds the request once the stored conversation is known)
        if req.background and not req.store:
            raise InvalidRequest("A background response must be stored: send it without "
                                 "store: false.", param="background", code="invalid_value")
        if req.previous_response_id is not None and not req.previous_response_id.startswith(
                "resp_"):
            raise InvalidRequest("previous_response_id must start with 'resp_'.",
                                 param="previous_response_id")
        items = wire.input_items(req.input)
        plain = [i for i in items if i.get("type") != "item_reference"]
        if len(plain) != len(items) and req.previous_response_id is None:
            raise InvalidRequest("item_reference needs previous_response_id to refer to.",
                                 param="input")
        request = _request(req, plain, self.sealer, whole=req.previous_response_id is None)
        return ResponsesCall(request, req.stream, new_id("resp_"), now(), req,
                             tuple(items), tuple(plain))

    # -- state: what a response continues, and what is kept of it ---------------

    def previous_id(self, call: ResponsesCall) -> str | None:
        return call.body.previous_response_id

    def continued(self, call: ResponsesCall, previous: StoredResponse) -> ResponsesCall:
        """The call with the stored conversation before its own input."""
        earlier = conversation(previous)
        context = [*earlier, *resolve_references(list(call.items), earlier)]
        return replace(call, request=_request(call.body, context, self.sealer),
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
        return replace(self.parse(body), lane=lane, generate=generate)

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
        return replace(call, request=_request(call.body, context, self.sealer),
                       context=tuple(context))

    # -- the rest of the dialect ------------------------------------------------

    def encoder(self, call: ResponsesCall, served: Served) -> ResponsesEncoder:
        return ResponsesEncoder(call, served, self.sealer)

    def render(self, call: ResponsesCall, served: Served,
               completion: Completion) -> dict[str, Any]:
        builder = _builder(call, self.sealer)
        choice = completion.choice(0)
        builder.replay(choice)
        incomplete = choice.finish_reason is FinishReason.LENGTH
        for item in builder.items:
            if incomplete and item is builder.items[-1]:
                item["status"] = "incomplete"
        return response_object(call, served.model,
                               status="incomplete" if incomplete else "completed",
                               output=builder.items, usage=completion.usage)

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return render_error(in_responses_terms(error))


def in_responses_terms(error: ParlanceError) -> ParlanceError:
    """A prompt that does not fit is a 400 naming `input`, as on OpenAI (Codex compacts
    the conversation on its code); Chat Completions keeps seed 004's 403."""
    if isinstance(error, ContextOverflow):
        return InvalidRequest(error.message, param="input", code="context_length_exceeded")
    return error


def terminal_event(status: str) -> str:
    """The one event that ends a stream with this status (cancelled ends incomplete)."""
    return {"completed": "response.completed", "failed": "response.failed"}.get(
        status, "response.incomplete")


def replay(response: dict[str, Any], starting_after: int | None) -> list[Frame]:
    """A stored response as the stream that produced it (GET ...?stream=true)."""
    output = response.get("output", [])
    builder = OutputBuilder(ids=iter([item["id"] for item in output]))
    start = {**response, "status": "in_progress", "output": [], "usage": None}
    events = [("response.created", {"response": start}),
              ("response.in_progress", {"response": start}),
              *builder.replay_items(output)]
    status = str(response.get("status"))
    if status != "in_progress":
        events.append((terminal_event(status), {"response": response}))
    frames = [Frame({"type": kind, "sequence_number": n, **fields}, event=kind)
              for n, (kind, fields) in enumerate(events)
              if starting_after is None or n > starting_after]
    return [*frames, Frame(DONE)]

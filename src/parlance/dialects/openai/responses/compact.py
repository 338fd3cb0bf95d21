"""`POST /v1/responses/compact` (OpenAI's compaction endpoint, in the Open Responses
specification): the model summarises a conversation (input items and/or a stored
`previous_response_id` chain), and the answer is a `response.compaction` object
whose output is the conversation's user messages followed by one `compaction` item
carrying the summary sealed in `encrypted_content`. A later request sends that output
back in place of the turns it summarises (`request.messages_of` reads it).

A dialect of the one generic handler: the summary is an ordinary generation; when
the conversation overflows the context (the usual reason to compact), its oldest
turns are left out of what the model reads, as with `truncation: "auto"`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated, Any

from pydantic import Field

from parlance.core.accumulate import Completion
from parlance.core.errors import InvalidRequest, ParlanceError
from parlance.core.events import Usage
from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams
from parlance.core.stored import StoredResponse
from parlance.dialects.base import Call, CallFacts, Encoder, ErrorResponse, Framing, Incoming
from parlance.dialects.openai.common import new_id, now
from parlance.dialects.openai.errors import render_error
from parlance.dialects.openai.responses.request import (
    COMPACTION,
    conversation,
    input_items,
    messages_of,
    resolve_references,
)
from parlance.dialects.openai.responses.result import usage_object
from parlance.dialects.shared.sealed import Sealer
from parlance.dialects.shared.wire import WireModel, parse_body

SUMMARY_MAX_TOKENS = 512  # about 400 words: room for a handoff, bounded time on a CPU
SUMMARISE = (
    "Summarise the conversation above so that it can be continued from your summary "
    "alone: the user's goals and requests, what has been done and found (tool calls and "
    "their results included), decisions made, open questions, and what to do next. "
    "Write only the summary.")


class CompactRequest(WireModel):
    model: str
    input: str | Annotated[list[dict[str, Any]], Field(min_length=1)] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None


@dataclass(frozen=True, slots=True)
class CompactCall(Call):
    id: str
    created_at: int
    body: CompactRequest
    items: tuple[dict[str, Any], ...]  # this request's input items
    context: tuple[dict[str, Any], ...]  # the whole conversation, chain included
    dropped: int = 0  # oldest items left out of what the model reads (context overflow)


def _starts_turn(item: dict[str, Any]) -> bool:
    return item.get("type") == "compaction" or (item.get("type") == "message"
                                                 and item.get("role") == "user")


def user_messages(context: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [item for item in context
            if item.get("type") == "message" and item.get("role") == "user"]


class ResponsesCompaction:
    framing: Framing = "sse"
    body_model = CompactRequest
    stored_kind = "response"

    def __init__(self, sealer: Sealer) -> None:
        self.sealer = sealer

    def parse(self, incoming: Incoming) -> CompactCall:
        req = parse_body(self.body_model, incoming.body)
        if req.input is None and req.previous_response_id is None:
            raise InvalidRequest("Nothing to compact: send input, previous_response_id or "
                                 "both.", param="input", code="missing_required_parameter")
        items = input_items(req.input or [])
        plain = [i for i in items if i.get("type") != "item_reference"]
        if len(plain) != len(items) and req.previous_response_id is None:
            raise InvalidRequest("item_reference needs previous_response_id to refer to.",
                                 param="input")
        return CompactCall(self._request(req, plain), False, new_id("resp_"), now(), req,
                           tuple(items), tuple(plain))

    def _request(self, body: CompactRequest, context: list[dict[str, Any]]) -> GenerationRequest:
        messages = messages_of(context, self.sealer)
        if body.instructions:
            messages.insert(0, Message("system", body.instructions))
        messages.append(Message("user", SUMMARISE))
        return GenerationRequest(model=body.model, prompts=(ChatInput(tuple(messages)),),
                                 sampling=SamplingParams(temperature=0.0),
                                 max_tokens=SUMMARY_MAX_TOKENS, strict_max_tokens=True)

    # -- state: the stored chain it summarises; a compaction itself is not stored ----

    def previous_id(self, call: CompactCall) -> str | None:
        return call.body.previous_response_id

    def continued(self, call: CompactCall, previous: StoredResponse) -> CompactCall:
        earlier = conversation(previous)
        context = [*earlier, *resolve_references(list(call.items), earlier)]
        return replace(call, request=self._request(call.body, context), context=tuple(context))

    def record(self, call: CompactCall, response: dict[str, Any]) -> StoredResponse | None:
        return None

    def cancelled(self, response: dict[str, Any]) -> dict[str, Any]:
        return response

    def shorter(self, call: CompactCall) -> CompactCall | None:
        """The model reads from the next turn on (the oldest are left out); the user
        messages it answers with are still the whole conversation's."""
        read = list(call.context[call.dropped + 1:])
        while read and not _starts_turn(read[0]):
            read.pop(0)  # never start with a call result whose call was left out
        if not read:
            return None
        dropped = len(call.context) - len(read)
        return replace(call, request=self._request(call.body, read), dropped=dropped)

    # -- the rest of the dialect ------------------------------------------------

    def encoder(self, call: CompactCall, served: CallFacts) -> Encoder:
        raise AssertionError("compaction is never streamed: parse() sets stream=False")

    def render(self, call: CompactCall, served: CallFacts,
               completion: Completion) -> dict[str, Any]:
        choice = completion.choice(0)
        summary = choice.text.strip() or choice.reasoning.strip()
        item = {"type": "compaction", "id": new_id("cmp_"),
                "encrypted_content": self.sealer.seal(COMPACTION, summary)}
        return {"id": call.id, "object": "response.compaction", "created_at": call.created_at,
                "output": [*user_messages(call.context), item],
                "usage": usage_object(completion.usage or Usage(0, 0))}

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return render_error(error)

"""The Responses stream encoder without a server: core events in, events out. Sequence
numbers count every event from 0; each event's SSE name is its `type`; an output item
is added, streamed (deltas naming its id and output index) and done, one after the
other, with ids of their own; a function call's argument deltas concatenate to the
`arguments` of its done events; one terminal event (completed, incomplete, failed),
then `[DONE]`; a background response is queued until its first event."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from parlance.core.errors import Cancelled, EngineFailure, ParlanceError
from parlance.core.events import (
    Finish,
    FinishReason,
    PromptProgress,
    ReasoningDelta,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from parlance.dialects.base import DONE, CallFacts, Frame, Incoming
from parlance.dialects.openai.responses import OpenAIResponses
from parlance.dialects.openai.responses.stream import PROMPT_PROGRESS
from tests.support.encoding import body, encoded
from tests.support.openresponses import check_event
from tests.support.transcripts import assert_transcript

HELLO = {"model": "fake-model", "input": "Hello!", "stream": True}
WEATHER = {"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
SERVED = CallFacts("fake-model", prompts=())
CALL = [ToolCallStart("call_test", "get_weather"), ToolCallArgs('{"city": '),
        ToolCallArgs('"Paris"}'), ToolCallEnd()]


def frames(events, failure: ParlanceError | None = None, **fields: Any) -> list[Frame]:
    dialect = OpenAIResponses()
    call = dialect.parse(Incoming({**HELLO, **fields}))
    return encoded(dialect.encoder(call, SERVED), events, failure)


def stream(events, failure: ParlanceError | None = None, **fields: Any) -> list[dict[str, Any]]:
    """The events' payloads, each valid for the Open Responses types, `[DONE]` last."""
    out = frames(events, failure, **fields)
    assert out[-1].data == DONE
    for frame in out[:-1]:
        assert frame.event == frame.data["type"]
        check_event(frame.data)
    return [frame.data for frame in out[:-1]]


# -- the golden transcripts the app sends, from the encoder alone --------------------------


@pytest.mark.parametrize(("name", "events", "failure", "extra"), [
    ("text", [TextDelta("Hello"), TextDelta(" there!"), Finish(FinishReason.STOP),
              Usage(5, 2, 0.01, 0.02)], None, {}),
    ("cap_hit", [TextDelta("Once upon"), Finish(FinishReason.LENGTH), Usage(5, 16)], None,
     {"max_output_tokens": 16}),
    ("function_call", [*CALL, Finish(FinishReason.STOP), Usage(5, 9)], None,
     {"tools": [WEATHER]}),
    ("reasoning", [ReasoningDelta("The user says hi."), TextDelta("Hi!"),
                   Finish(FinishReason.STOP), Usage(5, 9, reasoning_tokens=6)], None, {}),
    ("failure", [TextDelta("Hi")], EngineFailure("llama_decode failed"), {}),
])
def test_the_golden_transcripts(fixed_ids, name, events, failure, extra):
    assert_transcript(f"responses_{name}.sse", body(frames(events, failure, **extra), "sse"))


# -- the contract -------------------------------------------------------------------------------


def items_streamed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each output item's done form, after checking that its events came between its
    `added` and its `done`, all naming its id and output index."""
    done: list[dict[str, Any]] = []
    open_item: dict[str, Any] | None = None
    for event in events:
        kind = event["type"]
        if kind == "response.output_item.added":
            assert open_item is None  # one item at a time
            open_item = event["item"]
            assert event["output_index"] == len(done)
        elif kind == "response.output_item.done":
            assert open_item is not None and event["item"]["id"] == open_item["id"]
            assert event["output_index"] == len(done)
            done.append(event["item"])
            open_item = None
        elif "item_id" in event:
            assert open_item is not None and event["item_id"] == open_item["id"]
            assert event["output_index"] == len(done)
    assert open_item is None
    return done


def test_sequence_numbers_count_every_event_and_one_terminal_event_ends_it():
    events = stream([ReasoningDelta("Hmm."), TextDelta("Hi"), TextDelta(" there"),
                     Finish(FinishReason.STOP), Usage(5, 4)])
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed" and kinds.count("response.completed") == 1
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["usage"]["output_tokens"] == 4
    assert final["output"] == items_streamed(events)


def test_items_have_ids_of_their_own_and_their_deltas_concatenate():
    events = stream([ReasoningDelta("Let me "), ReasoningDelta("think."), TextDelta("Sure, "),
                     TextDelta("checking."), *CALL, Finish(FinishReason.STOP), Usage(5, 9)],
                    tools=[WEATHER])
    items = items_streamed(events)
    assert [item["type"] for item in items] == ["reasoning", "message", "function_call"]
    assert len({item["id"] for item in items}) == 3
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "Sure, checking." == items[1]["content"][0]["text"]
    arguments = "".join(e["delta"] for e in events
                        if e["type"] == "response.function_call_arguments.delta")
    [done] = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert arguments == done["arguments"] == items[2]["arguments"] == '{"city": "Paris"}'
    assert (items[2]["call_id"], items[2]["name"], items[2]["status"]) == (
        "call_test", "get_weather", "completed")


def test_the_cap_ends_it_incomplete_with_its_reason():
    events = stream([TextDelta("Once upon"), Finish(FinishReason.LENGTH), Usage(5, 16)],
                    max_output_tokens=16)
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.incomplete"
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert items_streamed(events)[-1]["status"] == "incomplete"


@pytest.mark.parametrize(("failure", "terminal", "status"), [
    (EngineFailure("llama_decode failed"), "response.failed", "failed"),
    (Cancelled(), "response.incomplete", "cancelled"),
])
def test_a_failure_or_a_cancel_closes_the_open_item_then_ends_it(failure, terminal, status):
    events = stream([TextDelta("Hi")], failure)
    assert events[-1]["type"] == terminal and events[-1]["response"]["status"] == status
    assert items_streamed(events)[0]["status"] == "incomplete"
    if status == "failed":
        assert events[-1]["response"]["error"]["message"] == "llama_decode failed"


def test_a_background_response_is_queued_until_its_first_event():
    dialect = OpenAIResponses()
    encoder = dialect.encoder(dialect.parse(Incoming({**HELLO, "background": True})), SERVED)
    opened = [frame.data for frame in encoder.open()]
    assert [e["type"] for e in opened] == ["response.created", "response.queued"]
    assert opened[0]["response"]["status"] == "queued"
    first = [frame.data for frame in encoder.feed(TextDelta("Hi"))]
    assert first[0]["type"] == "response.in_progress"
    assert first[0]["response"]["status"] == "in_progress"
    assert [e["sequence_number"] for e in opened + first] == list(range(len(opened + first)))


@pytest.mark.parametrize(("progress", "fields", "shown"), [
    (True, {}, [{"done": 4, "total": 9}, {"done": 9, "total": 9}]),
    (False, {}, []),
    (True, {"background": True}, []),  # followed by others, who never asked
])
def test_prompt_progress_only_for_a_call_that_asked(progress, fields, shown):
    dialect = OpenAIResponses()
    call = replace(dialect.parse(Incoming({**HELLO, **fields})), progress=progress)
    out = [frame for frame in encoded(dialect.encoder(call, SERVED), [
        PromptProgress(4, 9), PromptProgress(9, 9), TextDelta("Hi"), Finish(FinishReason.STOP),
        Usage(9, 1)]) if frame.data != DONE]
    assert [e.data["sequence_number"] for e in out] == list(range(len(out)))
    ours = [e for e in out if e.data["type"] == PROMPT_PROGRESS]
    assert [{"done": e.data["done"], "total": e.data["total"]} for e in ours] == shown
    assert all(e.event == PROMPT_PROGRESS for e in ours)
    for frame in out:
        if frame not in ours:
            check_event(frame.data)

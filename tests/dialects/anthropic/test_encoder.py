"""The Messages stream encoder without a server: core events in, events out.
`message_start` and a `ping` first; content blocks with consecutive indexes, one open at
a time (`content_block_start`, its deltas, `content_block_stop`); a thinking block signed
before it closes; a tool call's `input_json_delta` fragments concatenate to its input;
`message_delta` (the stop reason, the final usage) then `message_stop` last. A failure
is an `error` event and nothing after it. A call the server runs itself is shown next
to its result: what the model says after the call waits for that result."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parlance.core.errors import EngineFailure
from parlance.core.events import (
    Finish,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
    ToolsListed,
    Usage,
)
from parlance.core.tools import ToolProvider, ToolSpec
from parlance.dialects.anthropic import AnthropicMessages
from parlance.dialects.base import CallFacts, Incoming
from parlance.engines.base import PromptInfo
from tests.support.anthropic_contract import stream_events
from tests.support.encoding import body, encoded
from tests.support.transcripts import assert_transcript

HELLO = {"model": "fake-model", "max_tokens": 64, "stream": True,
         "messages": [{"role": "user", "content": "Hello!"}]}
SERVED = CallFacts("fake-model", prompts=(PromptInfo("Hello!", 1),))
CALL = [ToolCallStart("call_test", "get_weather"), ToolCallArgs('{"city": '),
        ToolCallArgs('"Paris"}'), ToolCallEnd()]


def sse(events, failure=None, **fields: Any) -> str:
    dialect = AnthropicMessages()
    call = dialect.parse(Incoming({**HELLO, **fields}))
    return body(encoded(dialect.encoder(call, SERVED), events, failure), dialect.framing)


def messages(events, failure=None, **fields: Any) -> list[dict[str, Any]]:
    """The events, each valid for the anthropic SDK's (beta) types."""
    return stream_events(sse(events, failure, **fields), beta=True)


def blocks(events: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(block type, its deltas) per content block, after checking that the blocks came one
    at a time with consecutive indexes."""
    out: list[tuple[str, list[dict[str, Any]]]] = []
    open_index = None
    for event in events:
        kind = event["type"]
        if kind == "content_block_start":
            assert open_index is None and event["index"] == len(out)
            open_index = event["index"]
            out.append((event["content_block"]["type"], []))
        elif kind == "content_block_delta":
            assert event["index"] == open_index
            out[-1][1].append(event["delta"])
        elif kind == "content_block_stop":
            assert event["index"] == open_index
            open_index = None
    assert open_index is None
    return out


# -- the golden transcripts the app sends, from the encoder alone --------------------------


@pytest.mark.parametrize(("name", "events", "failure", "extra"), [
    ("text", [TextDelta("Hi"), TextDelta(" there"), Finish(FinishReason.STOP), Usage(6, 2)],
     None, {}),
    ("thinking", [ReasoningDelta("Short"), ReasoningDelta(" thought."), TextDelta("The answer."),
                  Finish(FinishReason.STOP), Usage(6, 4)],
     None, {"max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024}}),
    ("tool_use", [TextDelta("Let me check.\n"), ToolCallStart("call_test", "get_weather"),
                  ToolCallArgs('{"city": "Paris"}'), ToolCallEnd(),
                  Finish(FinishReason.TOOL_CALLS), Usage(9, 12)], None, {}),
    ("failure", [TextDelta("Hi")], EngineFailure("llama_decode failed"), {}),
])
def test_the_golden_transcripts(fixed_ids, name, events, failure, extra):
    assert_transcript(f"anthropic_{name}.sse", sse(events, failure, **extra))


# -- the contract -------------------------------------------------------------------------------


def test_start_and_ping_first_blocks_in_order_delta_and_stop_last():
    events = messages([ReasoningDelta("Hmm, "), ReasoningDelta("weather."), TextDelta("Let me "),
                       TextDelta("check."), *CALL, Finish(FinishReason.TOOL_CALLS),
                       Usage(9, 12, cached_tokens=5)])
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["message_start", "ping"]
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert events[0]["message"]["usage"] == {"input_tokens": 1, "output_tokens": 0}
    thinking, text, tool = blocks(events)
    assert thinking[0] == "thinking" and [d["type"] for d in thinking[1]] == [
        "thinking_delta", "thinking_delta", "signature_delta"]  # signed last
    assert text == ("text", [{"type": "text_delta", "text": "Let me "},
                             {"type": "text_delta", "text": "check."}])
    assert tool[0] == "tool_use"
    assert json.loads("".join(d["partial_json"] for d in tool[1])) == {"city": "Paris"}
    start = next(e for e in events if e["type"] == "content_block_start" and e["index"] == 2)
    assert start["content_block"]["name"] == "get_weather"
    assert start["content_block"]["id"].startswith("toolu_")
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-2]["usage"] == {"input_tokens": 4, "cache_creation_input_tokens": 0,
                                   "cache_read_input_tokens": 5, "output_tokens": 12}


@pytest.mark.parametrize(("finish", "delta"), [
    (Finish(FinishReason.STOP), {"stop_reason": "end_turn", "stop_sequence": None}),
    (Finish(FinishReason.LENGTH), {"stop_reason": "max_tokens", "stop_sequence": None}),
    (Finish(FinishReason.STOP, stop_sequence="there"),
     {"stop_reason": "stop_sequence", "stop_sequence": "there"}),
])
def test_the_stop_reason(finish, delta):
    events = messages([TextDelta("Hello "), finish, Usage(6, 2)], stop_sequences=["there"])
    assert events[-2]["delta"] == delta


def test_parallel_tool_calls_are_consecutive_blocks_of_their_own():
    second = [ToolCallStart("call_2", "get_weather", call_index=1),
              ToolCallArgs('{"city": "Rome"}', call_index=1), ToolCallEnd(call_index=1)]
    events = messages([*CALL, *second, Finish(FinishReason.TOOL_CALLS), Usage(9, 20)])
    assert [(kind, len(deltas)) for kind, deltas in blocks(events)] == [("tool_use", 2),
                                                                        ("tool_use", 1)]
    ids = [e["content_block"]["id"] for e in events if e["type"] == "content_block_start"]
    assert len(set(ids)) == 2


def test_a_failure_is_an_error_event_and_nothing_after_it():
    events = messages([TextDelta("Hi")], EngineFailure("llama_decode failed"))
    assert [e["type"] for e in events] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "error"]
    assert events[-1]["error"] == {"type": "api_error", "message": "llama_decode failed"}


def test_a_server_side_call_is_shown_next_to_its_result():
    provider = ToolProvider("ephemeral_mcp", "huggingface")
    listed = ToolsListed(provider, (ToolSpec("model_search", "Search models"),))
    start = ToolCallStart("call_1", "model_search", provider=provider)
    events = messages([listed, start, ToolCallArgs('{"q": "llama"}'), ToolCallEnd(),
                       TextDelta("Here "),  # said after the call: held until its result
                       ToolResult("3 models"), TextDelta("they are."),
                       Finish(FinishReason.STOP), Usage(9, 12)])
    kinds = [kind for kind, _ in blocks(events)]
    assert kinds == ["mcp_tool_listing", "mcp_tool_use", "mcp_tool_result", "text"]
    results = [e["content_block"] for e in events if e["type"] == "content_block_start"
               and e["content_block"]["type"] == "mcp_tool_result"]
    assert results[0]["content"] == [{"type": "text", "text": "3 models"}]
    assert "".join(d["text"] for kind, deltas in blocks(events) if kind == "text"
                   for d in deltas) == "Here they are."

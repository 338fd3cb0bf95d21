"""The `/api/v1/chat` event encoder without a server: core events in, events out.
`chat.start` first and `chat.end` last (after an `error` too), carrying the result the
non-stream answer would be; in between, a model load (`model_load.*`), prompt
processing (`prompt_processing.*`, one cycle per model call) and blocks in generation
order, one open at a time (`reasoning.*`, `message.*`); a call the server runs itself
shows its arguments and its outcome (`tool_call.*`)."""

from __future__ import annotations

from typing import Any

import pytest

from parlance.core.errors import EngineFailure
from parlance.core.events import (
    Finish,
    FinishReason,
    ModelLoad,
    PromptProgress,
    ReasoningDelta,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    ToolRefused,
    ToolResult,
    Usage,
)
from parlance.core.tools import ToolProvider
from parlance.dialects.base import CallFacts, Incoming
from parlance.dialects.lmstudio import LMStudioChat
from tests.support.encoding import body, encoded
from tests.support.lmstudio_contract import check_result, checked_events
from tests.support.transcripts import assert_transcript

HELLO = {"model": "fake-model", "input": "Hello!", "stream": True}
SERVED = CallFacts("fake-model", prompts=())
THINKING_ANSWER = [PromptProgress(2, 8), PromptProgress(8, 8), ReasoningDelta("Need to "),
                   ReasoningDelta("greet."), TextDelta("Hi"), TextDelta(" there"),
                   Finish(FinishReason.STOP), Usage(8, 6, 0.25, 0.5, reasoning_tokens=3)]
HUB = ToolProvider("ephemeral_mcp", "huggingface")


def sse(events, failure=None, **fields: Any) -> str:
    dialect = LMStudioChat()
    call = dialect.parse(Incoming({**HELLO, **fields}))
    return body(encoded(dialect.encoder(call, SERVED), events, failure), dialect.framing)


def stream(events, failure=None, **fields: Any) -> list[tuple[str, dict[str, Any]]]:
    """(name, data) per event, each checked against LM Studio's event types."""
    return checked_events(sse(events, failure, **fields))


def names(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [name for name, _ in events]


# -- the golden transcripts the app sends, from the encoder alone --------------------------


@pytest.mark.parametrize(("name", "events", "failure"), [
    ("reasoning", THINKING_ANSWER, None),
    ("failure", [TextDelta("Partial")], EngineFailure("the GPU caught fire")),
])
def test_the_golden_transcripts(fixed_ids, name, events, failure):
    assert_transcript(f"lmstudio_chat_{name}.sse", sse(events, failure))


# -- the contract -------------------------------------------------------------------------------


def blocks(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The blocks (model load, prompt processing, reasoning, message) in order, after
    checking that each ended before the next began and that its events came inside it."""
    order: list[str] = []
    open_block = None
    for name, _ in events:
        kind, _, phase = name.partition(".")
        if kind in ("chat", "tool_call", "error"):
            assert open_block is None, name
        elif phase == "start":
            assert open_block is None, name
            open_block = kind
            order.append(kind)
        else:
            assert open_block == kind, name
            open_block = None if phase == "end" else open_block
    assert open_block is None
    return order


def test_blocks_in_generation_order_one_open_at_a_time():
    events = stream(THINKING_ANSWER)
    assert (events[0][0], events[-1][0]) == ("chat.start", "chat.end")
    assert blocks(events) == ["prompt_processing", "reasoning", "message"]
    assert [d["content"] for n, d in events if n.endswith(".delta")] == [
        "Need to ", "greet.", "Hi", " there"]
    assert [d["progress"] for n, d in events if n == "prompt_processing.progress"] == [0.25, 1.0]
    result = events[-1][1]["result"]
    check_result(result, stored=True)
    assert result["output"] == [{"type": "reasoning", "content": "Need to greet."},
                                {"type": "message", "content": "Hi there"}]


def test_interleaved_reasoning_and_text_open_a_block_each_time():
    events = stream([ReasoningDelta("a"), TextDelta("b"), ReasoningDelta("c"), TextDelta("d"),
                     Finish(FinishReason.STOP), Usage(4, 4)])
    assert blocks(events) == ["reasoning", "message", "reasoning", "message"]
    assert [d["content"] for n, d in events if n.endswith(".delta")] == ["a", "b", "c", "d"]


def test_a_model_load_comes_first_and_ends_with_its_time():
    events = stream([ModelLoad("fake-model", 0.0), ModelLoad("fake-model", 0.5),
                     ModelLoad("fake-model", 1.0, seconds=1.234), TextDelta("Hi"),
                     Finish(FinishReason.STOP), Usage(4, 1)])
    assert blocks(events) == ["model_load", "message"]
    assert names(events)[:5] == ["chat.start", "model_load.start", "model_load.progress",
                                 "model_load.progress", "model_load.end"]
    assert [d["progress"] for n, d in events if n == "model_load.progress"] == [0.0, 0.5]
    assert events[4][1]["load_time_seconds"] == 1.234


def test_a_failure_is_an_error_then_chat_end_with_what_was_said():
    events = stream([TextDelta("Partial")], EngineFailure("the GPU caught fire"))
    assert blocks(events) == ["message"]
    assert names(events)[-4:] == ["message.delta", "message.end", "error", "chat.end"]
    assert events[-2][1]["error"]["type"] == "internal_error"
    assert events[-1][1]["result"]["output"] == [{"type": "message", "content": "Partial"}]


def test_a_server_side_call_shows_its_arguments_and_its_outcome():
    def call(i: int, arguments: str) -> list:
        return [ToolCallStart(f"call_{i}", "model_search", call_index=i, provider=HUB),
                ToolCallArgs(arguments, call_index=i), ToolCallEnd(call_index=i)]

    events = stream([*call(0, '{"limit": 1}'), ToolResult("Showing first 1", call_index=0),
                     *call(1, "not json"),
                     ToolRefused("invalid_arguments", "not JSON", call_index=1),
                     PromptProgress(9, 9), TextDelta("Done."), Finish(FinishReason.STOP),
                     Usage(9, 3)])
    tools = [(n, d) for n, d in events if n.startswith("tool_call.")]
    assert [n for n, _ in tools] == ["tool_call.start", "tool_call.arguments",
                                     "tool_call.success", "tool_call.start",
                                     "tool_call.failure"]
    assert tools[1][1]["arguments"] == {"limit": 1}
    assert tools[2][1]["output"] == "Showing first 1"
    assert tools[4][1]["reason"] == "not JSON"
    # the model's next call has its own prompt processing, then the answer
    assert blocks(events) == ["prompt_processing", "message"]

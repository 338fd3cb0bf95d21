"""The `/api/chat` and `/api/generate` stream encoders without a server: core events in,
NDJSON lines out. Every line but the last says `done: false`; text and thinking come as
they are generated; a tool call comes whole, in a line of its own, once its arguments
are complete (an object, as Ollama's clients read it); the last line says `done: true`
with `done_reason` and the metrics. A failure is a last `{"error": ...}` line, with no
final line. `/api/generate` lines carry `response` instead of `message`."""

from __future__ import annotations

from typing import Any

import pytest

from parlance.core.errors import EngineFailure
from parlance.core.events import (
    Finish,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from parlance.dialects.base import CallFacts, Incoming
from parlance.dialects.ollama import OllamaChat, OllamaGenerate
from parlance.engines.base import PromptInfo
from tests.support.encoding import body, encoded
from tests.support.ollama_contract import check_stream
from tests.support.transcripts import assert_transcript

HELLO = {"model": "fake-model", "messages": [{"role": "user", "content": "Hello!"}]}
ASK = {"model": "fake-model", "system": "Be brief.", "prompt": "Why is the sky blue?"}
# the transcripts were recorded with the model ready after 2 ms (`load_duration`)
SERVED = CallFacts("fake-model", prompts=(PromptInfo("Why is the sky blue?", 7, tuple(range(7))),),
                ready_seconds=0.002)
HI_THERE = [TextDelta("Hi"), TextDelta(" there"), Finish(FinishReason.STOP),
            Usage(6, 2, 0.01, 0.02)]
CALL = [ToolCallStart("call_test", "get_weather"), ToolCallArgs('{"city": '),
        ToolCallArgs('"Paris"}'), ToolCallEnd()]


def ndjson(events, failure=None, *, generate: bool = False, **fields: Any) -> str:
    dialect = OllamaGenerate() if generate else OllamaChat()
    call = dialect.parse(Incoming({**(ASK if generate else HELLO), **fields}))
    return body(encoded(dialect.encoder(call, SERVED), events, failure), dialect.framing)


def lines(events, *, generate: bool = False, **fields: Any) -> list[dict[str, Any]]:
    """The lines, each checked by the `ollama` client's types."""
    return check_stream(ndjson(events, generate=generate, **fields), generate=generate)


# -- the golden transcripts the app sends, from the encoder alone --------------------------


@pytest.mark.parametrize(("name", "events", "failure", "generate"), [
    ("ollama_chat", HI_THERE, None, False),
    ("ollama_chat_tool_calls", [TextDelta("Let me check.\n"), *CALL, Finish(FinishReason.STOP),
                                Usage(9, 12)], None, False),
    ("ollama_chat_failure", [TextDelta("Hi")], EngineFailure("llama_decode failed"), False),
    ("ollama_generate", [TextDelta("Rayleigh"), TextDelta(" scattering."),
                         Finish(FinishReason.STOP, token_ids=(41, 42)), Usage(9, 2, 0.01, 0.02)],
     None, True),
])
def test_the_golden_transcripts(fixed_ids, name, events, failure, generate):
    assert_transcript(f"{name}.ndjson", ndjson(events, failure, generate=generate))


# -- the contract -------------------------------------------------------------------------------


def test_text_lines_then_one_final_line_with_the_metrics():
    out = lines([TextDelta("Hi"), TextDelta(""), TextDelta(" there"), Finish(FinishReason.LENGTH),
                 Usage(6, 2, 0.01, 0.02)])
    assert [(ln["message"]["content"], ln["done"]) for ln in out] == [
        ("Hi", False), (" there", False), ("", True)]
    final = out[-1]
    assert final["done_reason"] == "length"
    assert (final["prompt_eval_count"], final["eval_count"]) == (6, 2)
    assert final["eval_duration"] == 20_000_000  # nanoseconds


def test_thinking_comes_as_it_is_generated_beside_empty_content():
    out = lines([ReasoningDelta("Short"), ReasoningDelta(" thought."), TextDelta("Blue."),
                 Finish(FinishReason.STOP), Usage(3, 4)], think=True)
    assert [(ln["message"].get("thinking"), ln["message"]["content"]) for ln in out] == [
        ("Short", ""), (" thought.", ""), (None, "Blue."), (None, "")]


def test_a_tool_call_comes_whole_once_its_arguments_are_complete():
    second = [ToolCallStart("call_2", "get_weather", call_index=1),
              ToolCallArgs('{"city": "Rome"}', call_index=1), ToolCallEnd(call_index=1)]
    dialect = OllamaChat()
    encoder = dialect.encoder(dialect.parse(Incoming(HELLO)), SERVED)
    assert [encoder.feed(event) for event in CALL[:-1]] == [[], [], []]  # nothing yet
    [line] = encoder.feed(CALL[-1])
    assert line.data["message"]["tool_calls"] == [
        {"id": "call_test", "function": {"index": 0, "name": "get_weather",
                                         "arguments": {"city": "Paris"}}}]
    out = lines([*CALL, *second, Finish(FinishReason.STOP), Usage(9, 20)])
    calls = [ln["message"]["tool_calls"] for ln in out if ln["message"].get("tool_calls")]
    assert [[c["function"]["index"] for c in line] for line in calls] == [[0], [1]]
    assert [line[0]["function"]["arguments"] for line in calls] == [{"city": "Paris"},
                                                                   {"city": "Rome"}]


def test_logprobs_only_when_asked_for():
    token = TokenLogprob("Hi", -0.1, (72, 105))
    events = [TextDelta("Hi", logprobs=(token,)), Finish(FinishReason.STOP), Usage(6, 1)]
    assert "logprobs" not in lines(events)[0]
    assert lines(events, logprobs=True)[0]["logprobs"] == [
        {"token": "Hi", "logprob": -0.1, "bytes": [72, 105]}]


def test_generate_lines_carry_response_and_the_context_last():
    out = lines([ReasoningDelta("Sky."), TextDelta("Blue."),
                 Finish(FinishReason.STOP, token_ids=(41, 42)), Usage(9, 2)],
                generate=True, think=True)
    assert [(ln.get("thinking"), ln["response"], ln["done"]) for ln in out] == [
        ("Sky.", "", False), (None, "Blue.", False), (None, "", True)]
    assert out[-1]["context"] == [0, 1, 2, 3, 4, 5, 6, 41, 42]  # the prompt's, the answer's
    raw = {"model": "fake-model", "prompt": "Once upon a time", "raw": True}
    dialect = OllamaGenerate()
    frames = encoded(dialect.encoder(dialect.parse(Incoming(raw)), SERVED),
                     [TextDelta("x"), Finish(FinishReason.STOP), Usage(9, 1)])
    assert "context" not in frames[-1].data  # a raw prompt returns none


def test_a_failure_is_a_last_error_line_without_a_final_line():
    text = ndjson([TextDelta("Hi")], EngineFailure("llama_decode failed"))
    *before, last = text.splitlines()
    assert last == '{"error":"llama_decode failed"}'
    assert all('"done":false' in line for line in before)

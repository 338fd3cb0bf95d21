"""The Chat Completions and legacy Completions stream encoders without a server: core
events in, chunks out. Each chunk carries the same id, created and model; each choice's
first chunk names the role, before any content of any choice; a tool call's id, type
and name come once, its arguments in fragments that concatenate; `finish_reason` comes
once per choice in a chunk of its own; the usage chunk (when asked for) has no choices;
`[DONE]` ends every stream, after an error frame too."""

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
    TopLogprob,
    Usage,
)
from parlance.dialects.base import DONE, CallFacts, Incoming
from parlance.dialects.openai.chat import OpenAIChat
from parlance.dialects.openai.completions import OpenAICompletions
from parlance.engines.base import PromptInfo
from tests.support.encoding import body, encoded, payloads
from tests.support.transcripts import assert_transcript

HELLO = {"model": "fake-model", "messages": [{"role": "user", "content": "Hello!"}],
         "stream": True}
SERVED = CallFacts("fake-model", prompts=())


def chat(events, failure=None, **fields: Any) -> list[Any]:
    dialect = OpenAIChat()
    call = dialect.parse(Incoming({**HELLO, **fields}))
    frames = encoded(dialect.encoder(call, SERVED), events, failure)
    return payloads(frames)


def deltas(chunks: list[Any], index: int = 0) -> list[dict[str, Any]]:
    return [c["choices"][0]["delta"] for c in chunks[:-1]
            if c["choices"] and c["choices"][0]["index"] == index]


# -- chat: the golden transcripts the app sends, from the encoder alone -------------------


def test_text_with_usage_is_the_golden_transcript(fixed_ids):
    dialect = OpenAIChat()
    call = dialect.parse(Incoming({**HELLO, "stream_options": {"include_usage": True}}))
    frames = encoded(dialect.encoder(call, SERVED), [
        TextDelta("Hi"), TextDelta(" there"), Finish(FinishReason.STOP), Usage(6, 2, 0.05, 0.1)])
    assert_transcript("chat_stream_usage.sse", body(frames, dialect.framing))


def test_a_failure_is_an_error_frame_then_done_as_in_the_golden_transcript(fixed_ids):
    dialect = OpenAIChat()
    frames = encoded(dialect.encoder(dialect.parse(Incoming(HELLO)), SERVED), [TextDelta("Hi")],
                     EngineFailure("llama_decode failed"))
    assert_transcript("chat_stream_engine_failure.sse", body(frames, dialect.framing))


def test_logprobs_are_the_golden_transcript(fixed_ids):
    dialect = OpenAIChat()
    top = (TopLogprob("Hi", -0.1, (72, 105)), TopLogprob("Yo", -2.5, (89, 111)))
    call = dialect.parse(Incoming({**HELLO, "logprobs": True, "top_logprobs": 2, "max_tokens": 1}))
    frames = encoded(dialect.encoder(call, SERVED), [
        TextDelta("Hi", logprobs=(TokenLogprob("Hi", -0.1, (72, 105), top),)),
        Finish(FinishReason.LENGTH), Usage(6, 1)])
    assert_transcript("chat_stream_logprobs.sse", body(frames, dialect.framing))


# -- chat: the contract ---------------------------------------------------------------------


def test_one_envelope_role_first_finish_alone_and_done_last():
    chunks = chat([TextDelta("Hi"), TextDelta(""), TextDelta(" there"),
                   Finish(FinishReason.STOP), Usage(6, 2)])
    assert chunks[-1] == DONE
    [(_, kind, _, model)] = {(c["id"], c["object"], c["created"], c["model"])
                             for c in chunks[:-1]}
    assert (kind, model) == ("chat.completion.chunk", "fake-model")
    assert deltas(chunks) == [{"role": "assistant"}, {"content": "Hi"}, {"content": " there"},
                              {}]  # the empty delta is dropped
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None, None, None, "stop"]
    assert all(c["usage"] is None for c in chunks[:-1])  # no usage chunk unless asked


def test_the_usage_chunk_has_no_choices_and_the_whole_request_counts():
    chunks = chat([TextDelta("Hi"), Finish(FinishReason.LENGTH), Usage(6, 1, cached_tokens=4)],
                  stream_options={"include_usage": True})
    *_, last, done = chunks
    assert done == DONE and last["choices"] == []
    assert last["usage"]["prompt_tokens"] == 6 and last["usage"]["completion_tokens"] == 1
    assert last["usage"]["total_tokens"] == 7
    assert last["usage"]["prompt_tokens_details"] == {"cached_tokens": 4}


def test_tool_calls_name_themselves_once_and_their_arguments_concatenate():
    events = [ToolCallStart("call_a", "get_weather", call_index=0),
              ToolCallArgs('{"city": ', call_index=0), ToolCallArgs('"Paris"}', call_index=0),
              ToolCallEnd(call_index=0),
              ToolCallStart("call_b", "get_time", call_index=1),
              ToolCallArgs("", call_index=1), ToolCallArgs("{}", call_index=1),
              ToolCallEnd(call_index=1),
              Finish(FinishReason.TOOL_CALLS), Usage(9, 12)]
    chunks = chat(events)
    calls: dict[int, dict[str, Any]] = {}
    for delta in deltas(chunks)[1:-1]:
        [call] = delta["tool_calls"]
        if "id" in call:
            assert call["index"] not in calls and call["function"]["arguments"] == ""
            calls[call["index"]] = {"id": call["id"], "type": call["type"],
                                    "name": call["function"]["name"], "arguments": ""}
        else:
            assert set(call) == {"index", "function"} and call["function"]["arguments"]
            calls[call["index"]]["arguments"] += call["function"]["arguments"]
    assert calls == {
        0: {"id": "call_a", "type": "function", "name": "get_weather",
            "arguments": '{"city": "Paris"}'},
        1: {"id": "call_b", "type": "function", "name": "get_time", "arguments": "{}"}}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_n_choices_each_open_with_the_role_before_any_content():
    chunks = chat([TextDelta("A", index=0), TextDelta("B", index=1),
                   Finish(FinishReason.STOP, index=1), TextDelta("a", index=0),
                   Finish(FinishReason.LENGTH, index=0), Usage(6, 3)], n=2)
    assert [c["choices"][0]["delta"] for c in chunks[:2]] == [{"role": "assistant"}] * 2
    assert [c["choices"][0]["index"] for c in chunks[:2]] == [0, 1]
    assert all(len(c["choices"]) == 1 for c in chunks[:-1])
    assert deltas(chunks, 0)[1:] == [{"content": "A"}, {"content": "a"}, {}]
    assert deltas(chunks, 1)[1:] == [{"content": "B"}, {}]
    finishes = [(c["choices"][0]["index"], c["choices"][0]["finish_reason"])
                for c in chunks[:-1] if c["choices"][0]["finish_reason"]]
    assert finishes == [(1, "stop"), (0, "length")]


def test_reasoning_is_reasoning_content_and_a_stop_string_is_named():
    chunks = chat([ReasoningDelta("Hmm."), ReasoningDelta(""), TextDelta("Hi"),
                   Finish(FinishReason.STOP, stop_sequence="\n\n"), Usage(6, 3)])
    assert deltas(chunks)[1:] == [{"reasoning_content": "Hmm."}, {"content": "Hi"}, {}]
    assert chunks[-2]["choices"][0]["stop_reason"] == "\n\n"


def test_a_failure_after_text_ends_with_the_error_then_done():
    chunks = chat([TextDelta("Hi")], EngineFailure("llama_decode failed"))
    assert chunks[-1] == DONE
    assert chunks[-2] == {"error": {"message": "llama_decode failed", "type": "server_error",
                                    "param": None, "code": "engine_error"}}
    assert not any(c["choices"][0]["finish_reason"] for c in chunks[:-2])


# -- completions ------------------------------------------------------------------------------


PROMPT = "Once upon a time"


def completions(events, failure=None, **fields: Any) -> list[Any]:
    dialect = OpenAICompletions()
    call = dialect.parse(Incoming({"model": "fake-model", "prompt": PROMPT, "stream": True,
                                   **fields}))
    served = CallFacts("fake-model", prompts=(PromptInfo(PROMPT, 4),))
    return payloads(encoded(dialect.encoder(call, served), events, failure))


def test_completions_with_usage_is_the_golden_transcript(fixed_ids):
    dialect = OpenAICompletions()
    call = dialect.parse(Incoming({"prompt": PROMPT, "max_tokens": 2, "stream": True,
                          "stream_options": {"include_usage": True}}))
    served = CallFacts("fake-model", prompts=(PromptInfo(PROMPT, 4),))
    frames = encoded(dialect.encoder(call, served), [
        TextDelta(" Once"), TextDelta(" upon"), Finish(FinishReason.LENGTH), Usage(4, 2)])
    assert_transcript("completions_stream_usage.sse", body(frames, dialect.framing))


def test_completions_text_chunks_then_a_finish_chunk_then_done():
    chunks = completions([TextDelta(" Once"), TextDelta(""), TextDelta(" upon"),
                          Finish(FinishReason.LENGTH), Usage(4, 2)])
    assert chunks[-1] == DONE
    assert {(c["object"], c["model"]) for c in chunks[:-1]} == {("text_completion", "fake-model")}
    assert [(c["choices"][0]["text"], c["choices"][0]["finish_reason"]) for c in chunks[:-1]] == [
        (" Once", None), (" upon", None), ("", "length")]
    assert all("usage" not in c for c in chunks[:-1])


def _lp(text: str, logprob: float) -> TokenLogprob:
    return TokenLogprob(text, logprob, tuple(text.encode()),
                        (TopLogprob(text, logprob, tuple(text.encode())),))


@pytest.mark.parametrize(("n", "echo", "start"), [(1, False, len(PROMPT)), (2, False, len(PROMPT)),
                                                  (1, True, 0)])
def test_completions_text_offsets_run_on_across_chunks_per_choice(n, echo, start):
    events = [event for index in range(n) for event in (
        TextDelta(" Once", index=index, logprobs=(_lp(" Once", -0.5),)),
        TextDelta(" upon a", index=index, logprobs=(_lp(" upon", -0.25), _lp(" a", -0.1))))]
    chunks = completions([*events, *(Finish(FinishReason.LENGTH, index=i) for i in range(n)),
                          Usage(4, 3 * n)], logprobs=1, n=n, echo=echo)
    for index in range(n):
        lps = [c["choices"][0]["logprobs"] for c in chunks[:-1]
               if c["choices"][0]["index"] == index and c["choices"][0]["logprobs"]]
        assert [lp["tokens"] for lp in lps] == [[" Once"], [" upon", " a"]]
        assert [lp["text_offset"] for lp in lps] == [[start], [start + 5, start + 10]]
        assert [lp["top_logprobs"] for lp in lps] == [[{" Once": -0.5}],
                                                      [{" upon": -0.25}, {" a": -0.1}]]

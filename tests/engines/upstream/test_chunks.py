"""Upstream stream shapes, as vLLM, SGLang, llama-server and Ollama document and send
them (`streams/*.sse`, each headed by where its shape comes from), mapped to core
events. vLLM and SGLang cannot run on these machines, so their shapes are covered
here; llama-server and Parlance replicas are exercised for real elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parlance.core.errors import UpstreamFailure
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
)
from parlance.engines.upstream.chunks import ChoiceMapper, StreamError, UpstreamUsage
from parlance.engines.upstream.sse import SseSplitter

STREAMS = Path(__file__).parent / "streams"


def replay(name: str, mapper: ChoiceMapper, *, piece: int = 7) -> tuple[list, bool]:
    """(events, saw [DONE]) of a recorded stream fed in `piece`-byte network reads, so
    that events and lines straddle reads."""
    raw = (STREAMS / name).read_bytes()
    splitter = SseSplitter()
    events, done = [], False
    for start in range(0, len(raw), piece):
        for data in splitter.feed(raw[start:start + piece]):
            if data == b"[DONE]":
                done = True
            else:
                events += mapper.feed(json.loads(data))
    assert not splitter.end()
    return events, done


def test_vllm_reasoning_field_and_cached_usage():
    mapper = ChoiceMapper(0)
    events, done = replay("vllm_reasoning.sse", mapper)
    assert done
    assert events == [ReasoningDelta("9.11 vs"), ReasoningDelta(" 9.8: compare tenths."),
                      TextDelta("9.8 is"), TextDelta(" greater."), Finish(FinishReason.STOP)]
    assert mapper.usage() == UpstreamUsage(18, 23, 0, 16)


def test_vllm_reasoning_under_both_names_is_taken_once():
    mapper = ChoiceMapper(0)
    events, _ = replay("vllm_reasoning_both_fields.sse", mapper)
    assert events == [ReasoningDelta("Think."), TextDelta("Done."), Finish(FinishReason.STOP)]
    assert mapper.usage() == UpstreamUsage(5, 3, reasoning_tokens=2)


def test_vllm_legacy_reasoning_content_and_length_finish():
    mapper = ChoiceMapper(3)  # renumbered: this upstream stream is choice 3 downstream
    events, _ = replay("vllm_legacy_reasoning_content.sse", mapper)
    assert events == [ReasoningDelta("Okay", 3), TextDelta("Yes.", 3),
                      Finish(FinishReason.LENGTH, 3)]


def test_vllm_parallel_tool_calls_never_interleave():
    mapper = ChoiceMapper(0)
    events, _ = replay("vllm_tool_calls.sse", mapper)
    assert events == [
        ToolCallStart("chatcmpl-tool-6b1f", "get_weather", 0, 0),
        ToolCallArgs('{"city": "', 0, 0), ToolCallArgs('Paris"}', 0, 0), ToolCallEnd(0, 0),
        ToolCallStart("chatcmpl-tool-77aa", "get_time", 0, 1),
        ToolCallArgs('{"zone": "CET"}', 0, 1), ToolCallEnd(0, 1),
        Finish(FinishReason.TOOL_CALLS)]


def test_ollama_whole_call_in_one_delta_finishes_as_tool_calls():
    mapper = ChoiceMapper(0)
    events, _ = replay("ollama_tool_call.sse", mapper)
    assert events == [ToolCallStart("call_z1", "get_weather"),
                      ToolCallArgs('{"city":"Oslo"}'), ToolCallEnd(),
                      Finish(FinishReason.TOOL_CALLS)]
    assert mapper.usage() == UpstreamUsage(150, 20)


def test_vllm_stop_reason_names_the_stop_string():
    mapper = ChoiceMapper(0, stops=("three", "four"))
    events, _ = replay("vllm_stop_string.sse", mapper)
    assert events[-1] == Finish(FinishReason.STOP, 0, "three")


def test_a_stop_reason_that_is_no_request_stop_string_is_not_reported():
    mapper = ChoiceMapper(0, stops=("four",))
    events, _ = replay("vllm_stop_string.sse", mapper)
    assert events[-1] == Finish(FinishReason.STOP, 0, None)


def test_vllm_midstream_error_object_is_a_failure():
    """Said to the client by what failed, never by what the upstream wrote (it may hold
    internals); the operator's log gets that."""
    mapper = ChoiceMapper(0)
    with pytest.raises(StreamError) as caught:
        replay("vllm_midstream_error.sse", mapper)
    assert isinstance(caught.value.error, UpstreamFailure)
    assert caught.value.error.message == ("The upstream server reported an error while "
                                          "generating.")
    assert caught.value.error.code == "upstream_error"
    assert caught.value.said == "The engine is dead."


def test_vllm_completion_logprobs():
    mapper = ChoiceMapper(0)
    events, _ = replay("vllm_completions_logprobs.sse", mapper)
    assert events == [
        TextDelta(" there", 0, (TokenLogprob(" there", -0.25, tuple(b" there"),
                                             (TopLogprob(" there", -0.25, tuple(b" there")),)),)),
        TextDelta(" was", 0, (TokenLogprob(" was", -0.5, tuple(b" was"),
                                           (TopLogprob(" was", -0.5, tuple(b" was")),
                                            TopLogprob(",", -1.5, tuple(b",")))),)),
        Finish(FinishReason.LENGTH)]
    assert mapper.usage() == UpstreamUsage(4, 2)


def test_sglang_reasoning_content_with_null_content():
    mapper = ChoiceMapper(0, stops=("END",))
    events, _ = replay("sglang_reasoning.sse", mapper)
    # matched_stop is a token id here (the EOS), not a stop string of the request
    assert events == [ReasoningDelta("Hmm,"), ReasoningDelta(" easy."), TextDelta("Four."),
                      Finish(FinishReason.STOP)]
    assert mapper.usage() == UpstreamUsage(11, 9)


def test_llama_server_cached_tokens_from_timings():
    mapper = ChoiceMapper(0)
    events, _ = replay("llama_server_chat.sse", mapper)
    assert events == [TextDelta("Hi"), Finish(FinishReason.STOP)]
    assert mapper.usage() == UpstreamUsage(30, 2, 0, 24)


def test_chat_logprobs_with_bytes():
    mapper = ChoiceMapper(0)
    chunk = {"choices": [{"index": 0, "delta": {"content": "é"}, "logprobs": {"content": [
        {"token": "é", "logprob": -0.1, "bytes": [195, 169],
         "top_logprobs": [{"token": "é", "logprob": -0.1, "bytes": [195, 169]},
                          {"token": "e", "logprob": -2.0, "bytes": None}]}]}}]}
    assert mapper.feed(chunk) == [TextDelta("é", 0, (TokenLogprob(
        "é", -0.1, (195, 169), (TopLogprob("é", -0.1, (195, 169)),
                                TopLogprob("e", -2.0, (101,)))),))]


def test_freeform_call_is_given_back_as_raw_input():
    mapper = ChoiceMapper(0, freeform=frozenset({"apply_patch"}))
    events = mapper.feed({"choices": [{"delta": {"tool_calls": [
        {"index": 0, "id": "c1", "function": {"name": "apply_patch", "arguments": '{"inp'}}]}}]})
    events += mapper.feed({"choices": [{"delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": 'ut": "*** Begin\\nx"}'}}]},
        "finish_reason": "tool_calls"}]})
    assert events == [ToolCallStart("c1", "apply_patch"), ToolCallArgs("*** Begin\nx"),
                      ToolCallEnd(), Finish(FinishReason.TOOL_CALLS)]


def test_arguments_before_the_name_are_held_until_it_comes():
    mapper = ChoiceMapper(0)
    events = mapper.feed({"choices": [{"delta": {"tool_calls": [
        {"index": 0, "id": "c1", "function": {"arguments": '{"a"'}}]}}]})
    assert events == []
    events = mapper.feed({"choices": [{"delta": {"tool_calls": [
        {"index": 0, "function": {"name": "f", "arguments": ": 1}"}}]}}]})
    assert events == [ToolCallStart("c1", "f"), ToolCallArgs('{"a"'), ToolCallArgs(": 1}")]


def test_no_usage_chunk_counts_the_deltas():
    mapper = ChoiceMapper(0)
    mapper.feed({"choices": [{"delta": {"content": "a"}}]})
    mapper.feed({"choices": [{"delta": {"content": "b"}, "finish_reason": "stop"}]})
    assert mapper.usage() == UpstreamUsage(0, 2, reported=False)


def test_a_clean_end_without_finish_finishes_the_choice():
    mapper = ChoiceMapper(2)
    mapper.feed({"choices": [{"delta": {"content": "a"}}]})
    assert mapper.end_of_stream() == [Finish(FinishReason.STOP, 2)]
    assert mapper.end_of_stream() == []


def test_sse_multiline_data_crlf_and_comments():
    splitter = SseSplitter()
    out = splitter.feed(b": ping\r\n\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nevent: x\ndata:[DONE]")
    assert out == [b'{"a":\n1}']
    assert splitter.end() == [b"[DONE]"]


def test_respelled_tool_names_come_back_as_the_request_has_them():
    mapper = ChoiceMapper(0, names={"ns_tool_1a2b3c4d": "ns.tool"})
    events = mapper.feed({"choices": [{"delta": {"tool_calls": [
        {"index": 0, "id": "c1", "function": {"name": "ns_tool_1a2b3c4d", "arguments": "{}"}}]},
        "finish_reason": "tool_calls"}]})
    assert events[0] == ToolCallStart("c1", "ns.tool")

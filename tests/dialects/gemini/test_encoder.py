"""The streamGenerateContent encoder without a server: core events in, chunks out.
Each chunk is a GenerateContentResponse with `modelVersion`, `responseId` and the
usage so far; text streams as it comes, a function call comes whole; the last chunk
carries each candidate's last part, its `finishReason` and the final usage. With
`alt=sse` the chunks are `data:` lines (no event names, no `[DONE]`), without it one
JSON array. Thoughts are parts with `thought: true` only when the request asked to
include them; their `thoughtSignature` rides on the first part after them either way.
A failure is a last `{"error": …}` chunk."""

from __future__ import annotations

import json
from typing import Any

from parlance.core.accumulate import accumulate
from parlance.core.errors import EngineFailure, Overloaded
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
from parlance.dialects.base import CallFacts, Incoming
from parlance.dialects.gemini import GenerateContent
from parlance.dialects.gemini.thoughts import reasoning_of
from parlance.engines.base import PromptInfo
from tests.support.encoding import body, encoded

HELLO = {"contents": [{"role": "user", "parts": [{"text": "Hello!"}]}]}
SERVED = CallFacts("fake-model", prompts=(PromptInfo("Hello!", 5),))
CALL = [ToolCallStart("call_1", "get_weather"), ToolCallArgs('{"city": '),
        ToolCallArgs('"Paris"}'), ToolCallEnd()]
TEXT = [TextDelta("Hel"), TextDelta("lo")]
END = [Finish(FinishReason.STOP), Usage(5, 2)]
THINKING = {"generationConfig": {"thinkingConfig": {"includeThoughts": True,
                                                    "thinkingBudget": 1024}}}


def _call(sse: bool = True, **fields: Any):
    dialect = GenerateContent(streaming=True)
    query = {"alt": "sse"} if sse else {}
    return dialect, dialect.parse(Incoming({**HELLO, **fields}, {"model": "fake-model"}, query))


def stream(events, failure=None, *, sse: bool = True, **fields: Any) -> str:
    dialect, call = _call(sse, **fields)
    framing = call.framing or dialect.framing
    return body(encoded(dialect.encoder(call, SERVED), events, failure), framing)


def chunks(events, failure=None, **fields: Any) -> list[dict[str, Any]]:
    """The SSE stream's chunks, after checking its framing: `data:` lines only."""
    text = stream(events, failure, **fields)
    frames = text.split("\n\n")
    assert frames[-1] == ""
    out = []
    for frame in frames[:-1]:
        assert frame.startswith("data: ") and "\n" not in frame, frame
        out.append(json.loads(frame.removeprefix("data: ")))
    return out


def parts(chunk: dict[str, Any], index: int = 0) -> list[dict[str, Any]]:
    return chunk["candidates"][index]["content"]["parts"]


def test_text_streams_and_the_last_chunk_finishes_with_the_usage():
    out = chunks([*TEXT, *END])
    assert [parts(c) for c in out] == [[{"text": "Hel"}], [{"text": "lo"}]]
    for chunk in out:
        assert chunk["modelVersion"] == "fake-model"
        assert chunk["responseId"] == out[0]["responseId"]
        assert chunk["candidates"][0]["content"]["role"] == "model"
        assert chunk["candidates"][0]["index"] == 0
    assert "finishReason" not in out[0]["candidates"][0]
    assert out[0]["usageMetadata"] == {
        "promptTokenCount": 5, "totalTokenCount": 5,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 5}]}
    assert out[-1]["candidates"][0]["finishReason"] == "STOP"
    assert out[-1]["usageMetadata"] == {
        "promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 5}]}


def test_without_alt_sse_the_stream_is_one_json_array_of_the_same_chunks():
    events = [*TEXT, *END]
    array = json.loads(stream(events, sse=False))
    sse = chunks(events)
    assert isinstance(array, list) and len(array) == len(sse)
    for a, b in zip(array, sse, strict=True):
        assert {**a, "responseId": ""} == {**b, "responseId": ""}


def test_a_json_array_stream_that_fails_is_still_one_array_ending_in_the_error():
    array = json.loads(stream([TextDelta("Hi"), TextDelta("!")], EngineFailure("boom"),
                              sse=False))
    assert [parts(c) for c in array[:-1]] == [[{"text": "Hi"}], [{"text": "!"}]]
    assert array[-1] == {"error": {"code": 500, "message": "boom", "status": "INTERNAL"}}
    assert json.loads(stream([], Overloaded("busy"), sse=False)) == [
        {"error": {"code": 429, "message": "busy", "status": "RESOURCE_EXHAUSTED"}}]


def test_a_failure_is_a_last_error_chunk_after_what_was_said():
    out = chunks([TextDelta("Hi")], EngineFailure("the engine broke"))
    assert parts(out[0]) == [{"text": "Hi"}]
    assert out[-1] == {"error": {"code": 500, "message": "the engine broke",
                                 "status": "INTERNAL"}}


def test_a_function_call_comes_whole_with_the_finish_and_gemini_finish_message():
    out = chunks([TextDelta("Let me look."), *CALL, Finish(FinishReason.TOOL_CALLS),
                  Usage(5, 9)])
    assert parts(out[0]) == [{"text": "Let me look."}]
    last = out[-1]["candidates"][0]
    assert last["content"]["parts"] == [{"functionCall": {
        "id": "call_1", "name": "get_weather", "args": {"city": "Paris"}}}]
    assert last["finishReason"] == "STOP"
    assert last["finishMessage"] == "Model generated function call(s)."
    assert out[-1]["usageMetadata"]["candidatesTokenCount"] == 9


def test_parallel_calls_each_come_whole_in_order():
    second = [ToolCallStart("call_2", "get_time", call_index=1),
              ToolCallArgs("{}", call_index=1), ToolCallEnd(call_index=1)]
    out = chunks([*CALL, *second, Finish(FinishReason.TOOL_CALLS), Usage(5, 9)])
    names = [p["functionCall"]["name"] for c in out for p in parts(c)]
    assert names == ["get_weather", "get_time"]


def test_max_tokens_is_max_tokens():
    out = chunks([TextDelta("abc"), Finish(FinishReason.LENGTH), Usage(5, 3)])
    assert out[-1]["candidates"][0]["finishReason"] == "MAX_TOKENS"


def test_shown_thoughts_are_thought_parts_and_the_answer_carries_their_signature():
    events = [ReasoningDelta("Think"), ReasoningDelta("ing."), TextDelta("Answer"),
              Finish(FinishReason.STOP), Usage(5, 7, reasoning_tokens=4)]
    out = chunks(events, **THINKING)
    shown = [p for c in out for p in parts(c)]
    assert shown[:2] == [{"text": "Think", "thought": True},
                         {"text": "ing.", "thought": True}]
    answer = shown[2]
    assert answer["text"] == "Answer"
    assert reasoning_of(answer["thoughtSignature"]) == "Thinking."
    assert out[-1]["usageMetadata"]["thoughtsTokenCount"] == 4
    assert out[-1]["usageMetadata"]["candidatesTokenCount"] == 3
    assert out[-1]["usageMetadata"]["totalTokenCount"] == 12


def test_hidden_thoughts_still_sign_the_first_part_after_them():
    events = [ReasoningDelta("Secret plan."), *CALL, Finish(FinishReason.TOOL_CALLS),
              Usage(5, 7, reasoning_tokens=3)]
    out = chunks(events)  # includeThoughts not set
    shown = [p for c in out for p in parts(c)]
    assert not any(p.get("thought") for p in shown)
    assert shown[0]["functionCall"]["name"] == "get_weather"
    assert reasoning_of(shown[0]["thoughtSignature"]) == "Secret plan."


def test_a_signature_replayed_in_the_next_turn_gives_the_model_its_thoughts_back():
    events = [ReasoningDelta("Because."), *CALL, Finish(FinishReason.TOOL_CALLS), Usage(5, 7)]
    model_turn = chunks(events)[-1]["candidates"][0]["content"]
    dialect = GenerateContent()
    call = dialect.parse(Incoming({"contents": [
        HELLO["contents"][0], model_turn,
        {"role": "user", "parts": [{"functionResponse": {
            "id": "call_1", "name": "get_weather", "response": {"output": "Sunny"}}}]}]},
        {"model": "fake-model"}))
    messages = call.request.prompts[0].messages
    assert messages[1].reasoning == "Because."
    assert messages[1].tool_calls[0].id == "call_1"
    assert messages[2].role == "tool" and messages[2].content == "Sunny"
    assert messages[2].tool_call_id == "call_1"


def test_candidates_stream_side_by_side_and_finish_together():
    events = [TextDelta("a", index=0), TextDelta("b", index=1), TextDelta("c", index=0),
              Finish(FinishReason.STOP, index=0), Finish(FinishReason.LENGTH, index=1),
              Usage(5, 3)]
    out = chunks(events, generationConfig={"candidateCount": 2})
    last = out[-1]["candidates"]
    assert [(c["index"], c["finishReason"]) for c in last] == [(0, "STOP"), (1, "MAX_TOKENS")]
    text: dict[int, str] = {0: "", 1: ""}
    for chunk in out:
        for cand in chunk["candidates"]:
            text[cand["index"]] += "".join(p.get("text", "") for p in cand["content"]["parts"])
    assert text == {0: "ac", 1: "b"}


def test_logprobs_ride_on_each_chunk_they_belong_to():
    lp = (TokenLogprob("Hi", -0.5, (72, 105), (TopLogprob("Hi", -0.5, (72, 105)),)),)
    out = chunks([TextDelta("Hi", logprobs=lp), *END],
                 generationConfig={"responseLogprobs": True, "logprobs": 1})
    result = out[-1]["candidates"][0]["logprobsResult"]
    assert result["chosenCandidates"] == [{"token": "Hi", "logProbability": -0.5}]
    assert result["topCandidates"] == [{"candidates": [{"token": "Hi",
                                                        "logProbability": -0.5}]}]


def test_the_non_stream_response_is_what_the_stream_adds_up_to():
    events = [ReasoningDelta("Hmm."), TextDelta("Hel"), TextDelta("lo"), *CALL,
              Finish(FinishReason.TOOL_CALLS), Usage(5, 9, reasoning_tokens=2,
                                                      cached_tokens=3)]
    dialect = GenerateContent()
    call = dialect.parse(Incoming({**HELLO, **THINKING}, {"model": "models/fake-model"}))
    answer = dialect.render(call, SERVED, accumulate(events))
    cand = answer["candidates"][0]
    assert cand["content"]["role"] == "model"
    got = cand["content"]["parts"]
    assert got[0] == {"text": "Hmm.", "thought": True}
    assert got[1]["text"] == "Hello" and reasoning_of(got[1]["thoughtSignature"]) == "Hmm."
    assert got[2] == {"functionCall": {"id": "call_1", "name": "get_weather",
                                       "args": {"city": "Paris"}}}
    assert cand["finishReason"] == "STOP" and cand["index"] == 0
    assert answer["usageMetadata"] == {
        "promptTokenCount": 5, "candidatesTokenCount": 7, "thoughtsTokenCount": 2,
        "cachedContentTokenCount": 3, "totalTokenCount": 14,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 5}]}
    assert answer["modelVersion"] == "fake-model" and answer["responseId"]

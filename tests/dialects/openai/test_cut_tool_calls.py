"""Tool calls cut by the token cap, and calls repeated word for word, through Chat
Completions and Responses with the fake engine: call markup never
reaches content, streamed or not; an unfinished call is dropped and the answer ends
by the dialect's rule for the cap; a repeated call ends the answer for its calls."""

from __future__ import annotations

import json

import pytest

from parlance.core.events import Finish, FinishReason, Usage
from parlance.engines.fake import Generated
from tests.support.openresponses import check_response
from tests.support.openresponses import checked_events as response_events
from tests.support.sse import sse_data

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_ASK = {"model": "fake-model", "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [{"type": "function", "function": {"name": "get_weather",
                                                        "parameters": PARAMS}}],
            "tool_choice": "required", "max_tokens": 48}
RESPONSES_ASK = {"model": "fake-model", "input": "Weather in Paris?", "tool_choice": "required",
                 "tools": [{"type": "function", "name": "get_weather", "parameters": PARAMS}],
                 "max_output_tokens": 48}
CALL = ['<tool', '_call>\n{"name": "get_', 'weather", "argu', 'ments": {"ci', 'ty": "Par',
        'is"}}\n</tool_call>']
# The case: the cap cut a second call before its name was whole.
CUT = [*CALL, "\n<tool_", 'call>\n{"name": "get_']
# The model writing the same call until the cap.
REPEATED = [*CALL, "\n", *CALL, "\n", *CALL[:3]]


def script(texts: list[str], reason: FinishReason) -> list:
    return [*(Generated(t) for t in texts), Finish(reason), Usage(20, 48)]


def no_markup(text: str | None) -> bool:
    return not text or ("<tool_call" not in text and '{"name"' not in text)


def chat_stream(frames: list) -> tuple[str, list[dict], str]:
    """(content, calls with their whole arguments, finish reason) of a Chat stream."""
    assert frames[-1] == "[DONE]"
    content, calls, finish = "", {}, None
    for frame in frames[:-1]:
        if not frame.get("choices"):
            continue
        choice = frame["choices"][0]
        content += choice["delta"].get("content") or ""
        for delta in choice["delta"].get("tool_calls") or []:
            call = calls.setdefault(delta["index"], {"name": "", "arguments": ""})
            call["name"] += delta["function"].get("name") or ""
            call["arguments"] += delta["function"].get("arguments") or ""
        finish = choice["finish_reason"] or finish
    return content, [calls[i] for i in sorted(calls)], finish


WHOLE = [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]


@pytest.mark.parametrize(("texts", "reason", "finish"), [
    (CUT, FinishReason.LENGTH, "length"),  # complete calls only, and the cap said so
    (REPEATED, FinishReason.LENGTH, "tool_calls"),  # it stopped at the repeat
])
async def test_chat_streamed_and_not(client, fake_engine, texts, reason, finish):
    fake_engine.enqueue(*script(texts, reason))
    body = (await client.post(CHAT, json=CHAT_ASK)).json()
    choice = body["choices"][0]
    assert choice["message"]["content"] is None
    assert [c["function"] for c in choice["message"]["tool_calls"]] == WHOLE
    assert choice["finish_reason"] == finish

    fake_engine.enqueue(*script(texts, reason))
    frames = sse_data((await client.post(CHAT, json={**CHAT_ASK, "stream": True})).text)
    content, calls, streamed_finish = chat_stream(frames)
    assert content == "" and calls == WHOLE and streamed_finish == finish
    assert all(no_markup(f["choices"][0]["delta"].get("content"))
               for f in frames[:-1] if f.get("choices"))


async def test_chat_text_before_a_cut_call_stays_and_has_no_markup(client, fake_engine):
    fake_engine.enqueue(*script(["Let me check. ", *CUT], FinishReason.LENGTH))
    message = (await client.post(CHAT, json={**CHAT_ASK, "tool_choice": "auto"})).json()[
        "choices"][0]["message"]
    assert message["content"] == "Let me check. "
    assert [c["function"] for c in message["tool_calls"]] == WHOLE


@pytest.mark.parametrize(("texts", "reason", "status"), [
    (CUT, FinishReason.LENGTH, "incomplete"),
    (REPEATED, FinishReason.LENGTH, "completed"),
])
async def test_responses_streamed_and_not(client, fake_engine, texts, reason, status):
    fake_engine.enqueue(*script(texts, reason))
    body = (await client.post(RESPONSES, json=RESPONSES_ASK)).json()
    check_response(body)
    assert body["status"] == status
    if status == "incomplete":
        assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [(i["type"], i["name"], json.loads(i["arguments"])) for i in body["output"]] == [
        ("function_call", "get_weather", {"city": "Paris"})]  # no message item

    fake_engine.enqueue(*script(texts, reason))
    frames = response_events((await client.post(RESPONSES, json={**RESPONSES_ASK,
                                                                 "stream": True})).text)
    names = [name for name, _ in frames]
    assert "response.output_text.delta" not in names
    assert names[-2] == f"response.{status}"
    done = frames[-2][1]["response"]
    assert [(i["type"], i["arguments"]) for i in done["output"]] == [
        ("function_call", '{"city": "Paris"}')]

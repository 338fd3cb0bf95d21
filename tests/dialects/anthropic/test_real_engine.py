"""Anthropic `/v1/messages` on the REAL engine (SmolLM2, greedy), with the anthropic SDK
as oracle (strict validation). Expected texts come from another run of the model."""

from __future__ import annotations

import json

import httpx2
import pytest
from anthropic import AsyncAnthropic

from tests.support.anthropic_contract import check_message
from tests.support.real_engine import (
    CHAT_PROMPT,
    LONG_CHAT_PROMPT,
    MODEL_ID,
    REQUEST_TIMEOUT,
    make_app,
    never_ending,
)

pytestmark = pytest.mark.model
# This SDK's create() no longer takes sampling parameters; Parlance still reads them.
GREEDY = {"temperature": 0.0}

WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "input_schema": {"$schema": "http://json-schema.org/draft-07/schema#",
                            "type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"], "additionalProperties": False}}


@pytest.fixture
def sdk(llama) -> AsyncAnthropic:
    transport = httpx2.ASGITransport(app=make_app(llama))
    return AsyncAnthropic(base_url="http://parlance.test", api_key="sk-test", max_retries=0,
                          timeout=REQUEST_TIMEOUT, _strict_response_validation=True,
                          http_client=httpx2.AsyncClient(transport=transport))


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


async def test_create_and_stream_agree_and_count_tokens_matches(sdk):
    asked = {"model": MODEL_ID, "max_tokens": 40,
             "extra_body": GREEDY, "messages": user(CHAT_PROMPT)}
    message = await sdk.messages.create(**asked)
    check_message(message.model_dump(mode="json", exclude_none=True))
    async with sdk.messages.stream(**asked) as stream:
        streamed = "".join([text async for text in stream.text_stream])
        final = await stream.get_final_message()
    assert message.content[0].text and streamed == message.content[0].text
    assert final.stop_reason == message.stop_reason
    assert (message.stop_reason == "max_tokens") == (message.usage.output_tokens == 40)
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens == message.usage.output_tokens > 0
    # The second request found the first's prompt in the cache: all of it but the token
    # evaluated again for fresh logits is a cache read, the whole prompt what count_tokens says.
    assert final.usage.cache_read_input_tokens > 0 and final.usage.input_tokens == 1
    counted = await sdk.messages.count_tokens(model=MODEL_ID, messages=user(CHAT_PROMPT))
    for usage in (message.usage, final.usage):
        assert usage.input_tokens + usage.cache_read_input_tokens == counted.input_tokens


async def test_max_tokens_cut_stop_sequence_and_a_ceiling_beyond_the_context(sdk, llama):
    with never_ending(llama):
        free = await sdk.messages.create(model=MODEL_ID, max_tokens=40, extra_body=GREEDY,
                                         messages=user(LONG_CHAT_PROMPT))
    text = free.content[0].text
    assert free.stop_reason == "max_tokens" and free.usage.output_tokens == 40
    words = text.split()
    stop = " " + words[len(words) // 2]
    with never_ending(llama):
        cut = await sdk.messages.create(model=MODEL_ID, max_tokens=40, extra_body=GREEDY,
                                        messages=user(LONG_CHAT_PROMPT), stop_sequences=[stop])
    assert (cut.stop_reason, cut.stop_sequence) == ("stop_sequence", stop)
    assert cut.content[0].text == text[:text.index(stop)]
    # Claude Code asks for 32000 tokens from a 4096-token context: accepted, and the
    # answer ends where the model ends it or where the context runs out
    ceiling = await sdk.messages.create(model=MODEL_ID, max_tokens=32000, extra_body=GREEDY,
                                        messages=user(CHAT_PROMPT))
    assert ceiling.stop_reason in ("end_turn", "max_tokens") and ceiling.content[0].text
    used = ceiling.usage.input_tokens + (ceiling.usage.cache_read_input_tokens or 0)
    assert used + ceiling.usage.output_tokens <= llama.context_length


async def test_forced_tool_use_then_tool_result_round_trip(sdk, llama):
    asked = {"model": MODEL_ID, "max_tokens": 60, "extra_body": GREEDY, "tools": [WEATHER]}
    first = await sdk.messages.create(**asked, messages=user("What is the weather in Paris?"),
                                      tool_choice={"type": "tool", "name": "get_weather"})
    assert first.stop_reason == "tool_use"
    call = first.content[-1]
    assert call.type == "tool_use" and call.name == "get_weather"
    assert set(call.input) == {"city"} and isinstance(call.input["city"], str)
    async with sdk.messages.stream(**asked, tool_choice={"type": "any"},
                                   messages=user("What is the weather in Paris?")) as stream:
        streamed = await stream.get_final_message()
    assert streamed.content[-1].input == call.input  # grammar-forced both ways
    history = [*user("What is the weather in Paris?"),
               {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                 for b in first.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                             "content": "Sunny, 24 degrees"}]}]
    with never_ending(llama):
        answer = await sdk.messages.create(**asked, messages=history,
                                           tool_choice={"type": "none"})
    assert answer.content and answer.content[0].type == "text" and answer.content[0].text
    assert answer.stop_reason == "max_tokens"


async def test_output_config_format_gives_json_valid_for_the_schema(sdk):
    # bounded, so the grammar is complete within max_tokens whatever the model writes
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
              "required": ["city"], "additionalProperties": False}
    message = await sdk.messages.create(
        model=MODEL_ID, max_tokens=60, extra_body=GREEDY,
        messages=user("Name the capital of France as JSON."),
        output_config={"format": {"type": "json_schema", "schema": schema}})
    assert message.stop_reason == "end_turn"  # the grammar ended the answer
    answer = json.loads(message.content[0].text)
    assert set(answer) == {"city"} and isinstance(answer["city"], str)


@pytest.mark.parametrize("settings", [
    {"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}},  # Claude Code
    {"thinking": {"type": "enabled", "budget_tokens": 1024}},
    {"thinking": {"type": "disabled"}},
])
async def test_thinking_is_a_preference_a_model_that_cannot_reason_answers(sdk, settings):
    """SmolLM2 does not reason: Anthropic's thinking settings (Claude Code sends them on
    every request) get a plain answer, never the 400 Chat's reasoning_effort gets."""
    plain = await sdk.messages.create(model=MODEL_ID, max_tokens=2048, extra_body=GREEDY,
                                      messages=user(CHAT_PROMPT))
    message = await sdk.messages.create(model=MODEL_ID, max_tokens=2048,
                                        extra_body={**GREEDY, **settings},
                                        messages=user(CHAT_PROMPT))
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == plain.content[0].text


async def test_a_trailing_assistant_message_is_continued(sdk):
    """Anthropic's prefill: the answer goes on from the last assistant message, which
    it does not repeat. With greedy sampling, prefilling the first words of the model's
    own answer leaves exactly the rest of that answer."""
    asked = {"model": MODEL_ID, "max_tokens": 40, "extra_body": GREEDY}
    whole = (await sdk.messages.create(**asked, messages=user(CHAT_PROMPT))).content[0].text
    cut = whole.index(" ", whole.index(" ") + 1)  # after the first two words
    prefill, rest = whole[:cut], whole[cut:]
    turns = [*user(CHAT_PROMPT), {"role": "assistant", "content": prefill}]
    answer = await sdk.messages.create(**asked, messages=turns)
    assert answer.content[0].text == rest
    async with sdk.messages.stream(**asked, messages=turns) as stream:
        assert (await stream.get_final_message()).content[0].text == rest

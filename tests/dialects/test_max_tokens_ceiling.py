"""`max_tokens` is a ceiling in every dialect: when the prompt leaves less room than
it asks for (Qwen Code sends `max_tokens: 32000` whatever the prompt; opencode the
model's advertised output limit), the answer runs until the context is full and ends
by the dialect's own word for a cut answer. Only a prompt that leaves no room for a
single token is refused, in the dialect's envelope, before any byte. A strict engine
(`--strict-max-tokens`) refuses prompt + max_tokens beyond the context instead.

The fake engine counts words as tokens: its context of 12 holds the one-word prompt
and 11 words of its 16-word reply."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from parlance.engines.fake import FakeEngine
from tests.support.fake_app import make_app
from tests.support.sse import sse_data

CONTEXT = 12
REPLY = " ".join("abcdefghijklmnop")  # 16 words
ROOM = CONTEXT - 1  # what the one-word prompt "Hello!" leaves
QWEN = 32000  # Qwen Code's max_tokens


def _last_chunk(body: str) -> dict[str, Any]:
    return [d for d in sse_data(body) if d != "[DONE]"][-1]


def _events(body: str) -> list[dict[str, Any]]:
    return [d for d in sse_data(body) if d != "[DONE]"]


def _lines(body: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.splitlines() if line]


def _chat_ended(whole: dict[str, Any], stream: str) -> None:
    assert whole["choices"][0]["finish_reason"] == "length"
    assert whole["usage"]["completion_tokens"] == ROOM
    finishes = [c["choices"][0]["finish_reason"] for c in _events(stream) if c["choices"]]
    assert finishes[-1] == "length"


def _responses_ended(whole: dict[str, Any], stream: str) -> None:
    assert whole["status"] == "incomplete"
    assert whole["incomplete_details"] == {"reason": "max_output_tokens"}
    assert whole["usage"]["output_tokens"] == ROOM
    terminal = _last_chunk(stream)
    assert terminal["type"] == "response.incomplete"
    assert terminal["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def _anthropic_ended(whole: dict[str, Any], stream: str) -> None:
    assert whole["stop_reason"] == "max_tokens"
    assert whole["usage"]["output_tokens"] == ROOM
    [delta] = [e for e in _events(stream) if e["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "max_tokens"


def _ollama_ended(whole: dict[str, Any], stream: str) -> None:
    assert whole["done_reason"] == "length" and whole["eval_count"] == ROOM
    last = _lines(stream)[-1]
    assert last["done"] is True and last["done_reason"] == "length"


def _lmstudio_ended(whole: dict[str, Any], stream: str) -> None:
    # LM Studio's chat has no stop reason: the answer stops where the context is full
    assert whole["stats"]["total_output_tokens"] == ROOM
    end = [e for e in _events(stream) if e.get("type") == "chat.end"][-1]
    assert end["result"]["stats"]["total_output_tokens"] == ROOM


def _chat(content: str, limit: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": limit}


# path, body (prompt text, max_tokens), check of an answer cut by the context,
# (status, error check) of a prompt that does not fit
DIALECTS: dict[str, tuple[str, Callable[[str, int], dict[str, Any]],
                          Callable[[dict[str, Any], str], None], int]] = {
    "chat": ("/v1/chat/completions", _chat, _chat_ended, 403),
    "completions": ("/v1/completions", lambda text, limit: {
        "prompt": text, "max_tokens": limit}, _chat_ended, 403),
    "responses": ("/v1/responses", lambda text, limit: {
        "input": text, "max_output_tokens": limit}, _responses_ended, 400),
    "anthropic": ("/v1/messages", _chat, _anthropic_ended, 400),
    "ollama_chat": ("/api/chat", lambda text, limit: {
        "messages": [{"role": "user", "content": text}], "options": {"num_predict": limit}},
        _ollama_ended, 400),
    "ollama_generate": ("/api/generate", lambda text, limit: {
        "prompt": text, "options": {"num_predict": limit}}, _ollama_ended, 400),
    "lmstudio": ("/api/v1/chat", lambda text, limit: {
        "input": text, "max_output_tokens": limit}, _lmstudio_ended, 400),
}


def _error_says_overflow(name: str, body: dict[str, Any]) -> None:
    if name.startswith("ollama"):
        assert "context" in body["error"]
    elif name == "anthropic":
        assert body["error"]["message"].startswith("prompt is too long")
    elif name in ("chat", "completions"):
        assert body["error"]["type"] == "tokens_exceeded_error"
        assert body["error"]["code"] == "context_length_exceeded"
    else:
        assert body["error"]["code"] == "context_length_exceeded"


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine(context_length=CONTEXT, default_reply=REPLY)


@pytest.fixture
async def client(engine: FakeEngine) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=make_app(engine)),
                                 base_url="http://t") as http:
        yield http


async def _post(client: httpx.AsyncClient, name: str, text: str, limit: int,
                stream: bool) -> httpx.Response:
    path, body, _, _ = DIALECTS[name]
    return await client.post(path, json={"model": "fake-model", **body(text, limit),
                                         "stream": stream})


@pytest.mark.parametrize("name", DIALECTS)
async def test_max_tokens_beyond_the_context_ends_the_answer_where_the_context_is_full(
        client, name):
    whole = await _post(client, name, "Hello!", QWEN, stream=False)
    stream = await _post(client, name, "Hello!", QWEN, stream=True)
    assert whole.status_code == stream.status_code == 200, (whole.text, stream.text)
    DIALECTS[name][2](whole.json(), stream.text)


@pytest.mark.parametrize("name", DIALECTS)
async def test_a_prompt_leaving_room_for_one_token_gets_one(client, engine, name):
    prompt = " ".join(["word"] * (CONTEXT - 1))
    response = await _post(client, name, prompt, QWEN, stream=False)
    assert response.status_code == 200, response.text
    assert engine.requests[-1].max_tokens == QWEN  # the dialect passes it on as sent


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", DIALECTS)
async def test_a_prompt_that_leaves_no_room_is_refused_before_any_byte(client, name, stream):
    prompt = " ".join(["word"] * CONTEXT)
    response = await _post(client, name, prompt, 5, stream=stream)
    assert response.status_code == DIALECTS[name][3], response.text
    _error_says_overflow(name, response.json())


@pytest.mark.parametrize("name", DIALECTS)
async def test_a_strict_engine_refuses_max_tokens_beyond_the_context(name):
    engine = FakeEngine(context_length=CONTEXT, default_reply=REPLY, strict_max_tokens=True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=make_app(engine)),
                                 base_url="http://t") as client:
        refused = await _post(client, name, "Hello!", QWEN, stream=True)
        fits = await _post(client, name, "Hello!", ROOM, stream=False)
    assert refused.status_code == DIALECTS[name][3], refused.text
    _error_says_overflow(name, refused.json())
    assert fits.status_code == 200, fits.text

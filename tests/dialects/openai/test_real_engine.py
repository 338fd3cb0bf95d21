"""OpenAI `/v1/chat/completions` and `/v1/completions` over HTTP, on the REAL engine.

SmolLM2-135M-Instruct through llama.cpp, greedy (temperature 0) unless a test is
about sampling. Expected texts are never hard-coded: they come from another run
of the same model (the non-streamed answer, an unconstrained run, a cold run).

Most tests use the in-process ASGI transport (it buffers whole bodies, streams
included); the disconnect tests need a real socket and run uvicorn in a thread.
"""

from __future__ import annotations

import asyncio
import codecs
import math
from typing import Any

import httpx
import pytest

from tests.support.live_server import ServerThread
from tests.support.real_engine import (
    CHAT_PROMPT,
    CJK_CHAT_PROMPT,
    EMOJI_PROMPT,
    LONG_CHAT_PROMPT,
    MODEL_ID,
    N_CTX,
    PATIENCE,
    SLOTS,
    TEXT_PROMPT,
    TRANSLATE_PROMPT,
    asgi_client,
    boundary_stop,
    cancel_all,
    chat_stream_content,
    completion_stream_text,
    fill_slots,
    first_multibyte,
    make_app,
    no_eog_bias,
    recorded_starts,
    token_with_bytes,
    tokens_generated,
    wait_idle,
    wait_until,
)
from tests.support.sse import sse_data

pytestmark = pytest.mark.model

REPLACEMENT = "\ufffd"
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture
async def client(llama):
    async with asgi_client(make_app(llama)) as c:
        yield c


@pytest.fixture
def started(llama):
    """Every generation the engine starts during the test, in order (to inspect its job)."""
    with recorded_starts(llama) as generations:
        yield generations


# -- request helpers ---------------------------------------------------------------------


def chat_body(content: str = CHAT_PROMPT, **fields: Any) -> dict[str, Any]:
    return {"model": MODEL_ID, "messages": [{"role": "user", "content": content}],
            "temperature": 0, **fields}


def text_body(prompt: Any = TEXT_PROMPT, **fields: Any) -> dict[str, Any]:
    return {"model": MODEL_ID, "prompt": prompt, "temperature": 0, **fields}


def body_for(path: str, **fields: Any) -> dict[str, Any]:
    return chat_body(**fields) if path == CHAT else text_body(**fields)


async def ok_json(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(path, json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


async def ok_stream(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> list[Any]:
    response = await client.post(path, json={**body, "stream": True})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    response.content.decode("utf-8")  # strict: the raw stream is valid UTF-8
    frames = sse_data(response.text)
    assert frames[-1] == "[DONE]"
    assert not any(isinstance(f, dict) and "error" in f for f in frames), frames
    return frames


async def both(client: httpx.AsyncClient, path: str, body: dict[str, Any]):
    """(non-stream JSON, stream deltas, stream finish_reason, stream frames)."""
    whole = await ok_json(client, path, body)
    frames = await ok_stream(client, path, body)
    split = chat_stream_content if path == CHAT else completion_stream_text
    deltas, finish = split(frames)
    return whole, deltas, finish, frames


def content(path: str, whole: dict[str, Any]) -> str:
    choice = whole["choices"][0]
    return choice["message"]["content"] if path == CHAT else choice["text"]


def stream_usage(frames: list[Any]) -> dict[str, Any]:
    usage = [f["usage"] for f in frames if isinstance(f, dict) and f.get("usage")]
    assert len(usage) == 1, frames
    return usage[0]


def assert_error(response: httpx.Response, status: int, kind: str, param: str | None) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["type"] == kind, error
    assert error["param"] == param, error
    assert error["message"]


# -- determinism ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
async def test_stream_and_non_stream_are_identical(client, path):
    body = body_for(path, max_tokens=32, stream_options={"include_usage": True})
    whole, deltas, finish, frames = await both(client, path, body)

    assert content(path, whole)
    assert "".join(deltas) == content(path, whole)
    assert finish == whole["choices"][0]["finish_reason"]
    usage = stream_usage(frames)
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert usage[key] == whole["usage"][key]


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
async def test_two_greedy_runs_are_identical(client, path):
    body = body_for(path, max_tokens=24)
    first = await ok_json(client, path, body)
    second = await ok_json(client, path, body)
    assert content(path, first) == content(path, second)
    counts = ("prompt_tokens", "completion_tokens", "total_tokens")
    assert [first["usage"][k] for k in counts] == [second["usage"][k] for k in counts]


async def test_chat_stream_shape(client, llama):
    frames = await ok_stream(client, CHAT, chat_body(max_tokens=8, logit_bias=no_eog_bias(llama)))
    chunks = frames[:-1]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"][0]["delta"] == {}


# -- stop strings --------------------------------------------------------------------------


async def _boundary_stop_chat(client) -> tuple[str, str, int]:
    free = await ok_json(client, CHAT, chat_body(LONG_CHAT_PROMPT, max_tokens=40, logprobs=True))
    text = free["choices"][0]["message"]["content"]
    tokens = [t["token"] for t in free["choices"][0]["logprobs"]["content"]]
    stop, at = boundary_stop(tokens, text)
    return text, stop, at


@pytest.mark.parametrize("as_list", [False, True])
async def test_chat_stop_split_across_tokens(client, as_list):
    text, stop, at = await _boundary_stop_chat(client)
    stops = ["@@never@@", stop] if as_list else stop
    body = chat_body(LONG_CHAT_PROMPT, max_tokens=40, stop=stops)

    whole, deltas, finish, _ = await both(client, CHAT, body)

    expected = text[:at]
    assert whole["choices"][0]["message"]["content"] == expected
    assert whole["choices"][0]["finish_reason"] == "stop"
    assert "".join(deltas) == expected
    assert finish == "stop"
    assert all(stop not in d for d in deltas)


async def test_completions_stop_list(client):
    free = await ok_json(client, COMPLETIONS, text_body(max_tokens=30, logprobs=0))
    text = free["choices"][0]["text"]
    stop, at = boundary_stop(free["choices"][0]["logprobs"]["tokens"], text)

    whole, deltas, finish, _ = await both(
        client, COMPLETIONS, text_body(max_tokens=30, stop=[stop, "@@never@@"]))

    assert whole["choices"][0]["text"] == text[:at] == "".join(deltas)
    assert whole["choices"][0]["finish_reason"] == finish == "stop"
    assert whole["usage"]["completion_tokens"] < free["usage"]["completion_tokens"]


async def test_stop_on_a_multibyte_character(client):
    free = await ok_json(client, CHAT, chat_body(CJK_CHAT_PROMPT, max_tokens=24))
    text = free["choices"][0]["message"]["content"]
    stop = first_multibyte(text)

    whole, deltas, finish, _ = await both(
        client, CHAT, chat_body(CJK_CHAT_PROMPT, max_tokens=24, stop=stop))

    assert whole["choices"][0]["message"]["content"] == text[: text.index(stop)]
    assert "".join(deltas) == text[: text.index(stop)]
    assert finish == "stop"


# -- length -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
async def test_max_tokens_three_is_length(client, llama, path):
    fields = {"max_tokens": 3, "stream_options": {"include_usage": True},
              "logit_bias": no_eog_bias(llama)}
    body = chat_body(LONG_CHAT_PROMPT, **fields) if path == CHAT else text_body(**fields)
    whole, deltas, finish, frames = await both(client, path, body)
    assert whole["choices"][0]["finish_reason"] == "length" == finish
    assert whole["usage"]["completion_tokens"] == 3
    assert stream_usage(frames)["completion_tokens"] == 3
    assert "".join(deltas) == content(path, whole)


async def test_chat_max_completion_tokens(client, llama):
    whole = await ok_json(client, CHAT, chat_body(LONG_CHAT_PROMPT, max_completion_tokens=3,
                                                  logit_bias=no_eog_bias(llama)))
    assert whole["choices"][0]["finish_reason"] == "length"
    assert whole["usage"]["completion_tokens"] == 3


# -- logprobs ----------------------------------------------------------------------------------


def check_chat_logprobs(entries: list[dict[str, Any]], text: str, k: int) -> None:
    assert "".join(e["token"] for e in entries) == text
    assert b"".join(bytes(e["bytes"]) for e in entries) == text.encode()
    decoder = codecs.getincrementaldecoder("utf-8")()
    for e in entries:
        assert e["bytes"] is not None and e["bytes"]
        raw = bytes(e["bytes"])
        clean = decoder.getstate()[0] == b""
        decoder.decode(raw)
        if clean and decoder.getstate()[0] == b"":
            assert e["token"].encode() == raw  # a whole token: bytes are its UTF-8
        top = e["top_logprobs"]
        assert len(top) == k
        assert [t["logprob"] for t in top] == sorted((t["logprob"] for t in top), reverse=True)
        assert all(t["bytes"] is not None and t["logprob"] <= 0 for t in top)
        assert bytes(top[0]["bytes"]) == raw  # greedy: the sampled token is the top one
        assert math.isclose(top[0]["logprob"], e["logprob"], abs_tol=1e-9)


@pytest.mark.parametrize("prompt", [CHAT_PROMPT, CJK_CHAT_PROMPT])
async def test_chat_logprobs(client, prompt):
    body = chat_body(prompt, max_tokens=24, logprobs=True, top_logprobs=3)
    whole, deltas, _, frames = await both(client, CHAT, body)

    text = whole["choices"][0]["message"]["content"]
    entries = whole["choices"][0]["logprobs"]["content"]
    assert len(entries) == whole["usage"]["completion_tokens"]
    check_chat_logprobs(entries, text, 3)

    streamed = [e for f in frames[:-1] for c in f["choices"] if c["logprobs"]
                for e in c["logprobs"]["content"]]
    assert [e["token"] for e in streamed] == [e["token"] for e in entries]
    assert [e["bytes"] for e in streamed] == [e["bytes"] for e in entries]
    for frame in frames[:-1]:  # each chunk's logprobs describe exactly that chunk's text
        for c in frame["choices"]:
            if c["logprobs"] and c["logprobs"]["content"]:
                assert "".join(e["token"] for e in c["logprobs"]["content"]) == \
                    c["delta"]["content"]


async def test_chat_without_logprobs_has_null_logprobs(client):
    whole = await ok_json(client, CHAT, chat_body(max_tokens=4))
    assert whole["choices"][0]["logprobs"] is None


def check_completion_logprobs(lp: dict[str, Any], text: str, start: int, k: int) -> None:
    n = len(lp["tokens"])
    assert n == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"])
    assert "".join(lp["tokens"]) == text
    assert lp["text_offset"][0] == start
    for i in range(1, n):
        assert lp["text_offset"][i] == lp["text_offset"][i - 1] + len(lp["tokens"][i - 1])
    for token, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"],
                                  strict=True):
        assert len(top) == k, top
        assert logprob is not None and logprob <= 0
        assert math.isclose(max(top.values()), logprob, abs_tol=1e-9)  # greedy
        assert token in top


async def test_completions_logprobs(client):
    whole, deltas, _, frames = await both(client, COMPLETIONS, text_body(max_tokens=12, logprobs=2))
    choice = whole["choices"][0]
    check_completion_logprobs(choice["logprobs"], choice["text"], len(TEXT_PROMPT), 2)
    assert len(choice["logprobs"]["tokens"]) == whole["usage"]["completion_tokens"] == 12

    chunks = [c for f in frames[:-1] for c in f["choices"] if c["logprobs"]]
    merged = {key: [x for c in chunks for x in c["logprobs"][key]]
              for key in ("tokens", "token_logprobs", "text_offset")}
    for key, values in merged.items():
        assert values == pytest.approx(choice["logprobs"][key]), key


async def test_completions_echo_with_logprobs(client):
    plain = await ok_json(client, COMPLETIONS, text_body(max_tokens=8))
    whole, deltas, _, _ = await both(
        client, COMPLETIONS, text_body(max_tokens=8, echo=True, logprobs=2))

    choice = whole["choices"][0]
    assert choice["text"] == TEXT_PROMPT + plain["choices"][0]["text"]
    assert "".join(deltas) == choice["text"]
    lp = choice["logprobs"]
    assert lp["token_logprobs"][0] is None
    assert all(x is not None for x in lp["token_logprobs"][1:])
    assert lp["text_offset"][0] == 0
    prompt_tokens = whole["usage"]["prompt_tokens"]
    assert "".join(lp["tokens"][:prompt_tokens]) == TEXT_PROMPT
    assert lp["text_offset"][prompt_tokens] == len(TEXT_PROMPT)
    n = len(lp["tokens"])
    assert n == prompt_tokens + 8 == len(lp["text_offset"]) == len(lp["top_logprobs"])
    for i in range(1, n):
        assert lp["text_offset"][i] == lp["text_offset"][i - 1] + len(lp["tokens"][i - 1])


async def test_completions_echo_without_logprobs(client):
    plain = await ok_json(client, COMPLETIONS, text_body(max_tokens=8))
    echoed = await ok_json(client, COMPLETIONS, text_body(max_tokens=8, echo=True))
    assert echoed["choices"][0]["text"] == TEXT_PROMPT + plain["choices"][0]["text"]
    assert echoed["choices"][0]["logprobs"] is None


async def test_completions_top_logprobs_keep_every_byte_token_alternative(client):
    whole = await ok_json(client, COMPLETIONS, text_body(EMOJI_PROMPT, max_tokens=6, logprobs=2))
    lp = whole["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["top_logprobs"]) == 6
    assert all(len(top) == 2 for top in lp["top_logprobs"]), lp["top_logprobs"]


async def test_completions_echo_with_zero_max_tokens_returns_only_the_prompt(client):
    whole = await ok_json(client, COMPLETIONS,
                          text_body(max_tokens=0, echo=True, logprobs=1))
    assert whole["choices"][0]["text"] == TEXT_PROMPT
    assert whole["usage"]["completion_tokens"] == 0
    assert whole["choices"][0]["finish_reason"] == "length"


# -- UTF-8 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", [TRANSLATE_PROMPT, CJK_CHAT_PROMPT])
async def test_chat_multibyte_stream_matches(client, prompt):
    whole, deltas, _, _ = await both(client, CHAT, chat_body(prompt, max_tokens=32))
    text = whole["choices"][0]["message"]["content"]
    assert any(ord(c) > 0x7F for c in text), text
    assert "".join(deltas) == text
    if REPLACEMENT not in text:
        assert all(REPLACEMENT not in d for d in deltas), deltas


@pytest.mark.parametrize("prompt", ["🐱🐶🐱🐶🐱", EMOJI_PROMPT])
async def test_completions_emoji_stream_matches(client, prompt):
    whole, deltas, _, _ = await both(client, COMPLETIONS, text_body(prompt, max_tokens=18))
    text = whole["choices"][0]["text"]
    assert "".join(deltas) == text
    for d in deltas:
        d.encode("utf-8")  # strict: no lone surrogates
        if REPLACEMENT not in text:
            assert REPLACEMENT not in d, deltas


async def test_completions_forced_multibyte_output(client):
    """The emoji prompt makes the model emit emoji: 3 byte tokens each, never split."""
    whole, deltas, _, _ = await both(client, COMPLETIONS, text_body(EMOJI_PROMPT, max_tokens=18))
    text = whole["choices"][0]["text"]
    assert text and set(text) <= {"🐱", "🐶"}, text
    assert all(d and set(d) <= {"🐱", "🐶"} for d in deltas), deltas


# -- errors on the real engine ---------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
async def test_context_overflow(client, path, stream):
    """A prompt that leaves no room (max_tokens beyond the context is only a ceiling)."""
    long = "word " * N_CTX
    body = (chat_body(long, max_tokens=8, stream=stream) if path == CHAT
            else text_body(long, max_tokens=8, stream=stream))
    response = await client.post(path, json=body)
    assert_error(response, 403, "tokens_exceeded_error", "messages")
    assert response.json()["error"]["code"] == "context_length_exceeded"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
async def test_logit_bias_outside_vocabulary(client, path, stream):
    body = body_for(path, max_tokens=4, stream=stream, logit_bias={"49152": -100})
    assert_error(await client.post(path, json=body), 400, "invalid_request_error", "logit_bias")


@pytest.mark.parametrize("stream", [False, True])
async def test_suffix_is_refused(client, stream):
    body = text_body("def add(a, b):", suffix="    return c", max_tokens=4, stream=stream)
    assert_error(await client.post(COMPLETIONS, json=body), 400, "invalid_request_error", "suffix")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("prompt", [[1, 2, 49152], [[1, 2], [10**6]]])
async def test_prompt_token_outside_vocabulary(client, stream, prompt):
    body = text_body(prompt, max_tokens=4, stream=stream)
    assert_error(await client.post(COMPLETIONS, json=body), 400, "invalid_request_error", "prompt")


async def test_token_id_prompt_works(client, llama):
    ids = llama.model.tokenize(TEXT_PROMPT, add_special=True, parse_special=True)
    by_text = await ok_json(client, COMPLETIONS, text_body(max_tokens=8))
    by_ids = await ok_json(client, COMPLETIONS, text_body(ids, max_tokens=8))
    assert by_ids["choices"][0]["text"] == by_text["choices"][0]["text"]


# -- sampling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
async def test_seed_reproduces_sampling(client, path):
    body = body_for(path, max_tokens=16, temperature=1.0, seed=4242)
    first = await ok_json(client, path, body)
    second = await ok_json(client, path, body)
    assert content(path, first) == content(path, second)


async def test_seeds_differ(client):
    texts = set()
    for seed in (1, 2, 3, 4):
        whole = await ok_json(client, COMPLETIONS,
                              text_body(max_tokens=16, temperature=1.5, seed=seed))
        texts.add(whole["choices"][0]["text"])
    assert len(texts) >= 2


async def test_logit_bias_bans_the_greedy_first_token(client, llama):
    free = await ok_json(client, CHAT, chat_body(max_tokens=4, logprobs=True))
    first_bytes = bytes(free["choices"][0]["logprobs"]["content"][0]["bytes"])
    token = token_with_bytes(llama, first_bytes)

    banned = await ok_json(client, CHAT, chat_body(
        max_tokens=4, logprobs=True, logit_bias={str(token): -100}))

    assert bytes(banned["choices"][0]["logprobs"]["content"][0]["bytes"]) != first_bytes


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
async def test_penalties_are_accepted(client, path):
    body = body_for(path, max_tokens=16, repeat_penalty=1.3, presence_penalty=0.5,
                    frequency_penalty=0.5)
    whole, deltas, finish, _ = await both(client, path, body)
    assert content(path, whole) and "".join(deltas) == content(path, whole)
    assert finish in ("stop", "length")


# -- KV prefix reuse ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
async def test_identical_request_again_is_identical(client, path):
    body = body_for(path, max_tokens=24, logprobs=True if path == CHAT else 1)
    first = await ok_json(client, path, body)
    second = await ok_json(client, path, body)  # its prompt is fully cached now
    assert content(path, second) == content(path, first)
    if path == CHAT:  # the reuse is reported: all but the token evaluated for fresh logits
        cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached == second["usage"]["prompt_tokens"] - 1


async def test_extended_prompt_warm_equals_cold(client):
    base = await ok_json(client, COMPLETIONS, text_body(max_tokens=12))
    extended = text_body(TEXT_PROMPT + base["choices"][0]["text"] + " Then", max_tokens=12)
    warm = await ok_json(client, COMPLETIONS, extended)
    await ok_json(client, COMPLETIONS, text_body("Zebras graze quietly.", max_tokens=2))
    cold = await ok_json(client, COMPLETIONS, extended)
    assert warm["choices"][0]["text"] == cold["choices"][0]["text"]


async def test_follow_up_chat_turn_warm_equals_cold(client):
    first = await ok_json(client, CHAT, chat_body(CHAT_PROMPT, max_tokens=32))
    turn = {"model": MODEL_ID, "temperature": 0, "max_tokens": 16, "messages": [
        {"role": "user", "content": CHAT_PROMPT},
        {"role": "assistant", "content": first["choices"][0]["message"]["content"]},
        {"role": "user", "content": "Now one about mountains."},
    ]}
    warm = await ok_json(client, CHAT, turn)
    await ok_json(client, COMPLETIONS, text_body("Zebras graze quietly.", max_tokens=2))
    cold = await ok_json(client, CHAT, turn)
    assert warm["choices"][0]["message"]["content"] == cold["choices"][0]["message"]["content"]


# -- client disconnect cancels (real uvicorn, real socket) ---------------------------------------


def long_chat(llama, **fields: Any) -> dict[str, Any]:
    """A chat that would run 2000 tokens (end tokens banned), tens of seconds."""
    return chat_body("Tell me a long story.", max_tokens=2000, logit_bias=no_eog_bias(llama),
                     stream=True, **fields)


class SSEReader:
    """Reads `data:` lines off a live streamed response.

    It keeps ONE line iterator for the response's whole life: an abandoned httpx
    iterator is finalized by the garbage collector, and that closes the connection,
    which would look like a client disconnect at a moment the test did not choose.
    """

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def frame(self) -> str:
        async for line in self._lines:
            if line.startswith("data: "):
                return line[len("data: "):]
        raise AssertionError("the stream ended without a frame")

    async def content_chunks(self, count: int) -> None:
        seen = 0
        while seen < count:
            frame = await self.frame()
            assert frame != "[DONE]" and '"error"' not in frame, frame
            if '"content":"' in frame and '"content":""' not in frame:
                seen += 1


async def test_stream_disconnect_cancels_the_generation(llama, started):
    with ServerThread(make_app(llama)) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=PATIENCE) as http:
            async with http.stream("POST", CHAT, json=long_chat(llama)) as response:
                assert response.status_code == 200
                reader = SSEReader(response)
                await reader.content_chunks(3)
                assert llama.metrics.slots_in_use == 1
            # leaving the block closes the half-read response: the socket is closed

            await wait_idle(llama)
            generation = started[0]
            assert generation.job.cancelled and generation.job.done.is_set()
            assert tokens_generated(generation) < 2000  # cut short, not run to the end

            follow = await http.post(CHAT, json=chat_body(max_tokens=8,
                                                          logit_bias=no_eog_bias(llama)))
            assert follow.status_code == 200
            assert follow.json()["usage"]["completion_tokens"] == 8


async def test_queued_stream_whose_client_left_never_runs(llama, started):
    with ServerThread(make_app(llama)) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=PATIENCE) as http:
            busy = await fill_slots(llama)
            try:
                async with http.stream("POST", CHAT, json=chat_body(
                        "Tell me a story.", max_tokens=50, stream=True)) as second:
                    assert second.status_code == 200
                    # the role chunk comes at once, while the job waits for a slot
                    assert '"role":"assistant"' in await SSEReader(second).frame()
                    queued = started[SLOTS]
                    assert not queued.job.started
                await wait_until(queued.job.done.is_set, PATIENCE, "queued job dropped")
                assert not queued.job.started  # dropped without running
                assert llama.metrics.requests_waiting == 0
                assert not any(g.job.done.is_set() for g in busy)
            finally:
                await cancel_all(busy)
            await wait_idle(llama)


async def test_non_stream_disconnect_cancels_the_generation(llama, started):
    with ServerThread(make_app(llama)) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=PATIENCE) as http:
            body = {**long_chat(llama), "stream": False}
            request = asyncio.create_task(http.post(CHAT, json=body))
            before = llama.metrics.tokens_generated
            await wait_until(lambda: started and started[0].job.started
                             and llama.metrics.tokens_generated > before, PATIENCE,
                             "generation under way")
            assert llama.metrics.slots_in_use == 1
            request.cancel()  # the client gives up: httpx closes the connection
            with pytest.raises(asyncio.CancelledError):
                await request
            await wait_idle(llama)
            assert started[0].job.cancelled
            assert tokens_generated(started[0]) < 2000  # cut short, not run to the end


# -- request timeout ------------------------------------------------------------------------------


# A deadline the first tokens always beat (they come in ~0.1 s, 30 times that on a busy
# machine) and a generation no machine finishes before it (3500 tokens at 118 tok/s).
DEADLINE = 3.0
ENDLESS_TOKENS = 3500


@pytest.fixture
async def impatient(llama):
    async with asgi_client(make_app(llama, request_timeout=DEADLINE)) as c:
        yield c


async def test_stream_timeout_ends_with_error_frame(impatient, llama):
    response = await impatient.post(CHAT, json={**long_chat(llama),
                                                "max_tokens": ENDLESS_TOKENS})
    assert response.status_code == 200
    frames = sse_data(response.text)
    assert frames[-1] == "[DONE]"
    error = frames[-2]["error"]
    assert error["type"] == "timeout_error" and error["code"] == "request_timeout"
    deltas, finish = chat_stream_content(frames[:-2])
    # The deadline cut the stream: no choice finished. (Whether text came first depends on
    # how busy the machine is: the prompt alone may take the whole deadline.)
    assert finish is None
    await wait_idle(llama)


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
async def test_non_stream_timeout_is_408(impatient, llama, path):
    body = {**long_chat(llama), "stream": False, "max_tokens": ENDLESS_TOKENS}
    if path == COMPLETIONS:
        body = text_body(max_tokens=ENDLESS_TOKENS, logit_bias=no_eog_bias(llama))
    response = await impatient.post(path, json=body)
    assert_error(response, 408, "timeout_error", None)
    assert response.json()["error"]["code"] == "request_timeout"
    await wait_idle(llama)


async def test_completions_stream_timeout(impatient, llama):
    body = text_body(max_tokens=ENDLESS_TOKENS, logit_bias=no_eog_bias(llama), stream=True)
    response = await impatient.post(COMPLETIONS, json=body)
    frames = sse_data(response.text)
    assert frames[-1] == "[DONE]"
    assert frames[-2]["error"]["code"] == "request_timeout"
    await wait_idle(llama)

"""The upstream engine against real servers on loopback: Parlance replicas (each an
app over the scripted engine, served by uvicorn from a thread of its own) and the
synthetic upstream (`tests/support/synthetic_upstream.py`, a raw HTTP server that can break
its streams). The gateway is a Parlance app with no local model; every dialect
goes through it. Real-model replicas (Parlance processes, llama-server) are in
`test_real_replicas.py`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine, Generated
from tests.support.fake_app import make_app
from tests.support.sse import sse_data
from tests.support.synthetic_upstream import SyntheticUpstream
from tests.support.upstream_replicas import AppServer, fleet, gateway, serving_gateway, wait_for

MODEL = "fake-model"
CHAT = "/v1/chat/completions"
PATIENCE = 60.0


def chat_body(content: str = "Hi there", **fields) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **fields}


@pytest.fixture
def engines() -> list[FakeEngine]:
    return [FakeEngine(), FakeEngine()]


@pytest.fixture
def replicas(engines):
    servers = [AppServer(make_app(engine)).start() for engine in engines]
    yield servers
    for server in servers:
        server.stop()


class Front:
    """The gateway in front of some replicas: an in-process client, the fleet."""

    def __init__(self, client: httpx.AsyncClient, upstream_fleet, models) -> None:
        self.client = client
        self.fleet = upstream_fleet
        self.models = models

    def replica(self, url: str):
        return next(r for r in self.fleet.replicas if r.url == url)


async def open_front(*urls: str, models: tuple[str, ...] = (), **settings) -> Front:
    upstream_fleet = fleet(*urls, models=models, **settings)
    app, served = gateway(upstream_fleet)
    await served.start()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                               base_url="http://gateway", timeout=PATIENCE)
    return Front(client, upstream_fleet, served)


async def close_front(front: Front) -> None:
    await front.client.aclose()
    await front.models.aclose()


@pytest.fixture
async def front(replicas) -> AsyncIterator[Front]:
    front = await open_front(*(r.base_url for r in replicas))
    yield front
    await close_front(front)


@pytest.fixture
async def one(engines) -> AsyncIterator[tuple[Front, FakeEngine]]:
    """The gateway in front of a single replica (scripts go to its engine)."""
    with AppServer(make_app(engines[0])) as server:
        front = await open_front(server.base_url)
        yield front, engines[0]
        await close_front(front)


async def stream(client: httpx.AsyncClient, path: str, body: dict) -> list:
    response = await client.post(path, json={**body, "stream": True})
    assert response.status_code == 200, response.text
    return sse_data(response.text)


def content(frames: list) -> str:
    return "".join(f["choices"][0]["delta"].get("content") or "" for f in frames
                   if isinstance(f, dict) and f.get("choices"))


# -- discovery and the model lists ------------------------------------------------------


async def test_models_are_discovered_and_listed(front):
    listed = (await front.client.get("/v1/models")).json()
    assert [m["id"] for m in listed["data"]] == [MODEL]
    anthropic = (await front.client.get("/v1/models",
                                        headers={"anthropic-version": "2023-06-01"})).json()
    assert [m["id"] for m in anthropic["data"]] == [MODEL]
    lmstudio = (await front.client.get("/api/v1/models")).json()
    assert [m["key"] for m in lmstudio["models"]] == [MODEL]


async def test_unknown_model_is_404_in_the_dialects_envelope(front):
    response = await front.client.post(CHAT, json={**chat_body(), "model": "nope"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


# -- every dialect streams through the upstream engine ------------------------------------

DIALECTS = {
    "chat": (CHAT, chat_body()),
    "completions": ("/v1/completions", {"model": MODEL, "prompt": "Hi there"}),
    "responses": ("/v1/responses", {"model": MODEL, "input": "Hi there"}),
    "messages": ("/v1/messages", {"model": MODEL, "max_tokens": 50,
                                  "messages": [{"role": "user", "content": "Hi there"}]}),
    "lmstudio": ("/api/v1/chat", {"model": MODEL, "input": "Hi there"}),
}
LAST_FRAME = {"chat": "[DONE]", "completions": "[DONE]", "responses": "response.completed",
              "messages": "message_stop", "lmstudio": "chat.end"}


@pytest.mark.parametrize("dialect", list(DIALECTS))
async def test_every_dialect_streams_and_answers_through_upstream(front, dialect):
    path, body = DIALECTS[dialect]
    whole = await front.client.post(path, json=body)
    assert whole.status_code == 200, whole.text
    assert "Hello there!" in json.dumps(whole.json())
    frames = await stream(front.client, path, body)
    dicts = [f for f in frames if isinstance(f, dict)]
    last = "[DONE]" if LAST_FRAME[dialect] == "[DONE]" else dicts[-1]["type"]
    assert last == LAST_FRAME[dialect]
    assert (frames[-1] == "[DONE]") == (dialect in ("chat", "completions", "responses"))
    assert not any(isinstance(f, dict) and ("error" in f or f.get("type") == "error")
                   for f in frames), frames
    text = json.dumps(frames)
    assert "Hello" in text and "there!" in text
    if dialect == "lmstudio":  # the upstream's prompt processing, start to end
        types = [f["type"] for f in dicts]
        assert types[:5] == ["chat.start", "prompt_processing.start",
                             "prompt_processing.progress", "prompt_processing.progress",
                             "prompt_processing.end"]
        assert [f["progress"] for f in dicts[2:4]] == [0.0, 1.0]


async def test_ollama_chat_and_generate_through_upstream(front):
    for path, body, text_of in (
            ("/api/chat", {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]},
             lambda line: line.get("message", {}).get("content", "")),
            ("/api/generate", {"model": MODEL, "prompt": "Hi"},
             lambda line: line.get("response", "")),
    ):
        whole = await front.client.post(path, json={**body, "stream": False})
        assert whole.status_code == 200, whole.text
        assert text_of(whole.json()) == "Hello there!"
        streamed = await front.client.post(path, json=body)  # Ollama streams by default
        lines = [json.loads(line) for line in streamed.text.splitlines() if line]
        assert "".join(text_of(line) for line in lines) == "Hello there!"
        assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "stop"
    tags = (await front.client.get("/api/tags")).json()
    assert [m["name"] for m in tags["models"]] == [f"{MODEL}:latest"]  # Ollama's name:tag


async def test_usage_is_the_replicas_own(one):
    front, _ = one
    frames = await stream(front.client, CHAT, chat_body(stream_options={"include_usage": True}))
    usage = frames[-2]["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (2, 2)  # words, here


async def test_n_choices_fan_out_and_are_numbered(one):
    front, _ = one
    body = (await front.client.post(CHAT, json=chat_body(n=3))).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert all(c["message"]["content"] == "Hello there!" for c in body["choices"])
    assert body["usage"]["prompt_tokens"] == 2  # the prompt counted once
    assert body["usage"]["completion_tokens"] == 6


async def test_count_tokens_asks_the_upstream(one):
    front, _ = one
    response = await front.client.post("/v1/messages/count_tokens", json={
        "model": MODEL, "messages": [{"role": "user", "content": "one two three four"}]})
    assert response.status_code == 200, response.text
    assert response.json() == {"input_tokens": 4}


async def test_vllm_counts_with_its_tokenize_endpoint():
    with SyntheticUpstream(model=MODEL, owned_by="vllm") as vllm:
        front = await open_front(vllm.base_url)
        try:
            response = await front.client.post("/v1/messages/count_tokens", json={
                "model": MODEL, "system": "Be brief.",
                "messages": [{"role": "user", "content": "one two three"}]})
            assert response.json() == {"input_tokens": 5}
            assert vllm.counters.requests == [{  # vLLM's TokenizeChatRequest
                "model": MODEL, "add_generation_prompt": True,
                "messages": [{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": "one two three"}]}]
        finally:
            await close_front(front)


# -- the mapping: tool calls, reasoning, stop strings -------------------------------------

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object",
                                          "properties": {"city": {"type": "string"}}}}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


async def test_tool_calls_cross_the_upstream(one):
    front, engine = one
    for _ in range(2):
        engine.enqueue(Generated(CALL), Finish(FinishReason.STOP), Usage(5, 9))
    body = (await front.client.post(CHAT, json=chat_body(tools=TOOLS))).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    anthropic = await front.client.post("/v1/messages", json={
        "model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}],
        "tools": [{"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}]})
    message = anthropic.json()
    assert message["stop_reason"] == "tool_use"
    assert [(b["type"], b.get("input")) for b in message["content"]] == [
        ("tool_use", {"city": "Paris"})]
    # what the replica was asked: the tools, as the client sent them
    assert engine.requests[0].tools[0].name == "get_weather"


async def test_reasoning_crosses_the_upstream(one):
    front, engine = one
    engine.enqueue(Generated("<think>Let me see.</think>Paris."), Finish(FinishReason.STOP),
                   Usage(5, 9))
    message = (await front.client.post("/v1/messages", json={
        "model": MODEL, "max_tokens": 50,
        "messages": [{"role": "user", "content": "Capital of France?"}]})).json()
    assert [(b["type"], b.get("thinking") or b.get("text")) for b in message["content"]] == [
        ("thinking", "Let me see."), ("text", "Paris.")]


async def test_sampling_and_stop_reach_the_replica(one):
    front, engine = one
    await front.client.post(CHAT, json=chat_body(temperature=0, seed=3, stop=["END"],
                                                 max_tokens=7))
    sent = engine.requests[-1]
    assert (sent.sampling.temperature, sent.sampling.seed, sent.stop, sent.max_tokens) == (
        0.0, 3, ("END",), 7)


# -- refusals before the first byte, failures after -----------------------------------------


async def test_context_overflow_is_each_dialects_own_400(engines):
    engine = FakeEngine(context_length=20)
    with AppServer(make_app(engine)) as server:
        front = await open_front(server.base_url)
        try:
            long = " ".join(["word"] * 50)
            chat = await front.client.post(CHAT, json=chat_body(long, stream=True))
            async with httpx.AsyncClient(base_url=server.base_url) as direct:
                local = await direct.post(CHAT, json=chat_body(long, stream=True))
            # the same refusal as the model's own server gives (OpenAI dialect: 403)
            assert (chat.status_code, chat.json()["error"]["code"]) == (
                local.status_code, local.json()["error"]["code"]) == (
                403, "context_length_exceeded")
            messages = await front.client.post("/v1/messages", json={
                "model": MODEL, "max_tokens": 5, "stream": True,
                "messages": [{"role": "user", "content": long}]})
            assert messages.status_code == 400
            assert messages.json()["type"] == "error"
            assert messages.json()["error"]["type"] == "invalid_request_error"
        finally:
            await close_front(front)


@pytest.mark.parametrize(("path", "refusal"), [("/v1/messages", 400),
                                               ("/v1/chat/completions", 403)])
async def test_max_tokens_is_a_ceiling_even_when_a_replica_refuses_it(engines, path, refusal):
    """max_tokens is a ceiling: a replica that refuses it as too large for its context
    (a strict server, as OpenAI's rule is) is asked again without it; a gateway that
    is strict itself (--strict-max-tokens) passes the refusal on."""
    engine = FakeEngine(context_length=20, strict_max_tokens=True)
    body = {"model": MODEL, "max_tokens": 32000, "messages": [{"role": "user", "content": "Hi"}]}
    with AppServer(make_app(engine)) as server:
        front = await open_front(server.base_url)
        try:
            response = await front.client.post(path, json=body)
            assert response.status_code == 200, response.text
            assert engine.requests[-1].max_tokens is None
        finally:
            await close_front(front)
        strict = await open_front(server.base_url, strict_max_tokens=True)
        try:
            refused = await strict.client.post(path, json=body)
            assert refused.status_code == refusal, refused.text
        finally:
            await close_front(strict)


async def test_an_engine_failure_on_the_replica_ends_the_stream_by_contract(one):
    front, engine = one
    engine.enqueue(TextDelta("Hel"), RuntimeError("boom"))
    frames = await stream(front.client, CHAT, chat_body())
    assert content(frames) == "Hel"
    assert "error" in frames[-2] and frames[-1] == "[DONE]"
    engine.enqueue(TextDelta("Hel"), RuntimeError("boom"))
    response = await front.client.post("/v1/messages", json={
        "model": MODEL, "max_tokens": 50, "stream": True,
        "messages": [{"role": "user", "content": "Hi"}]})
    assert sse_data(response.text)[-1]["type"] == "error"


# -- the pool: failover, ejection, rejoining ----------------------------------------------------


async def test_a_dead_replica_is_skipped_without_errors(replicas, engines):
    dead = replicas[1]
    dead.stop()  # its port refuses connections now
    front = await open_front(*(r.base_url for r in replicas))
    try:
        for _ in range(6):
            response = await front.client.post(CHAT, json=chat_body())
            assert response.status_code == 200, response.text
        assert len(engines[0].requests) == 6
        replica = front.replica(dead.base_url)
        assert not replica.healthy
        metrics = (await front.client.get("/metrics")).text
        assert f'parlance_upstream_healthy{{replica="{replica.label}"}} 0' in metrics
        assert f'parlance_upstream_requests_total{{replica="{front.replica(replicas[0].base_url).label}"}} 6' in metrics  # noqa: E501
    finally:
        await close_front(front)


async def test_replica_refusing_with_5xx_is_retried_elsewhere_before_the_first_byte(engines):
    with SyntheticUpstream(model=MODEL, status=503) as broken, \
            AppServer(make_app(engines[0])) as healthy:
        front = await open_front(broken.base_url, healthy.base_url)
        try:
            for _ in range(4):
                frames = await stream(front.client, CHAT, chat_body())
                assert content(frames) == "Hello there!"
            assert broken.counters.requests  # it was tried, and its failure hidden
            assert front.replica(broken.base_url).metrics.failures >= 1
        finally:
            await close_front(front)


async def test_a_replica_killed_mid_stream_ends_that_stream_and_the_next_go_elsewhere(engines):
    with SyntheticUpstream(model=MODEL, tokens=10, break_after=3) as dying, \
            AppServer(make_app(engines[0])) as healthy:
        front = await open_front(dying.base_url)  # only the dying one at first
        try:
            frames = await stream(front.client, CHAT, chat_body())
            assert content(frames) == " tok" * 3
            assert frames[-2]["error"]["code"] == "upstream_disconnected"
            assert frames[-1] == "[DONE]"
            assert not front.replica(dying.base_url).healthy  # ejected at once
        finally:
            await close_front(front)
        front = await open_front(dying.base_url, healthy.base_url)
        try:
            await stream(front.client, CHAT, chat_body())  # may meet the dying one first
            for _ in range(4):
                frames = await stream(front.client, CHAT, chat_body())
                assert content(frames) == "Hello there!", frames
        finally:
            await close_front(front)


async def test_a_replica_that_never_answers_is_left_behind(engines):
    with SyntheticUpstream(model=MODEL, hang=True) as stuck, \
            AppServer(make_app(engines[0])) as healthy:
        front = await open_front(stuck.base_url, healthy.base_url, answer_timeout=0.5)
        try:
            for i in range(4):
                frames = await stream(front.client, CHAT, chat_body(f"Question {i}"))
                assert content(frames) == "Hello there!", frames
            assert stuck.counters.requests  # it was tried, and waited for no longer
            assert front.replica(stuck.base_url).metrics.failures >= 1
        finally:
            await close_front(front)


async def test_a_stream_broken_before_its_first_token_is_retried_silently(engines):
    with SyntheticUpstream(model=MODEL, break_after=0) as dying, \
            AppServer(make_app(engines[0])) as healthy:
        front = await open_front(dying.base_url, healthy.base_url)
        try:
            for _ in range(4):
                frames = await stream(front.client, CHAT, chat_body())
                assert content(frames) == "Hello there!", frames
            assert dying.counters.requests
        finally:
            await close_front(front)


async def test_a_replica_that_comes_back_rejoins(replicas, engines):
    front = await open_front(*(r.base_url for r in replicas))
    try:
        away = replicas[0]
        away.stop()
        await front.fleet.check()
        assert not front.replica(away.base_url).healthy
        for _ in range(3):
            assert (await front.client.post(CHAT, json=chat_body())).status_code == 200
        before = len(engines[0].requests)
        away.start()  # the same port
        await front.fleet.check()
        assert front.replica(away.base_url).healthy
        for i in range(4):  # different prompts: no affinity keeps them on the other one
            response = await front.client.post(CHAT, json=chat_body(f"Question {i}"))
            assert response.status_code == 200
        assert len(engines[0].requests) > before
    finally:
        await close_front(front)


async def test_every_replica_down_is_a_503(replicas):
    front = await open_front(*(r.base_url for r in replicas))
    try:
        for replica in replicas:
            replica.stop()
        response = await front.client.post(CHAT, json=chat_body())
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "upstream_unavailable"
        anthropic = await front.client.post("/v1/messages", json={
            "model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})
        assert anthropic.status_code in (503, 529)
    finally:
        await close_front(front)


# -- affinity: a conversation's turns go to one replica ---------------------------------------


async def test_a_conversations_turns_go_to_the_replica_holding_it(front, engines):
    def where() -> list[int]:
        return [len(e.requests) for e in engines]

    conversations = {"a": [{"role": "user", "content": "Tell me about cats"}],
                     "b": [{"role": "user", "content": "Tell me about dogs"}]}
    placed: dict[str, set[int]] = {"a": set(), "b": set()}
    for turn in range(3):
        for name, messages in conversations.items():
            before = where()
            body = (await front.client.post(CHAT, json={"model": MODEL,
                                                        "messages": messages})).json()
            after = where()
            placed[name].add(next(i for i in range(2) if after[i] > before[i]))
            messages += [body["choices"][0]["message"],
                         {"role": "user", "content": f"And then {turn}?"}]
    assert all(len(p) == 1 for p in placed.values()), placed
    routed = sum(r.metrics.affinity_hits for r in front.fleet.replicas)
    assert routed >= 4  # every later turn


async def test_previous_response_id_chains_stay_on_one_replica(front, engines):
    first = (await front.client.post("/v1/responses", json={
        "model": MODEL, "input": "Remember the number 7"})).json()
    home = next(i for i, e in enumerate(engines) if e.requests)
    previous = first["id"]
    for turn in range(3):
        reply = (await front.client.post("/v1/responses", json={
            "model": MODEL, "input": f"What was it? {turn}",
            "previous_response_id": previous})).json()
        previous = reply["id"]
    assert len(engines[home].requests) == 4
    assert not engines[1 - home].requests


# -- the client leaving stops the upstream ----------------------------------------------------


async def leave_after_first(base_url: str, marker: str) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=PATIENCE) as client, \
            client.stream("POST", CHAT, json=chat_body(stream=True)) as response:
        async for line in response.aiter_lines():
            if marker in line:
                return


async def test_a_client_that_leaves_closes_the_upstream_stream():
    with SyntheticUpstream(model=MODEL, tokens=5000, delay=0.01) as upstream, \
            serving_gateway(upstream.base_url) as (server, _):
        # the gateway on a real socket, so that leaving is a closed connection
        await leave_after_first(server.base_url, '" tok"')
        wait_for(lambda: upstream.counters.streams_left_early == 1,
                 "the upstream stream was closed")
        written = upstream.counters.chunks_written
        assert written < 5000
        await asyncio.sleep(0.2)
        assert upstream.counters.chunks_written == written  # it stopped


async def test_a_client_that_leaves_cancels_the_replicas_generation(engines):
    gate = asyncio.Event()  # never set: the replica's generation waits forever
    engines[0].enqueue(TextDelta("Hel"), gate, TextDelta("lo"), Finish(FinishReason.STOP),
                       Usage(1, 2))
    with AppServer(make_app(engines[0])) as replica, \
            serving_gateway(replica.base_url) as (server, _):
        await leave_after_first(server.base_url, "Hel")
        wait_for(lambda: engines[0].generations[-1].cancelled, "the replica stopped")

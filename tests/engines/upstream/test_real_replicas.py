"""The upstream engine in front of real model servers on loopback: `parlance serve`
processes (SmolLM2-135M, greedy) and, where this machine can build it, llama.cpp's own
llama-server. Replicas are killed with SIGKILL mid-stream and started again; what the
upstream did is read from its own /metrics (and llama-server's /slots)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.serve_process import ServeProcess, free_port, serve
from tests.support.sse import sse_data
from tests.support.upstream_replicas import fleet, gateway, serving_gateway, wait_for

pytestmark = pytest.mark.model

MODEL = "smollm2-135m-instruct"
CHAT = "/v1/chat/completions"
PATIENCE = 300.0
NEVER_ENDS = {str(t): -100 for t in (0, 1, 2, 4)}  # SmolLM2's end tokens: runs to max_tokens
REPLICA_ARGS = ("--parallel", "2", "--ctx-size", "2048", "--threads", "1")


def chat_body(content: str, **fields) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}],
            "temperature": 0, **fields}


def metric(text: str, name: str) -> float:
    """The sum of a Prometheus family's samples (every label set)."""
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


@contextlib.contextmanager
def replica(tmp: Path, port: int | None = None) -> Iterator[ServeProcess]:
    tmp.mkdir(parents=True, exist_ok=True)
    with serve(tmp, *REPLICA_ARGS, port=port) as server:
        yield server


@pytest.fixture(scope="module")
def replicas(tmp_path_factory) -> Iterator[list[ServeProcess]]:
    with replica(tmp_path_factory.mktemp("a")) as a, replica(tmp_path_factory.mktemp("b")) as b:
        yield [a, b]


class Front:
    def __init__(self, upstream_fleet, served, client) -> None:
        self.fleet, self.served, self.client = upstream_fleet, served, client

    def replica(self, url: str):
        return next(r for r in self.fleet.replicas if r.url == url)


@contextlib.asynccontextmanager
async def front(*urls: str):
    upstream_fleet = fleet(*urls)
    app, served = gateway(upstream_fleet)
    await served.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://gateway", timeout=PATIENCE) as client:
            yield Front(upstream_fleet, served, client)
    finally:
        await served.aclose()


async def answer(client: httpx.AsyncClient, path: str, body: dict) -> dict:
    response = await client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


# -- the same answers as the model's own server, in every dialect ---------------------------

DIALECTS = {
    "chat": (CHAT, chat_body("Write a haiku about the sea.", max_tokens=30),
             lambda r: r["choices"][0]["message"]["content"]),
    "completions": ("/v1/completions", {"model": MODEL, "prompt": "Once upon a time",
                                        "max_tokens": 20, "temperature": 0},
                    lambda r: r["choices"][0]["text"]),
    "responses": ("/v1/responses", {"model": MODEL, "input": "Write a haiku about the sea.",
                                    "max_output_tokens": 30, "temperature": 0},
                  lambda r: r["output"][-1]["content"][0]["text"]),
    "messages": ("/v1/messages", {"model": MODEL, "max_tokens": 30, "temperature": 0,
                                  "messages": [{"role": "user",
                                                "content": "Write a haiku about the sea."}]},
                 lambda r: r["content"][0]["text"]),
}


def streamed_text(frames: list) -> str:
    """The text a stream of any of those dialects carries, its deltas joined (a word may
    span several: where the model's tokens fall is its own affair)."""
    pieces = []
    for frame in frames:
        if not isinstance(frame, dict):
            continue
        if frame.get("choices"):  # Chat, Completions
            choice = frame["choices"][0]
            pieces.append(choice["delta"].get("content") or "" if "delta" in choice
                          else choice["text"])
        elif frame.get("type") == "response.output_text.delta":
            pieces.append(frame["delta"])
        elif frame.get("type") == "content_block_delta" and "text" in frame["delta"]:
            pieces.append(frame["delta"]["text"])
    return "".join(pieces)


@pytest.mark.parametrize("dialect", list(DIALECTS))
async def test_each_dialect_answers_as_the_replica_itself_does(replicas, dialect):
    path, body, text_of = DIALECTS[dialect]
    async with httpx.AsyncClient(base_url=replicas[0].base_url, timeout=PATIENCE) as direct:
        expected = text_of(await answer(direct, path, body))
    async with front(replicas[0].base_url, replicas[1].base_url) as gw:
        assert text_of(await answer(gw.client, path, body)) == expected
        response = await gw.client.post(path, json={**body, "stream": True})
        assert response.status_code == 200
        frames = sse_data(response.text)
        assert not any(isinstance(f, dict) and ("error" in f or f.get("type") == "error")
                       for f in frames)
        assert streamed_text(frames) == expected


async def test_usage_and_token_counts_are_the_replicas(replicas):
    body = chat_body("Say hello.", max_tokens=10, stream_options={"include_usage": True})
    async with httpx.AsyncClient(base_url=replicas[0].base_url, timeout=PATIENCE) as direct:
        usage = (await answer(direct, CHAT, body))["usage"]
    async with front(replicas[0].base_url) as gw:
        through = (await answer(gw.client, CHAT, body))["usage"]
        assert (through["prompt_tokens"], through["completion_tokens"]) == (
            usage["prompt_tokens"], usage["completion_tokens"])
        count = await gw.client.post("/v1/messages/count_tokens", json={
            "model": MODEL, "messages": [{"role": "user", "content": "Say hello."}]})
        assert count.json()["input_tokens"] == usage["prompt_tokens"]


# -- a killed replica, a replica back ----------------------------------------------------------


async def read_after_kill(base_url: str, body: dict, kill) -> list[str]:
    """Stream `body`; after its first content chunk call `kill()`; the data lines that
    came after."""
    frames: list[str] = []
    async with httpx.AsyncClient(base_url=base_url, timeout=PATIENCE) as client, \
            client.stream("POST", CHAT, json=body) as response:
        assert response.status_code == 200
        lines = response.aiter_lines()
        async for line in lines:
            if line.startswith("data: {") and '"content"' in line:
                break
        kill()
        async for line in lines:
            if line.startswith("data: "):
                frames.append(line[6:])
    return frames


LONG = chat_body("Count to a thousand.", max_tokens=1500, logit_bias=NEVER_ENDS, stream=True)


async def test_killing_a_replica_mid_stream_then_it_comes_back(tmp_path):
    port = free_port()
    with replica(tmp_path / "steady") as steady:
        doomed = replica(tmp_path / "doomed", port)
        victim = doomed.__enter__()
        try:
            with serving_gateway(victim.base_url) as (gw, _):  # the victim alone first
                frames = await read_after_kill(gw.base_url, LONG,
                                               lambda: victim.proc.send_signal(signal.SIGKILL))
            # the stream ended by the chat contract: an error object, then [DONE]
            assert frames[-1] == "[DONE]"
            assert json.loads(frames[-2])["error"]["code"] == "upstream_disconnected"
            victim.proc.wait(60)
            with serving_gateway(victim.base_url, steady.base_url) as (gw, upstream_fleet):
                back = next(r for r in upstream_fleet.replicas if r.url == victim.base_url)
                async with httpx.AsyncClient(base_url=gw.base_url, timeout=PATIENCE) as c:
                    for i in range(4):  # no error: the dead one is skipped
                        await answer(c, CHAT, chat_body(f"Say {i}.", max_tokens=5))
                    assert not back.healthy
                    with replica(tmp_path / "back", port):  # the same address again
                        wait_for(lambda: back.healthy, "the replica rejoined")
                        before = back.metrics.requests
                        for i in range(6):
                            await answer(c, CHAT, chat_body(f"Name {i}.", max_tokens=5))
                        assert back.metrics.requests > before
        finally:
            with contextlib.suppress(Exception):
                doomed.__exit__(None, None, None)


# -- the client leaving stops the upstream --------------------------------------------------------


async def leave_after(base_url: str, body: dict, chunks: int) -> None:
    async with httpx.AsyncClient(timeout=PATIENCE) as client, \
            client.stream("POST", base_url + CHAT, json=body) as response:
        seen = 0
        async for line in response.aiter_lines():
            seen += '"content"' in line
            if seen >= chunks:
                return


async def test_a_client_that_leaves_stops_the_replicas_generation(replicas):
    target = replicas[1]
    with serving_gateway(target.base_url) as (gw, _):
        await leave_after(gw.base_url, LONG, 3)
        # the replica's own metrics: nothing runs, and nothing more is generated
        deadline = time.monotonic() + PATIENCE
        async with httpx.AsyncClient(base_url=target.base_url, timeout=PATIENCE) as client:
            while True:
                text = (await client.get("/metrics")).text
                if metric(text, "parlance_requests_running") == 0:
                    break
                assert time.monotonic() < deadline, "the replica kept generating"
                await asyncio.sleep(0.05)
            generated = metric(text, "parlance_tokens_generated_total")
            await asyncio.sleep(0.5)
            text = (await client.get("/metrics")).text
            assert metric(text, "parlance_tokens_generated_total") == generated
    assert generated < 1500  # far from the end it would have run to


# -- affinity: a conversation stays where its KV cache is -----------------------------------------


async def test_a_conversation_goes_where_its_prefix_is_cached(replicas):
    async with httpx.AsyncClient(timeout=PATIENCE) as plain:
        async def hits() -> list[float]:
            return [metric((await plain.get(r.base_url + "/metrics")).text,
                           "parlance_prefix_cache_hits_total") for r in replicas]

        async with front(*(r.base_url for r in replicas)) as gw:
            before = await hits()
            messages = [{"role": "user", "content": "List three colours of the rainbow."}]
            for turn in range(4):
                reply = await answer(gw.client, CHAT, {"model": MODEL, "messages": messages,
                                                       "temperature": 0, "max_tokens": 12})
                messages += [reply["choices"][0]["message"],
                             {"role": "user", "content": f"And {turn + 1} more?"}]
            gained = [after - b for after, b in zip(await hits(), before, strict=True)]
            home = gained.index(max(gained))
            assert gained[home] >= 3  # every later turn reused the cached conversation
            assert gained[1 - home] == 0
            routed = [gw.replica(r.base_url).metrics.requests for r in replicas]
            assert routed[1 - home] == 0 and routed[home] == 4


# -- llama-server replicas ---------------------------------------------------------------


def _smollm2_gguf() -> Path:
    from parlance.models.registry import builtin_registry

    return builtin_registry()[MODEL].locate()


@contextlib.contextmanager
def llama_server(port: int | None = None, model: Path | None = None
                 ) -> Iterator[subprocess.Popen[bytes]]:
    from tests.support.llama_cpp_programs import require

    binary = require("llama-server")
    port = port or free_port()
    proc = subprocess.Popen(
        [str(binary), "-m", str(model or _smollm2_gguf()), "--host", "127.0.0.1",
         "--port", str(port),
         "-np", "2", "-c", "4096", "-t", "1", "--metrics", "--slots", "--jinja",
         "-a", MODEL], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.port = port  # type: ignore[attr-defined]
    try:
        deadline = time.monotonic() + PATIENCE
        while True:
            assert proc.poll() is None, "llama-server exited"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            assert time.monotonic() < deadline, "llama-server did not start"
            time.sleep(0.2)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def url(proc) -> str:
    return f"http://127.0.0.1:{proc.port}"


@pytest.mark.peers
async def test_llama_server_replicas_stream_fail_over_and_stop_with_the_client():
    with llama_server() as one, llama_server() as two:
        async with front(url(one), url(two)) as gw:
            # discovery: llama-server lists the model by its alias, its context per slot
            assert [m["id"] for m in (await gw.client.get("/v1/models")).json()["data"]] \
                == [MODEL]
            body = chat_body("Write a haiku about the sea.", max_tokens=30)
            async with httpx.AsyncClient(base_url=url(one), timeout=PATIENCE) as direct:
                expected = (await answer(direct, CHAT, body))["choices"][0]["message"]
            got = (await answer(gw.client, CHAT, body))["choices"][0]["message"]
            assert got["content"] == expected["content"]
            messages = await answer(gw.client, "/v1/messages", {
                "model": MODEL, "max_tokens": 30, "temperature": 0,
                "messages": [{"role": "user", "content": "Write a haiku about the sea."}]})
            assert messages["content"][0]["text"] == expected["content"]

            # tool_choice "required": a call valid for the tool — never the replica's
            # plain text relayed as an answer; a replica that leaves the call unmade is
            # asked again with the call as structured output, which llama-server holds
            forced = chat_body("Weather in Paris?", max_tokens=200, tool_choice="required",
                               tools=[{"type": "function", "function": {
                                   "name": "get_weather", "parameters": {
                                       "type": "object", "required": ["city"],
                                       "properties": {"city": {"type": "string"}}}}}])
            async with httpx.AsyncClient(base_url=url(one), timeout=PATIENCE) as direct:
                plain = (await direct.post(CHAT, json=forced)).json()["choices"][0]["message"]
            relayed = await gw.client.post(CHAT, json=forced)
            assert relayed.status_code == 200, (plain, relayed.text)
            call = relayed.json()["choices"][0]["message"]["tool_calls"][0]["function"]
            assert call["name"] == "get_weather"
            assert isinstance(json.loads(call["arguments"])["city"], str)

            # affinity and the replica's cache: the second turn reuses the first's prompt
            history = [{"role": "user", "content": "Name a fruit."}]
            first = await answer(gw.client, CHAT, chat_body("Name a fruit.", max_tokens=8))
            history += [first["choices"][0]["message"], {"role": "user", "content": "Another?"}]
            second = await answer(gw.client, CHAT, {"model": MODEL, "messages": history,
                                                    "temperature": 0, "max_tokens": 8})
            assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
            assert sum(r.metrics.affinity_hits for r in gw.fleet.replicas) >= 1

        # the client leaves: llama-server's slot stops processing
        with serving_gateway(url(one), url(two)) as (gw, upstream_fleet):
            await leave_after(gw.base_url, chat_body("Count to a thousand.", max_tokens=3000,
                                                     logit_bias=NEVER_ENDS, stream=True), 3)
            deadline = time.monotonic() + PATIENCE
            async with httpx.AsyncClient(timeout=PATIENCE) as client:
                while True:
                    slots = [s for p in (one, two) for s in
                             (await client.get(url(p) + "/slots")).json()]
                    if not any(s.get("is_processing") for s in slots):
                        break
                    assert time.monotonic() < deadline, "llama-server kept generating"
                    await asyncio.sleep(0.05)

            # kill one mid-stream: that stream ends by contract, the next ones succeed
            killed: list = []

            def kill_the_busy_one() -> None:
                busy = next(r for r in upstream_fleet.replicas if r.outstanding)
                killed.append(one if busy.url == url(one) else two)
                killed[0].send_signal(signal.SIGKILL)

            frames = await read_after_kill(gw.base_url, LONG, kill_the_busy_one)
            assert frames[-1] == "[DONE]"
            assert json.loads(frames[-2])["error"]["code"] == "upstream_disconnected"
            victim = killed[0]
            victim.wait(60)
            async with httpx.AsyncClient(base_url=gw.base_url, timeout=PATIENCE) as c:
                for i in range(4):
                    await answer(c, CHAT, chat_body(f"Say {i}.", max_tokens=5))
            with llama_server(victim.port):  # type: ignore[attr-defined]
                wait_for(lambda: all(r.healthy for r in upstream_fleet.replicas),
                         "the restarted llama-server rejoined")


@pytest.mark.peers
async def test_llama_server_counts_with_its_own_tokenizer():
    """llama-server's /v1/chat/completions/input_tokens and /tokenize give the count its
    generation reports (no generation needed to count)."""
    from parlance.core.messages import Message
    from parlance.core.request import ChatInput, GenerationRequest, TextInput
    from parlance.engines.upstream.counting import tokenizer_count

    with llama_server() as proc:
        upstream_fleet = fleet(url(proc))
        await upstream_fleet.check()
        replica = upstream_fleet.replicas[0]
        try:
            chat = ChatInput((Message("system", "Be brief."), Message("user", "Hello there")))
            text = TextInput(text="Once upon a time")
            async with httpx.AsyncClient(base_url=url(proc), timeout=PATIENCE) as direct:
                for prompt, path, body in (
                        (chat, CHAT, {"messages": [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": "Hello there"}]}),
                        (text, "/v1/completions", {"prompt": "Once upon a time"})):
                    usage = (await answer(direct, path, {"model": MODEL, "max_tokens": 1,
                                                         **body}))["usage"]
                    request = GenerationRequest(model=MODEL, prompts=(prompt,))
                    assert await tokenizer_count(replica, MODEL, request, prompt) == \
                        usage["prompt_tokens"]
        finally:
            await upstream_fleet.aclose()


@pytest.mark.peers
async def test_llama_server_holds_a_forced_call_sent_as_structured_output():
    """What the upstream engine sends when a replica left a forced call unmade
    (`wire.structured_call`), to llama-server over a tiny Qwen3 GGUF with random weights:
    only the grammar llama-server builds from the schema can make its answer a valid
    call of one of the tools."""
    from parlance.core.messages import Message
    from parlance.core.request import ChatInput, GenerationRequest
    from parlance.core.tools import ToolChoice, ToolSpec
    from parlance.engines.upstream.chunks import ChoiceMapper
    from parlance.engines.upstream.tool_contract import ToolContract
    from parlance.engines.upstream.wire import structured_call, sub_requests
    from tests.support.family_gguf import QWEN3, family_gguf

    city = {"type": "object", "required": ["city", "days"], "additionalProperties": False,
            "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                           "days": {"type": "integer", "minimum": 1, "maximum": 7}}}
    request = GenerationRequest(
        model=MODEL, prompts=(ChatInput((Message("user", "Weather in Paris?"),)),),
        max_tokens=200, tools=(ToolSpec("get_weather", "", city),
                               ToolSpec("get_time", "", {"type": "object", "properties": {
                                   "zone": {"type": "string", "enum": ["UTC"]}},
                                   "required": ["zone"], "additionalProperties": False})),
        tool_choice=ToolChoice("required"))
    (sub,) = sub_requests(request, MODEL)
    retry = structured_call(sub)
    assert retry is not None
    with llama_server(model=family_gguf(QWEN3)) as proc:
        async with httpx.AsyncClient(base_url=url(proc), timeout=PATIENCE) as direct:
            response = await direct.post(retry.path, json={**retry.body, "temperature": 0})
    assert response.status_code == 200, response.text
    mapper = ChoiceMapper(0, structured=True, contract=ToolContract.of(request))
    events = []
    for frame in sse_data(response.text):
        if isinstance(frame, dict):
            events += mapper.feed(frame)  # a broken promise would raise StreamError
    names = [e.name for e in events if type(e).__name__ == "ToolCallStart"]
    assert len(names) == 1 and names[0] in ("get_weather", "get_time")


@pytest.mark.peers
async def test_decisions_through_llama_server(llama):
    """Decisions through the upstream engine in front of llama-server (SmolLM2): the
    labels are read from the top log-probabilities its chat completions return (its
    `n_probs`), and they agree with Parlance's own teacher forcing of the same prompts
    (two builds of llama.cpp: close, not equal); a label of several tokens is a 501.
    llama-server's stock build multiplies attention in F32; Parlance's takes BF16
    products where the CPU has them, which moves these probabilities by a few hundredths,
    so the local side here takes F32 products too: the test is of how labels are read."""
    from parlance.core import decisions as d
    from tests.support.patched_ggml import switched

    context = "I was charged twice for my subscription renewal and nobody answers."
    decision = d.Decision(MODEL, context, (
        d.predicate("Is the customer angry?"),
        d.scale("How urgent is this?", ["low", "mid", "high"])))
    with switched("ggml_cpu_set_flash_attn_bf16", "ggml_cpu_get_flash_attn_bf16", False):
        local = d.answers(decision, (await llama.score(d.score_request(decision))).prompts)
    body = {"model": MODEL, "input": context, "questions": [
        {"type": "predicate", "instructions": "Is the customer angry?"},
        {"type": "score", "instructions": "How urgent is this?",
         "levels": [{"label": "low"}, {"label": "mid"}, {"label": "high"}]}]}
    with llama_server() as proc:
        async with front(url(proc)) as gw:
            predicate, urgency = (await answer(gw.client, "/v1/decisions", body))["answers"]
            levels = [p["probability"] for p in urgency["probabilities"]]
            assert predicate["probability"] == pytest.approx(local[0].probabilities[0],
                                                             abs=5e-3)
            assert levels == pytest.approx(list(local[1].probabilities), abs=5e-3)
            assert math.fsum(levels) == pytest.approx(1.0, abs=1e-6)
            several = {**body, "questions": [{
                "type": "choice", "instructions": "Which team?",
                "choices": [{"value": "billing department"}, {"value": "tech support"}]}]}
            refused = await gw.client.post("/v1/decisions", json=several)
            assert refused.status_code == 501, refused.text

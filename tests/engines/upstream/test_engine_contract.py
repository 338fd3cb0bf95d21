"""The engine seam's contract, held by the upstream engine (engines/base.py): refusals
come from `start()`; `cancel()` ends the stream at once and frees the upstream;
`aclose()` ends running generations with `Failed(ModelUnloaded)`; every finished
stream ends with one `Usage`."""

from __future__ import annotations

import asyncio

import pytest

from parlance.core.errors import ContextOverflow, ModelUnloaded
from parlance.core.events import Failed, Finish, FinishReason, PromptProgress, TextDelta, Usage
from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest
from parlance.engines.fake import FakeEngine
from tests.support.fake_app import make_app
from tests.support.upstream_replicas import AppServer, fleet

MODEL = "fake-model"
PATIENCE = 60.0


async def until(predicate, what: str) -> None:
    """Wait on this loop (the engine's tasks must run meanwhile)."""
    deadline = asyncio.get_running_loop().time() + PATIENCE
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"not within {PATIENCE}s: {what}"
        await asyncio.sleep(0.01)


def request(text: str = "Hi there", **kw) -> GenerationRequest:
    return GenerationRequest(model=MODEL, prompts=(ChatInput((Message("user", text),)),), **kw)


@pytest.fixture
async def setup():
    engine = FakeEngine(context_length=50)
    with AppServer(make_app(engine)) as replica:
        upstream_fleet = fleet(replica.base_url)
        await upstream_fleet.check()
        yield engine, upstream_fleet.engine(MODEL)
        await upstream_fleet.aclose()


async def test_a_finished_stream_ends_with_one_usage(setup):
    _, upstream = setup
    generation = await upstream.start(request())
    events = [e async for e in generation]
    assert events[0] == PromptProgress(0, 1) and PromptProgress(1, 1) in events
    assert [e for e in events if isinstance(e, TextDelta | Finish)] == [
        TextDelta("Hello"), TextDelta(" there!"), Finish(FinishReason.STOP)]
    assert isinstance(events[-1], Usage) and events[-1].prompt_tokens == 2
    assert upstream.metrics.requests_running == 0


async def test_refusals_come_from_start(setup):
    _, upstream = setup
    with pytest.raises(ContextOverflow):
        await upstream.start(request(" ".join(["w"] * 80)))
    assert upstream.metrics.requests_running == 0
    assert all(r.outstanding == 0 for r in upstream.pool.replicas)


async def test_cancel_ends_the_stream_at_once_and_the_upstream_stops(setup):
    replica_engine, upstream = setup
    replica_engine.enqueue(TextDelta("Hel"), asyncio.Event(), TextDelta("lo"),
                           Finish(FinishReason.STOP), Usage(1, 2))
    generation = await upstream.start(request())
    stream = generation.__aiter__()
    while not isinstance(await stream.__anext__(), TextDelta):
        pass
    generation.cancel()
    assert [e async for e in stream] == []  # nothing more, at once
    await until(lambda: replica_engine.generations[-1].cancelled, "the replica was told")
    await until(lambda: all(r.outstanding == 0 for r in upstream.pool.replicas), "released")
    assert upstream.metrics.requests_running == 0


async def test_aclose_ends_running_generations_with_model_unloaded(setup):
    replica_engine, upstream = setup
    replica_engine.enqueue(TextDelta("Hel"), asyncio.Event(), Finish(FinishReason.STOP),
                           Usage(1, 1))
    generation = await upstream.start(request())
    stream = generation.__aiter__()
    while not isinstance(await stream.__anext__(), TextDelta):
        pass
    await upstream.aclose()
    rest = [e async for e in stream]
    assert len(rest) == 1 and isinstance(rest[0], Failed)
    assert isinstance(rest[0].error, ModelUnloaded)
    await until(lambda: replica_engine.generations[-1].cancelled, "the replica was told")
    with pytest.raises(ModelUnloaded):
        await upstream.start(request())

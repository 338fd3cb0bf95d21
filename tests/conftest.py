"""Shared fixtures: an app over the scripted fake engine, and clients for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from parlance.engines.fake import FakeEngine
from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app

FAKE_SPEC = ModelSpec(id="fake-model", locate=lambda: Path("/dev/null"), aliases=("fake-alias",))


def make_app(engine: FakeEngine, **settings: object):
    models = ServedModels([ServedModel(FAKE_SPEC, engine, 1700000000)])
    return create_app(models, ServerSettings(**settings))  # type: ignore[arg-type]


@pytest.fixture
def fake_engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
async def client(fake_engine: FakeEngine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=make_app(fake_engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c


from tests.transcripts import fixed_ids  # noqa: E402,F401  (fixture re-export)


@pytest.fixture(scope="session")
def real_llama_engine():
    """The one real engine of the session, shared by every real-engine test."""
    from tests.real_engine import close_shared_engine, shared_engine

    yield shared_engine()
    close_shared_engine()


@pytest.fixture
def llama(real_llama_engine):
    """The shared real engine; the test must leave it idle (nothing outlives it)."""
    from tests.real_engine import PATIENCE, assert_idle_soon, kv_cache_mismatches

    # Each test starts from an empty KV cache: where cached cells lie changes the
    # order of float sums in attention, and greedy comparisons need the same order.
    assert real_llama_engine.scheduler.clear_cache().wait(PATIENCE)
    yield real_llama_engine
    assert_idle_soon(real_llama_engine)
    assert not kv_cache_mismatches(real_llama_engine)


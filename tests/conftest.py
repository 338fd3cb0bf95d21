"""The fixtures every test may use: the scripted fake engine and a client of an app over
it, and the one real engine of the session. The ones only some tests use live in
`tests/support/fixtures.py`, a plugin loaded here."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from parlance.engines.fake import FakeEngine
from tests.support.fake_app import make_app

pytest_plugins = ("tests.support.fixtures",)
COSTLY = ("model", "clients", "peers", "browser")  # the markers by cost (pyproject.toml)


@pytest.hookimpl(tryfirst=True)  # before `-m` selects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every costly test is `slow` too (`-m "not slow"` is the fast tier), and a test that
    takes the real engine must say so with `model`."""
    for item in items:
        if any(item.get_closest_marker(name) for name in COSTLY):
            item.add_marker(pytest.mark.slow)
        if "real_llama_engine" in getattr(item, "fixturenames", ()) and not (
                item.get_closest_marker("model")):
            raise pytest.UsageError(f"{item.nodeid} uses the real engine: mark it `model`")


@pytest.fixture
def fake_engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
async def client(fake_engine: FakeEngine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=make_app(fake_engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c


@pytest.fixture(scope="session")
def real_llama_engine():
    """The one real engine of the session, shared by every real-engine test."""
    from tests.support.real_engine import close_shared_engine, shared_engine

    yield shared_engine()
    close_shared_engine()


@pytest.fixture
def llama(real_llama_engine):
    """The shared real engine; the test must leave it idle (nothing outlives it)."""
    from tests.support.real_engine import PATIENCE, assert_idle_soon, kv_cache_mismatches

    # Each test starts from an empty KV cache: where cached cells lie changes the
    # order of float sums in attention, and greedy comparisons need the same order.
    assert real_llama_engine.scheduler.clear_cache().wait(PATIENCE)
    yield real_llama_engine
    assert_idle_soon(real_llama_engine)
    assert not kv_cache_mismatches(real_llama_engine)

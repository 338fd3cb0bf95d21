"""Fixtures for the real llama.cpp engine tests (SmolLM2-135M, loaded once per session)."""

from __future__ import annotations

import pytest

from tests.real_engine import assert_idle_soon, close_shared_engine, shared_engine


@pytest.fixture(scope="session")
def real_llama_engine():
    """The one real engine of the session (shared with the HTTP real-engine tests)."""
    yield shared_engine()
    close_shared_engine()


@pytest.fixture
def engine(real_llama_engine):
    """The shared real engine; the test must leave its worker idle (nothing outlives it)."""
    yield real_llama_engine
    assert_idle_soon(real_llama_engine)

"""Fixtures some tests share, loaded as a pytest plugin by tests/conftest.py: stable ids
for golden transcripts, the loopback MCP test server and an app that may use it, an
app whose models load through a scripted loader, a headless browser, and for the
client matrix a SmolLM2 server and an agent's home and working folders."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from parlance.engines.fake import FakeEngine
from parlance.integrations.settings import IntegrationSettings
from parlance.models.served import ServedModels
from tests.support import mcp_server
from tests.support.browser import Browser
from tests.support.client_runs import SERVE_ARGS
from tests.support.fake_app import make_app
from tests.support.scripted_models import ScriptedLoader, make
from tests.support.serve_process import ServeProcess, serve


@pytest.fixture
def fixed_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ids and timestamps stable so transcripts compare byte for byte."""
    for module in ("parlance.dialects.openai.chat", "parlance.dialects.openai.completions",
                   "parlance.dialects.openai.responses"):
        monkeypatch.setattr(f"{module}.new_id", lambda prefix: f"{prefix}test")
        monkeypatch.setattr(f"{module}.now", lambda: 1700000000)
    for module in ("parlance.dialects.openai.responses.output",
                   "parlance.dialects.openai.responses.request"):
        monkeypatch.setattr(f"{module}.new_id", lambda prefix: f"{prefix}test")
    monkeypatch.setattr("parlance.dialects.openai.responses.result.now", lambda: 1700000000)
    monkeypatch.setattr("parlance.engines.parsing.calls.new_call_id", lambda: "call_test")
    monkeypatch.setattr("parlance.dialects.lmstudio.new_response_id", lambda: "resp_" + "0" * 48)
    monkeypatch.setattr("parlance.dialects.anthropic.result.new_message_id", lambda: "msg_test")
    monkeypatch.setattr("parlance.dialects.ollama.result.timestamp",
                        lambda: "2023-08-04T19:22:45.499127Z")
    ticks = itertools.count(0, 250_000_000)  # each reading of the clock a quarter second on
    monkeypatch.setattr("parlance.dialects.ollama.result.clock_ns", lambda: next(ticks))
    # the wait for a loaded model: 2 ms (Ollama's load_duration)
    readings = itertools.count(0.0, 0.002)
    monkeypatch.setattr("parlance.models.lease.perf_counter",
                        lambda: next(readings))



@pytest.fixture(scope="module")
def mcp() -> Iterator[mcp_server.RunningServer]:
    """The loopback MCP test server (one per module)."""
    server = mcp_server.start()
    yield server
    server.stop()


@pytest.fixture
async def mcp_client(fake_engine: FakeEngine) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app over the fake engine that lets requests name MCP servers on
    loopback."""
    app = make_app(fake_engine, integrations=IntegrationSettings(
        allow_request_servers=True, allowed_hosts=("127.0.0.1",)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as c:
        yield c


@pytest.fixture
async def scripted() -> AsyncIterator[tuple[ServedModels, httpx.AsyncClient, ScriptedLoader]]:
    """An app whose models load through a scripted loader (nothing loaded at first), its
    reaper running as in a real server, and a client for it."""
    loader = ScriptedLoader()
    models, app = make(loader, idle_ttl=3600)
    models.start_reaper()  # (the app's lifespan does it in a real server)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        yield models, client, loader
    await models.aclose()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for a module's tests (each opens the page fresh)."""
    page = Browser()
    yield page
    page.close()


@pytest.fixture(scope="module")
def smollm2_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """`parlance serve` with SmolLM2, patient enough for two busy cores; one per module."""
    with serve(tmp_path_factory.mktemp("client-server"), *SERVE_ARGS) as running:
        yield running


@pytest.fixture
def agent_dirs(tmp_path: Path) -> tuple[Path, Path]:
    """An agent's fresh home (no user settings) and its scratch working folder."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    return home, work

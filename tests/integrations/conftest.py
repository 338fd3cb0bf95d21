"""Fixtures of the server-side tool tests: the loopback MCP test server (one per module)
and a client of an app that lets requests name MCP servers on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from parlance.engines.fake import FakeEngine
from parlance.integrations.settings import IntegrationSettings
from tests import mcp_server
from tests.conftest import make_app


@pytest.fixture(scope="module")
def mcp() -> Iterator[mcp_server.RunningServer]:
    server = mcp_server.start()
    yield server
    server.stop()


@pytest.fixture
async def client(fake_engine: FakeEngine) -> AsyncIterator[httpx.AsyncClient]:
    app = make_app(fake_engine, integrations=IntegrationSettings(
        allow_request_servers=True, allowed_hosts=("127.0.0.1",)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as c:
        yield c

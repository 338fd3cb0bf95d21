"""Fixtures several server test modules share."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from parlance.models.served import ServedModels
from tests.server.scripted_models import ScriptedLoader, make


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

"""Shared fixtures: an app over the scripted fake engine, and clients for it."""

from __future__ import annotations

import json
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


def sse_data(body: str) -> list[object]:
    """Parse the `data:` payloads of an SSE body (JSON, or the raw `[DONE]`)."""
    out: list[object] = []
    for block in body.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                payload = line[len("data: "):]
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


from tests.transcripts import fixed_ids  # noqa: E402,F401  (fixture re-export)

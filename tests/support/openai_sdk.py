"""The official openai SDK as a client of an app over the fake engine, with strict
response validation: every chunk and body must parse as the SDK's types."""

from __future__ import annotations

import httpx
from openai import AsyncOpenAI

from parlance.engines.fake import FakeEngine
from tests.support.fake_app import make_app


def sdk(engine: FakeEngine, **settings) -> AsyncOpenAI:
    transport = httpx.ASGITransport(app=make_app(engine, **settings))
    return AsyncOpenAI(base_url="http://test/v1", api_key="sk-test", max_retries=0,
                       http_client=httpx.AsyncClient(transport=transport),
                       _strict_response_validation=True)

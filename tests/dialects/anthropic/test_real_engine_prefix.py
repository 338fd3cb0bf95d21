"""Claude Code's next request, with a new billing-header nonce, reads its prompt from the
cache on the REAL engine (SmolLM2): the per-request line no longer ends the prefix."""

from __future__ import annotations

import httpx2
import pytest
from anthropic import AsyncAnthropic

from tests.support.real_engine import MODEL_ID, REQUEST_TIMEOUT, make_app

pytestmark = pytest.mark.model

MAIN_PROMPT = ("You are an interactive agent that helps users with software engineering "
               "tasks. Use the instructions below and the tools available to you. " * 8)


def system(nonce: str) -> list[dict]:
    return [{"type": "text",
             "text": f"x-anthropic-billing-header: cc_version=2.1.197.{nonce}; "
                     "cc_entrypoint=sdk-cli;"},
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
             "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": MAIN_PROMPT, "cache_control": {"type": "ephemeral"}}]


async def test_a_new_nonce_keeps_the_cached_prefix(llama):
    transport = httpx2.ASGITransport(app=make_app(llama))
    sdk = AsyncAnthropic(base_url="http://parlance.test", api_key="sk-test", max_retries=0,
                         timeout=REQUEST_TIMEOUT,
                         http_client=httpx2.AsyncClient(transport=transport))
    asked = {"model": MODEL_ID, "max_tokens": 4, "extra_body": {"temperature": 0.0},
             "messages": [{"role": "user", "content": "List the files."}]}
    first = await sdk.messages.create(system=system("c40"), **asked)
    second = await sdk.messages.create(system=system("53a"), **asked)
    whole = first.usage.input_tokens + first.usage.cache_read_input_tokens
    assert whole > 100
    # All of the prompt but the token evaluated again for fresh logits came from the cache.
    assert second.usage.cache_read_input_tokens == whole - 1
    assert second.usage.input_tokens == 1

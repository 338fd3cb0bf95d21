"""LiteLLM as a client (PyPI `litellm`, in its own venv) against `parlance serve` with
SmolLM2 through its `openai/`, `anthropic/`, `ollama_chat/` and `lm_studio/` providers:
a text call, a streamed call, and a call offering a function tool with `tool_choice`
naming it. The call is forced (a grammar) where the provider sends `tool_choice`:
OpenAI, Anthropic and LM Studio; Ollama's API has no `tool_choice` (LiteLLM drops it),
so there a call, if SmolLM2 makes one, must only parse."""

from __future__ import annotations

import pytest

from tests.support.client_runs import assert_all_succeeded, no_errors, run_script
from tests.support.pypi import pypi_venv

pytestmark = [pytest.mark.clients, pytest.mark.model]

LITELLM_VERSION = "1.110.2"
FORCED = {"openai", "anthropic", "lm_studio"}


@pytest.fixture(scope="module")
def venv():
    return pypi_venv("litellm", LITELLM_VERSION, f"litellm=={LITELLM_VERSION}")



def test_litellm_providers_speak_to_parlance(venv, smollm2_server):
    report = run_script(venv, "litellm_calls.py", smollm2_server.base_url)
    no_errors(report)
    assert set(report) == {"openai", "anthropic", "ollama_chat", "lm_studio"}
    for name, part in report.items():
        assert part["text"].strip() and part["usage"] > 0, (name, part)
        assert part["stream"].strip(), (name, part)
        for call in part["tool_calls"]:  # LiteLLM parsed each call's arguments
            assert call["name"] == "get_weather" and set(call["arguments"]) == {"city"}, part
        if name in FORCED:
            assert len(part["tool_calls"]) == 1 and part["finish_reason"] == "tool_calls", part
    # `ollama_chat/` asks `/api/show` for the model's facts before its calls
    assert_all_succeeded(smollm2_server.output(), paths={"/v1/chat/completions", "/v1/messages",
                                                         "/api/chat", "/api/show"})

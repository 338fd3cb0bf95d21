"""pydantic-ai (PyPI `pydantic-ai-slim[openai,anthropic]`, in its own venv) against
`parlance serve` with SmolLM2 through the four model classes it offers for a local server:
`OpenAIChatModel`, `OpenAIResponsesModel`, `AnthropicModel` and `OllamaModel` (Ollama's
OpenAI-compatible `/v1`). Each makes a text run, a streamed run, a tool-based structured
output run (pydantic-ai forces its output tool), a direct request forced to call a
function tool and, but Anthropic, `NativeOutput` (`response_format`). The structured
outputs are forced by a grammar, so they must validate, nested model (`$defs`) and all."""

from __future__ import annotations

import pytest

from tests.support.client_runs import assert_all_succeeded, no_errors, run_script
from tests.support.pypi import pypi_venv

pytestmark = [pytest.mark.clients, pytest.mark.model]

PYDANTIC_AI_VERSION = "2.66.0"


@pytest.fixture(scope="module")
def venv():
    return pypi_venv("pydantic-ai", PYDANTIC_AI_VERSION,
                     f"pydantic-ai-slim[openai,anthropic]=={PYDANTIC_AI_VERSION}")



def test_pydantic_ai_runs_every_model_class_against_parlance(venv, smollm2_server):
    report = run_script(venv, "pydantic_ai_calls.py", smollm2_server.base_url)
    no_errors(report)
    assert set(report) == {"chat", "responses", "anthropic", "ollama"}
    for name, part in report.items():
        assert part["text"].strip(), (name, part)
        assert "".join(part["stream"]).strip(), (name, part)
        # forced: pydantic-ai validated these against the schema before returning them
        assert set(part["tool_output"]) == {"traveller", "destination"}, (name, part)
        assert part["forced_call"] and part["forced_call"][0]["name"] == "get_weather", part
        if name != "anthropic":
            assert set(part["native_output"]) == {"traveller", "destination"}, (name, part)
    assert_all_succeeded(smollm2_server.output(), paths={"/v1/chat/completions", "/v1/responses",
                                                 "/v1/messages"})

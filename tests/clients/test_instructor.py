"""instructor (PyPI `instructor`, in its own venv) against `parlance serve` with SmolLM2:
structured output through the OpenAI client in `Mode.TOOLS` (a forced tool call) and
`Mode.JSON_SCHEMA` (`response_format`), and through its Ollama provider
(`from_provider("ollama/…")`, Ollama's OpenAI-compatible `/v1`, in TOOLS mode: SmolLM2
is not in the provider's list of tool-capable names, and its JSON mode only asks for
some JSON object, which nothing forces to fit the model). Each makes a whole answer,
streamed partials and `create_iterable` (a schema of `$defs` references). Retries are
off: every answer must validate the first time, as the grammar promises."""

from __future__ import annotations

import pytest

from tests.support.client_runs import assert_all_succeeded, no_errors, run_script
from tests.support.pypi import pypi_venv

pytestmark = [pytest.mark.clients, pytest.mark.model]

INSTRUCTOR_VERSION = "1.17.0"


@pytest.fixture(scope="module")
def venv():
    return pypi_venv("instructor", INSTRUCTOR_VERSION, f"instructor=={INSTRUCTOR_VERSION}")



def test_instructor_modes_and_its_ollama_provider_validate(venv, smollm2_server):
    report = run_script(venv, "instructor_calls.py", smollm2_server.base_url)
    no_errors(report)
    assert set(report) == {"tools", "json_schema", "ollama"}
    for name, part in report.items():
        # instructor validated each against `Person` before returning it
        assert set(part["whole"]) == {"name", "age", "city"}, (name, part)
        assert part["partials"] >= 1 and set(part["last_partial"]) == {"name", "age", "city"}
        assert all(set(p) == {"name", "age", "city"} for p in part["iterable"]), (name, part)
    assert_all_succeeded(smollm2_server.output(), paths={"/v1/chat/completions"})

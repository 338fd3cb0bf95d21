"""Schemathesis against `/openapi.json` on the fake engine, over a real loopback server:
every operation of the document, with requests generated from it (bodies from the
dialects' wire models; valid ones, then invalid ones), answers without a 5xx and as the
document says (status, media type, body schema).

Every model name a request makes up means the fake model (a catch-all alias), so the
generated bodies reach the dialects' parsing and the generation behind it, not only the
model lookup. The models directory is unset, so no download ever starts. WebSocket mode
has no OpenAPI form and is not exercised here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from parlance.engines.fake import FakeEngine
from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.live_server import ServerThread

ANY_NAME = ModelSpec(id="fake-model", locate=lambda: Path("/dev/null"), aliases=("*",))
STREAMS = {"text/event-stream", "application/x-ndjson"}
# Examples that succeed only on a server in another state; here they must be refused.
# (The unload's example names this server's model, loaded by the examples before it.)
NEEDS_STATE = {"POST /api/v1/models/download": "a models directory",
               "DELETE /api/delete": "a model file in the models directory"}
EXAMPLES = 6  # per operation and mode: some 45 operations in a minute or two when busy
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # Loaded on demand, so a request that unloads it (Ollama's keep_alive 0) does not
    # leave the operations after it with no model
    models = ServedModels([], catalog=lambda: [ANY_NAME], loader=fake_engine)
    data = tmp_path_factory.mktemp("data")
    with ServerThread(create_app(models, ServerSettings(data_dir=data))) as server:
        yield server.base_url


def fake_engine(spec: ModelSpec, options: Any, on_progress: Any) -> FakeEngine:
    return FakeEngine(context_length=options.context_length or 2048)


@pytest.fixture(scope="module")
def schema(base_url: str):
    return schemathesis.openapi.from_url(f"{base_url}/openapi.json")


def test_every_documented_example_succeeds_and_streams_as_documented(schema) -> None:
    """The document's example bodies (what "Try it out" sends), and each one streamed
    where the route streams (asked for by the body's `stream` and by Accept, which a
    load's stream needs): a success whose media type and body are as documented."""
    sent = 0
    for operation in (result.ok() for result in schema.get_all_operations()):
        content = operation.definition.raw.get("requestBody", {}).get("content", {})
        example = content.get("application/json", {}).get("example")
        if example is None:
            continue
        answers = operation.definition.raw["responses"].get("200", {}).get("content", {})
        parameters = operation.definition.raw.get("parameters", [])
        path = {p["name"]: "any-model" for p in parameters if p["in"] == "path"}
        # a route that streams by its URL (Gemini's) asks for SSE with `alt=sse`
        streamed_by = {"alt": "sse"} if any(p["name"] == "alt" for p in parameters) else {}
        bodies = [(example, {}, {})]
        if media := STREAMS & set(answers):  # asked for by the body, or by Accept alone
            bodies.append(({**example, "stream": True}, {"accept": media.pop()}, streamed_by))
        for body, headers, query in bodies:
            case = operation.Case(body=body, media_type="application/json", headers=headers,
                                  path_parameters=path, query=query)
            answer = case.call_and_validate(checks=CHECKS, timeout=120)
            sent += 1
            if operation.label in NEEDS_STATE:
                assert 400 <= answer.status_code < 500, operation.label
                continue
            assert answer.status_code == 200, (operation.label, body, answer.text[:500])
            media = answer.headers.get("content-type", [""])[0].split(";")[0]
            if body is not example:
                assert media == next(iter(STREAMS & set(answers))), operation.label
            elif answers:  # (an answer with no body has no media type)
                assert media == "application/json", operation.label
    assert sent >= 40


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                         ids=lambda mode: mode.value)
def test_every_answer_is_documented_and_no_5xx(schema, mode: GenerationMode) -> None:
    failures: dict[str, str] = {}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 40
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def exchange(case) -> None:
            case.call_and_validate(checks=CHECKS, timeout=120)

        try:
            exchange()
        except Unsatisfiable:  # nothing to make invalid: no body, and any path is a string
            assert mode is GenerationMode.NEGATIVE
            assert "requestBody" not in operation.definition.raw, operation.label
        except Exception as exc:  # each operation's first failure, all reported at once
            failures[operation.label] = str(exc)[:2000]
    assert not failures, "\n\n".join(f"{label}:\n{why}" for label, why in failures.items())

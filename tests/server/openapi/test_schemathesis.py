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
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.live_server import ServerThread

ANY_NAME = ModelSpec(id="fake-model", locate=lambda: Path("/dev/null"), aliases=("*",))
EXAMPLES = 6  # per operation and mode: some 45 operations in a minute or two when busy
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    models = ServedModels([ServedModel(ANY_NAME, FakeEngine(), 1700000000)])
    data = tmp_path_factory.mktemp("data")
    with ServerThread(create_app(models, ServerSettings(data_dir=data))) as server:
        yield server.base_url


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                         ids=lambda mode: mode.value)
def test_every_answer_is_documented_and_no_5xx(base_url: str, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
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
            assert mode is GenerationMode.NEGATIVE and operation.body.is_empty
        except Exception as exc:  # each operation's first failure, all reported at once
            failures[operation.label] = str(exc)[:2000]
    assert not failures, "\n\n".join(f"{label}:\n{why}" for label, why in failures.items())

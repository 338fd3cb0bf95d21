"""An app serving the scripted fake engine as `fake-model` (alias `fake-alias`): what the
protocol tests drive over ASGI."""

from __future__ import annotations

from pathlib import Path

from parlance.engines.fake import FakeEngine
from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app

FAKE_SPEC = ModelSpec(id="fake-model", locate=lambda: Path("/dev/null"), aliases=("fake-alias",))


def make_app(engine: FakeEngine, **settings: object):
    models = ServedModels([ServedModel(FAKE_SPEC, engine, 1700000000)])
    return create_app(models, ServerSettings(**settings))  # type: ignore[arg-type]

"""The web chat page's tests' server: a real loopback server in a thread on the fake
engine, with a cold model (`COLD`) whose load a `GatedLoader` holds."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from parlance.engines.fake import FakeEngine
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.fake_app import FAKE_SPEC
from tests.support.live_server import ServerThread
from tests.support.scripted_models import COLD, GatedLoader


@contextmanager
def serving(engine: FakeEngine, loader: GatedLoader | None = None,
            **settings: object) -> Iterator[ServerThread]:
    models = ServedModels([ServedModel(FAKE_SPEC, engine, 1700000000)],
                          catalog=lambda: [COLD], loader=loader or GatedLoader(FakeEngine))
    app = create_app(models, ServerSettings(bind_host="127.0.0.1", **settings))  # type: ignore[arg-type]
    with ServerThread(app) as server:
        yield server

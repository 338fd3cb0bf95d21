"""An app whose one cold model loads half way and holds there until the test opens the
gate: every stop a test makes (the drain, the deadline, a client leaving) lands while
the load is under way, and the load is seen to go on afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from parlance.engines.fake import FakeEngine
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.asgi_exchange import until
from tests.support.fake_app import FAKE_SPEC
from tests.support.scripted_models import COLD, GatedLoader


class Held:
    """An app whose cold model's load holds half way until `loader.gate` is set."""

    def __init__(self, **settings: float) -> None:
        self.loader = GatedLoader(FakeEngine)
        warm = ServedModel(FAKE_SPEC, FakeEngine(), 1700000000)
        self.models = ServedModels([warm], catalog=lambda: [COLD], loader=self.loader)
        self.app = create_app(self.models, ServerSettings(**settings))  # type: ignore[arg-type]

    async def halfway(self) -> None:
        await until(self.loader.halfway.is_set, "the load half way")

    async def loaded_after_all(self) -> None:
        """The gate opens: the load the request left goes on, and its model stays."""
        self.loader.gate.set()
        await until(lambda: self.models.is_loaded(COLD.id), "the model loaded")


@contextlib.contextmanager
def held(**settings: float) -> Iterator[Held]:
    app = Held(**settings)
    try:
        yield app
    finally:  # a failed test never leaves the loading thread waiting
        app.loader.gate.set()

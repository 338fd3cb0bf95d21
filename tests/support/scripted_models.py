"""A model table whose cold model loads through a scripted loader (fake engines,
with llama.cpp-like progress), for the server tests of model lifetimes; a loader held
half way (`GatedLoader`) for a test that must see a load in progress; a fake engine's
gate a test thread opens (`ThreadGate`) while the server runs in a thread of its own."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any, Literal

from parlance.engines.fake import FakeEngine
from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.fake_app import FAKE_SPEC
from tests.support.real_engine import PATIENCE


class ScriptedLoader:
    """Makes fake engines, reporting progress as llama.cpp does, slowly enough that
    concurrent requests overlap with the load."""

    def __init__(self, fail: bool = False) -> None:
        self.loaded: list[str] = []
        self.fail = fail

    def __call__(self, spec, options, on_progress):
        for step in range(11):
            time.sleep(0.01)
            if on_progress is not None:
                on_progress(step / 10)
        if self.fail:
            raise RuntimeError("the file is corrupt")
        self.loaded.append(spec.id)
        return FakeEngine(context_length=options.context_length or 2048)


class GatedLoader:
    """A model loader (fake engines) that reports progress as llama.cpp does and holds at
    half way until the test opens its gate, so the page's progress bar can be seen."""

    def __init__(self, engine_factory: Any) -> None:
        self.gate = threading.Event()
        self.halfway = threading.Event()
        self.engine_factory = engine_factory

    def __call__(self, spec: Any, options: Any, on_progress: Any) -> Any:
        self.report(on_progress)
        return self.engine_factory()

    def report(self, on_progress: Any) -> None:
        """The load's progress in tenths, held half way while the gate is closed."""
        for step in range(11):
            if step == 5:
                self.halfway.set()
                assert self.gate.wait(PATIENCE), "the test never let the load finish"
            if on_progress is not None:
                on_progress(step / 10)


def smollm2_path() -> Path:
    from parlance.models.registry import BUILTIN

    return BUILTIN[0].locate()


COLD = ModelSpec(id="acme/cold-model", locate=smollm2_path)


def make(loader: ScriptedLoader, **kwargs) -> tuple[ServedModels, object]:
    warm = ServedModel(FAKE_SPEC, FakeEngine(), 1700000000)
    models = ServedModels([warm], catalog=lambda: [COLD], loader=loader, **kwargs)
    return models, create_app(models, ServerSettings())


COLD_NAME = COLD.id


async def unloaded(models: ServedModels, name: str) -> None:
    """Wait until `name` is no longer loaded (bounded so that a broken test ends)."""
    deadline = time.monotonic() + PATIENCE
    while models.is_loaded(name):
        assert time.monotonic() < deadline, f"{name} is still loaded"
        await asyncio.sleep(0.01)


class ThreadGate(asyncio.Event):
    """A fake engine's script gate (an `asyncio.Event`) for a server in a thread of its
    own (`ServerThread`): `open()`, from the test's thread, waits until the script has
    reached the gate, then opens it in the server's event loop."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = threading.Event()
        self._server_loop: asyncio.AbstractEventLoop | None = None

    async def wait(self) -> Literal[True]:
        self._server_loop = asyncio.get_running_loop()
        self.reached.set()
        return await super().wait()

    def open(self) -> None:
        assert self.reached.wait(PATIENCE), "the script never reached the gate"
        assert self._server_loop is not None
        self._server_loop.call_soon_threadsafe(self.set)

"""What the CLI's client commands are tested against: a real uvicorn server (in a thread)
over the fake engine, serving `fake-model` loaded and `acme/cold-model` loadable on
demand (a fake engine too, its file a tiny GGUF), downloads allowed from loopback; and
`parlance` itself in a pseudo-terminal (pexpect)."""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parlance.engines.fake import FakeEngine
from parlance.models.catalog import catalog
from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.gguf_writer import BASE_KV, TENSORS, write_gguf
from tests.support.live_server import STARTUP, ServerThread
from tests.support.scripted_models import GatedLoader

ROOT = Path(__file__).resolve().parents[2]


class Loader(GatedLoader):
    """Loads every model as a fresh fake engine of the planned context, reporting its
    progress in tenths (as llama.cpp reports its tensors), and remembers which. Its
    gate is open; a test that must see a load under way clears it: each load then
    holds half way (`halfway` is set) until the test sets it again."""

    def __init__(self) -> None:
        super().__init__(FakeEngine)
        self.gate.set()
        self.loaded: list[str] = []

    def __call__(self, spec, plan, on_progress):
        self.report(on_progress)
        self.loaded.append(spec.id)
        return FakeEngine(context_length=plan.context_length)


@dataclass
class FakeServer:
    thread: ServerThread
    engine: FakeEngine  # fake-model's
    loader: Loader
    models: ServedModels
    models_dir: Path

    @property
    def url(self) -> str:
        return self.thread.base_url


@contextlib.contextmanager
def fake_server(tmp_path: Path, **settings: Any) -> Iterator[FakeServer]:
    file = tmp_path / "specs" / "tiny.gguf"
    file.parent.mkdir(parents=True, exist_ok=True)
    write_gguf(file, BASE_KV, TENSORS)
    warm = ModelSpec(id="fake-model", locate=lambda: file, aliases=("fake-alias",))
    cold = ModelSpec(id="acme/cold-model", locate=lambda: file)
    models_dir = tmp_path / "models"
    models_dir.mkdir(exist_ok=True)
    engine, loader = FakeEngine(), Loader()
    models = ServedModels([ServedModel(warm, engine, 1700000000, size_bytes=123_456)],
                          catalog=catalog({cold.id: cold}, models_dir), loader=loader,
                          idle_ttl=600.0)
    app = create_app(models, ServerSettings(**{  # type: ignore[arg-type]
        "models_dir": models_dir, "data_dir": tmp_path / "data",
        "download_allow_hosts": ("127.0.0.1",), **settings}))
    with ServerThread(app) as thread:
        yield FakeServer(thread, engine, loader, models, models_dir)


def spawn(tmp_path: Path, *args: str, **env: str):
    """`parlance ARGS` in a pseudo-terminal of 40 × 120 (this checkout's code, its data
    dir in `tmp_path`)."""
    import pexpect

    environ = {k: v for k, v in os.environ.items()  # (the test's settings, not the shell's)
               if k not in ("PARLANCE_URL", "PARLANCE_API_KEY", "PARLANCE_DATA_DIR")}
    environ.update({"PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
                    "XDG_DATA_HOME": str(tmp_path / "xdg"), "TERM": "xterm-256color",
                    "COLUMNS": "120", "LINES": "40", **env})
    return pexpect.spawn(sys.executable, ["-m", "parlance", *args], env=environ,
                         encoding="utf-8", timeout=STARTUP, dimensions=(40, 120),
                         preexec_fn=_hear_ctrl_c)


def _hear_ctrl_c() -> None:
    """A suite started as a background job (`cmd &` in a script) inherits SIGINT
    ignored, and so would the program: its Ctrl-C tests would wait for nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# the select/poll family's syscall numbers, by machine
_WAITING_FOR_INPUT = {"x86_64": {"7", "23", "270", "271"},  # poll, select, pselect6, ppoll
                      "aarch64": {"72", "73"}}.get(platform.machine(), set())  # pselect6, ppoll


def interrupt_at_prompt(child, timeout: float = STARTUP) -> None:
    """Ctrl-C to a program waiting at its readline prompt, sent once it sleeps in
    `select` with nothing to read. CPython's readline only looks at signals when that
    `select` is interrupted: a Ctrl-C that lands while it is still drawing the prompt
    (or handling a key) is held until the next Enter, and the test would wait for a
    prompt that never comes. (Where /proc or the machine cannot tell, it is sent at
    once.)"""
    deadline = time.monotonic() + timeout
    while _WAITING_FOR_INPUT and time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            call = Path(f"/proc/{child.pid}/syscall").read_text().split()[0]
        except (OSError, IndexError):
            break
        if state == "S" and call in _WAITING_FOR_INPUT:
            break
        time.sleep(0.01)
    child.sendintr()


def conversation(engine: FakeEngine, which: int = -1) -> list[tuple[str, str]]:
    """(role, content) of each message a generation request of `engine` carried."""
    prompt = engine.requests[which].prompts[0]
    return [(str(m.role), m.content) for m in prompt.messages]  # type: ignore[union-attr]

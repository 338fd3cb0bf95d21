"""Running a server under test: a free port, start, wait until it answers, stop.

Shared by every bench script, whichever server (Parlance or a peer) it drives.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
from peers import PeerUnavailable

STARTUP_SECONDS = 300


def stop_servers_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that `with Server(...)` blocks still stop
    their servers when the bench itself is terminated."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    """`with Server(...)`: started and answering inside, stopped (SIGINT, then kill) after."""

    name: str
    command: list[str]
    port: int
    env: dict[str, str] | None = None  # the whole environment, when not inherited
    proc: subprocess.Popen | None = None
    log: IO[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Server:
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{self.name}-", suffix=".log")
        self.proc = subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=self.env)
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = Path(self.log.name).read_text(errors="replace")[-800:]
                self.__exit__()
                raise PeerUnavailable(f"{self.name} exited with {self.proc.returncode}: {tail}")
            if self._answers("/health") or self._answers("/v1/models"):  # stock: no /health
                return self
            time.sleep(0.3)
        self.__exit__()
        raise PeerUnavailable(f"{self.name} did not come up within {STARTUP_SECONDS} s")

    def _answers(self, path: str) -> bool:
        try:
            return httpx.get(self.base + path, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def __exit__(self, *exc: object) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.log:
            self.log.close()
            self.log = None

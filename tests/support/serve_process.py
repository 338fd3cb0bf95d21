"""`parlance serve` as a child process on a free loopback port, for tests that need
a real server (real clients, signals): started, waited for on /health, stopped."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

STARTUP_SECONDS = 300  # loading the model on a busy 2-core machine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServeProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def serve(tmp: Path, *args: str, port: int | None = None) -> Iterator[ServeProcess]:
    """A server with its data dir in `tmp`; extra `args` go to `parlance serve`. `port`:
    where it listens (a server started again where it was); a free one by default."""
    port = port or free_port()
    log = tmp / "server.log"
    command = [sys.executable, "-m", "parlance", "serve", "--port", str(port),
               "--data-dir", str(tmp / "data"), *args]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    server = ServeProcess(proc, port, log)
    try:
        _wait_until_healthy(server)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_until_healthy(server: ServeProcess) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"parlance serve exited: {server.output()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.base_url}/health", timeout=5).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"parlance serve did not answer /health: {server.output()[-2000:]}")

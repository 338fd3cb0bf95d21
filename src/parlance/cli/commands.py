"""What each subcommand runs, given its parsed arguments: `serve`, `models` (this machine's
registry, or with --url a running server's) and the client commands of
`parlance.console` (`chat` starts a server in this process when given no --url)."""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console

from parlance.cli.wiring import Registry, build_app, connection_limits, console
from parlance.config import ServeConfig, default_data_dir, env_name, resolve_config
from parlance.console import entry as console_entry
from parlance.core.errors import Unavailable


def run_serve(args: argparse.Namespace) -> int:
    return serve(*resolved(args))


def run_models(args: argparse.Namespace) -> int:
    if console_entry.wants_server(args):  # --url: a running server's models
        return run_client(args)
    _, registry = resolved(args)
    return list_models(registry)


def run_client(args: argparse.Namespace) -> int:
    """A command that talks to a server: the one at --url, or for `chat` without one, a
    server of this process."""
    data_dir = os.environ.get(env_name("data_dir")) or default_data_dir()
    return console_entry.run(args, lambda: local_server(*resolved(args)),
                             history=Path(data_dir) / "chat_history")


def resolved(args: argparse.Namespace) -> tuple[ServeConfig, Registry]:
    """The settings from the flags, the environment and the config file; the registry
    with the file's presets."""
    from_env = os.environ.get(env_name("config"))
    config_path = args.config or (Path(from_env) if from_env else None)
    return resolve_config(vars(args), os.environ, config_path)


def list_models(registry: Registry) -> int:
    """This machine's registry in the table `models --url` prints (the facts of each
    file here, read from its header)."""
    from parlance.console.model_table import ModelRow, model_table
    from parlance.models.facts import facts_of

    rows = []
    for spec in registry.values():
        facts = facts_of(spec)
        file = facts.file
        rows.append(ModelRow(spec.id, facts.size_bytes or None,
                             (file.context_length if file else None) or spec.ctx_size,
                             (file.quantization if file else None) or ""))
    Console().print(model_table(rows))
    return 0


def serve(config: ServeConfig, registry: Registry) -> int:
    """Bind first (a port in use fails before a model loads), then build the app, and
    say where it serves once it accepts connections."""
    from parlance.server.runner import Listen, bind, run

    listen = Listen(config.host, config.port, connection_limits(config))
    sock = bind(listen)
    try:
        app = build_app(config, registry)
        port = sock.getsockname()[1]
        run(app, listen, sock, on_started=lambda: console.print(
            started_lines(config.host, port, Path(config.models_dir)), markup=False,
            highlight=False, soft_wrap=True))
    finally:
        sock.close()
    return 0


def started_lines(host: str, port: int, models_dir: Path) -> str:
    """What `serve` says once it accepts connections: the web chat, the API docs, each
    API's base URL (a wildcard address shown as this machine's loopback one)."""
    shown = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    base = f"http://{f'[{shown}]' if ':' in shown else shown}:{port}"
    where = " (every interface)" if shown != host else ""
    return "\n".join([
        f"Serving on {base}{where}",
        f"  Web chat   {base}/",
        f"  API docs   {base}/docs",
        f"  Base URLs  OpenAI {base}/v1 · Anthropic {base} · Ollama {base} · "
        f"LM Studio {base}/api/v1",
        f"  Models     loaded on first use from {models_dir}"])


@contextlib.contextmanager
def local_server(config: ServeConfig, registry: Registry) -> Iterator[str]:
    """`parlance chat` without --url: the server `serve` would run, on a free loopback
    port in a thread of this process, logging warnings only (the terminal is the
    chat's); yields its URL, and drains it on the way out."""
    from parlance.server.runner import Listen, log_config, server

    app = build_app(config, registry)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    running = server(app, Listen("127.0.0.1", port, connection_limits(config)),
                     log_config=log_config("WARNING"))
    thread = threading.Thread(target=running.run, kwargs={"sockets": [sock]},
                              name="parlance-server", daemon=True)
    try:
        thread.start()
        while not running.started:
            if not thread.is_alive():
                raise Unavailable("the in-process server did not start")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        running.should_exit = True
        if thread.is_alive():
            thread.join()
        sock.close()

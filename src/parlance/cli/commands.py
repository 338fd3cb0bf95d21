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
from rich.table import Table

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
    table = Table("id", "aliases", "context", "sampling defaults")
    for spec in registry.values():
        table.add_row(spec.id, ", ".join(spec.aliases), str(spec.ctx_size or ""),
                      ", ".join(f"{k}={v}" for k, v in spec.sampling.items()))
    Console().print(table)
    return 0


def serve(config: ServeConfig, registry: Registry) -> int:
    from parlance.server.runner import Listen, run

    app = build_app(config, registry)
    console.print(f"Serving on [bold]http://{config.host}:{config.port}[/] "
                  f"(OpenAI base URL http://{config.host}:{config.port}/v1, LM Studio API "
                  f"/api/v1; more models from {config.models_dir})")
    run(app, Listen(config.host, config.port, connection_limits(config)))
    return 0


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

"""`parlance`: the table of subcommands. Each subcommand's parser names the function that
runs it (`set_defaults(run=...)`), and `main` runs the one the parsed command names; a
command added without one is refused, never taken for another."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.markup import escape

from parlance import __version__
from parlance.cli.commands import run_client, run_models, run_serve
from parlance.cli.serve_flags import add_serve_flags
from parlance.cli.wiring import console
from parlance.config import env_name
from parlance.console import entry as console_entry
from parlance.core.errors import EngineFailure, InvalidRequest, Unavailable

DESCRIPTION = ("`parlance serve` / `parlance models`: build settings, load the model, run "
               "uvicorn; and the commands that talk to a running server (`chat`, `ps`, "
               "`load`, `unload`, `pull`, `models --url`: `parlance.console`).")

Run = Callable[[argparse.Namespace], int]

# What a command may fail with that is the user's to fix: said in one line, exit 2.
_SAID = (InvalidRequest, Unavailable, EngineFailure, FileNotFoundError, ValueError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parlance", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"parlance {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a model over HTTP")
    add_serve_flags(serve)
    serve.set_defaults(run=run_serve)
    models = commands.add_parser("models", help="list the models you can serve (with --url: "
                                                "the models a running server has)")
    models.set_defaults(run=run_models)
    for sub in (serve, models):
        sub.add_argument("--config", type=Path, help="TOML file with [serve] and [presets.*]"
                         f" [env {env_name('config')}; default ./parlance.toml]")
    console_entry.add_server_flags(models, default_url=False, what="list the models of the "
                                   "server at this URL instead of this machine's registry")
    models.set_defaults(ask=console_entry.ask_models)  # (with --url)
    console_entry.add_commands(commands)
    for name in console_entry.CLIENT_COMMANDS:
        commands.choices[name].set_defaults(run=run_client)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Run | None = getattr(args, "run", None)
    if run is None:
        parser.error(f"the command {args.command!r} has nothing to run it")
    try:
        return run(args)
    except _SAID as exc:
        console.print(f"[red]error:[/] {escape(str(getattr(exc, 'message', exc)))}",
                      soft_wrap=True, highlight=False)  # (one line, as it was said)
        return 2

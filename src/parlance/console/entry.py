"""The client commands' flags and how each runs: what `parlance` adds for `chat`, `ps`,
`load`, `unload`, `pull` and `models --url`. Each command's parser names the request it
makes (`set_defaults(ask=...)`): adding a client command is its parser and its function
in `commands.py`."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from parlance.console import commands
from parlance.console.chat import ChatSession, line_history
from parlance.console.client import (
    DEFAULT_URL,
    KEY_ENV,
    URL_ENV,
    Server,
    ServerError,
    api_key,
    server_url,
)
from parlance.console.terminal import TerminalConsole

# Commands that talk to a running server (`chat` starts one in process without --url).
CLIENT_COMMANDS = ("chat", "ps", "load", "unload", "pull")

# `chat` without --url: a context in which a server of this process answers at the
# URL it yields.
LocalServer = Callable[[], AbstractContextManager[str]]
# What a command asks of the server: its arguments, the server, the output and the
# error console; the exit status.
Ask = Callable[[argparse.Namespace, Server, Console, Console], int]


def _ps(args: argparse.Namespace, server: Server, out: Console, err: Console) -> int:
    return commands.ps(server, out)


def _load(args: argparse.Namespace, server: Server, out: Console, err: Console) -> int:
    return commands.load(server, args.model, args.context_length, err)


def _unload(args: argparse.Namespace, server: Server, out: Console, err: Console) -> int:
    return commands.unload(server, args.model, err)


def _pull(args: argparse.Namespace, server: Server, out: Console, err: Console) -> int:
    return commands.pull(server, args.name, err)


def ask_models(args: argparse.Namespace, server: Server, out: Console, err: Console) -> int:
    """`parlance models --url`: the models of a running server."""
    return commands.models(server, out)


def add_server_flags(parser: argparse.ArgumentParser, *, default_url: bool = True,
                     what: str = "the Parlance server to talk to") -> None:
    shown = f"default {DEFAULT_URL}; " if default_url else ""
    parser.add_argument("--url", help=f"{what} [{shown}env {URL_ENV}]")
    parser.add_argument("--api-key", dest="client_key", metavar="KEY",
                        help=f"the key that server requires, if any [env {KEY_ENV}]")


def add_commands(commands_: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chat = commands_.add_parser(
        "chat", help="chat with a model in the terminal",
        description="Chat with a model of a running server (--url), or of a server this "
                    "command starts on a free loopback port (the model --model names, "
                    "else the default one).")
    chat.add_argument("--model", help="the model to talk to (default: the server's)")
    chat.add_argument("--system", help="a system prompt to start with")
    chat.add_argument("--mcp", action="append", metavar="LABEL", default=[],
                      help="an MCP server of the server's mcp.json the model may use, run "
                           "by the server without asking (repeatable; /mcp in the chat)")
    chat.add_argument("--config", type=Path,
                      help="TOML file for the server started without --url")
    add_server_flags(chat, default_url=False)
    ps = commands_.add_parser("ps", help="list the models a server has loaded")
    add_server_flags(ps)
    ps.set_defaults(ask=_ps)
    load = commands_.add_parser("load", help="load a model into a running server")
    load.add_argument("model", help="a name the server knows (see `parlance models --url`)")
    load.add_argument("--context-length", dest="context_length", type=int,
                      help="its context in tokens (default: the server's)")
    add_server_flags(load)
    load.set_defaults(ask=_load)
    unload = commands_.add_parser("unload", help="unload a model from a running server")
    unload.add_argument("model", help="a loaded model (see `parlance ps`)")
    add_server_flags(unload)
    unload.set_defaults(ask=_unload)
    pull = commands_.add_parser("pull", help="download a model into a running server's "
                                             "models directory")
    pull.add_argument("name", metavar="URL_OR_NAME",
                      help="a direct http(s) link to a .gguf file (or a name it serves)")
    add_server_flags(pull)
    pull.set_defaults(ask=_pull)


def wants_server(args: argparse.Namespace) -> bool:
    """Whether the command talks to a server: a client command, or `models` given a URL."""
    return args.command in CLIENT_COMMANDS or (
        args.command == "models" and bool(args.url or os.environ.get(URL_ENV)))


def run(args: argparse.Namespace, local: LocalServer, history: Path | None) -> int:
    out = TerminalConsole(highlight=False)
    err = TerminalConsole(stderr=True, highlight=False)
    try:
        if args.command == "chat" and not (args.url or os.environ.get(URL_ENV)):
            with local() as url:
                return _chat(args, url, out, history)
        url = server_url(args.url)
        if args.command == "chat":
            return _chat(args, url, out, history)
        ask: Ask = args.ask
        with Server(url, api_key(args.client_key)) as server:
            return ask(args, server, out, err)
    except ServerError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        return 130


def _chat(args: argparse.Namespace, url: str, out: TerminalConsole, history: Path | None) -> int:
    with Server(url, api_key(args.client_key)) as server:
        server.get("/v1/models")  # no server, a wrong key: said before the first prompt
        with line_history(history):
            return ChatSession(server, out, args.model, args.system, args.mcp).run()

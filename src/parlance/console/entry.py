"""The client commands' flags and how each runs: what `parlance` adds for `chat`, `run`,
`ps`, `load`, `unload`, `pull`, `show`, `rm`, `cp` and `models --url`.

`chat` and `run` talk to the server at --url; without one, to the server at
`PARLANCE_URL` (default http://127.0.0.1:8080) when one answers there, else to a server
they start in this process. Given a prompt, or input that is not a terminal, they ask
once and write the answer (only its text when the output is not a terminal).

Each other command's parser names the request it makes (`set_defaults(ask=...)`):
adding a client command is its parser and its function in `commands.py`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import httpx2
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

# Commands that talk to a running server (`chat` and `run` start one in process when
# none answers).
CLIENT_COMMANDS = ("chat", "run", "ps", "load", "unload", "pull", "show", "rm", "cp")
PROBE = httpx2.Timeout(2.0)  # a server on this machine answers at once or not at all

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


def _show(args: argparse.Namespace, server: Server, out: Console, err: Console) -> int:
    return commands.show(server, args.model, out)


def _rm(args: argparse.Namespace, server: Server, out: Console, err: Console) -> int:
    return commands.rm(server, args.models, err)


def _cp(args: argparse.Namespace, server: Server, out: Console, err: Console) -> int:
    return commands.cp(server, args.source, args.destination, err)


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
        description="Chat with a model of the server at --url; without --url, of the "
                    f"server at {URL_ENV} (default {DEFAULT_URL}) when one answers "
                    "there, else of a server this command starts on a free loopback port "
                    "(the model --model names, else the default one). Input that is not "
                    "a terminal is one message: its answer is written and the command "
                    "ends.")
    chat.add_argument("--model", help="the model to talk to (default: the server's)")
    _conversation_flags(chat)
    run = commands_.add_parser(
        "run", help="ask a model once (or chat with it, given no prompt)",
        description="Ask MODEL the PROMPT (after the input, when the input is not a "
                    "terminal) and write its answer; only the answer's text when the "
                    "output is not a terminal. With no prompt and a terminal: chat. The "
                    "server is found as `chat` finds it.")
    run.add_argument("model", help="the model to ask")
    run.add_argument("prompt", nargs="*", help="the message (words joined by spaces)")
    _conversation_flags(run)
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
    pull.add_argument("name", metavar="NAME",
                      help="owner/repo[:QUANT] or hf.co/owner/repo[:QUANT] (a GGUF repository "
                           "of the server's catalog, Hugging Face by default), or a direct "
                           "http(s) link to a .gguf file")
    add_server_flags(pull)
    pull.set_defaults(ask=_pull)
    show = commands_.add_parser("show", help="what a server knows of a model")
    show.add_argument("model", help="a name the server knows")
    add_server_flags(show)
    show.set_defaults(ask=_show)
    rm = commands_.add_parser("rm", help="delete a model's file (or a name `cp` made) "
                                         "from a running server")
    rm.add_argument("models", nargs="+", metavar="model")
    add_server_flags(rm)
    rm.set_defaults(ask=_rm)
    cp = commands_.add_parser("cp", help="give a model of a running server one more name")
    cp.add_argument("source", help="a name the server knows")
    cp.add_argument("destination", help="the new name")
    add_server_flags(cp)
    cp.set_defaults(ask=_cp)


def _conversation_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--system", help="a system prompt to start with")
    parser.add_argument("--mcp", action="append", metavar="LABEL", default=[],
                        help="an MCP server of the server's mcp.json the model may use, "
                             "run by the server without asking (repeatable; /mcp in the "
                             "chat)")
    parser.add_argument("--config", type=Path,
                        help="TOML file for a server started in this process")
    add_server_flags(parser, what="the Parlance server to talk to (default: the one at "
                                  f"{URL_ENV} or {DEFAULT_URL} when it answers, else one "
                                  "started in this process)", default_url=False)


def wants_server(args: argparse.Namespace) -> bool:
    """Whether the command talks to a server: a client command, or `models` given a URL."""
    return args.command in CLIENT_COMMANDS or (
        args.command == "models" and bool(args.url or os.environ.get(URL_ENV)))


def run(args: argparse.Namespace, local: LocalServer, history: Path | None) -> int:
    out = TerminalConsole(highlight=False)
    err = TerminalConsole(stderr=True, highlight=False)
    try:
        if args.command in ("chat", "run"):
            return _conversation(args, local, out, err, history)
        ask: Ask = args.ask
        with Server(server_url(args.url), api_key(args.client_key)) as server:
            return ask(args, server, out, err)
    except ServerError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        return 130


def _conversation(args: argparse.Namespace, local: LocalServer, out: TerminalConsole,
                  err: TerminalConsole, history: Path | None) -> int:
    url = args.url or server_url(None)
    if args.url or answers(url):
        return _chat(args, url, out, err, history)
    err.print(f"No server answers at {url}: starting one in this process.", style="dim",
              markup=False)
    with local() as started:
        return _chat(args, started, out, err, history)


def answers(url: str) -> bool:
    """Whether any HTTP server answers at `url` (a wrong key is said once it is used)."""
    try:
        with httpx2.Client(timeout=PROBE) as client:
            client.get(f"{url.rstrip('/')}/v1/models")
    except httpx2.TransportError:
        return False
    return True


def _chat(args: argparse.Namespace, url: str, out: TerminalConsole, err: Console,
          history: Path | None) -> int:
    with Server(url, api_key(args.client_key)) as server:
        session = ChatSession(server, out, args.model, args.system, args.mcp, errors=err)
        server.get("/v1/models")  # no server, a wrong key: said before the first prompt
        if args.model and (refused := session.pick_model(args.model)) is not None:
            raise ServerError(refused)
        prompt = " ".join(getattr(args, "prompt", []))
        if not sys.stdin.isatty():  # (as `ollama run` takes it: the input, then the prompt)
            given = sys.stdin.read().strip()
            prompt = "\n\n".join(part for part in (given, prompt) if part)
        if prompt or not sys.stdin.isatty():
            return session.once(prompt) if prompt else 0
        with line_history(history):
            return session.run()

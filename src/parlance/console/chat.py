"""`parlance chat`: a conversation in the terminal over the server's Responses API,
`store: false` (the client keeps the input items, so `/reset`, `/system` and `/model`
act at once and nothing depends on the server's store). The operator's MCP servers the
chat names (`--mcp`, `/mcp`) are the request's `mcp` tools, run by the server without
asking (`require_approval: never`), as the web page does; their calls and results are
drawn as the stream brings them, and kept in the conversation. Input is read with
readline (editing, and a history file when one is given). A line ending in `\\`
continues on the next line, and a block between two `\"\"\"` lines is one message.
Ctrl-C while an answer streams, or while its request is still being set up, closes the
connection (the server cancels the generation and frees its slot, or abandons the
request) and comes back to the prompt; Ctrl-C at the prompt clears the line; Ctrl-D or
`/exit` leaves."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from rich.console import Console
from rich.live import Live
from rich.markup import escape

from parlance.console import wire
from parlance.console.client import Server, ServerError
from parlance.console.render import Answer, stream_error
from parlance.console.slash import Chat, run_command
from parlance.console.terminal import clean

PROMPT = ">>> "
MORE = "... "
FENCE = '"""'
REDRAW = 10  # redraws of a streaming answer per second

ReadLine = Callable[[str], str]
Outcome = Literal["answered", "stopped", "failed"]


class ChatSession(Chat):
    """On a terminal each answer is drawn (live, then as Markdown, with its figures);
    elsewhere (`console` a pipe or a file) only the answer's text is written, as it
    comes, and errors go to `errors`."""

    def __init__(self, server: Server, console: Console, model: str | None = None,
                 system: str | None = None, mcp: list[str] | None = None,
                 errors: Console | None = None) -> None:
        self.server = server
        self.console = console
        self.errors = errors or console
        self.plain = not console.is_terminal
        self.model = model
        self.system = system
        self.mcp = list(mcp or [])  # labels of the operator's MCP servers
        self.mcp_tools: dict[str, list[str]] = {}  # each one's tools, as last listed
        self.items: list[dict[str, Any]] = []  # the conversation, as input items

    def request(self) -> dict[str, Any]:
        body: dict[str, Any] = {"input": self.items, "stream": True, "store": False}
        if self.model:
            body["model"] = self.model
        if self.system:
            body["instructions"] = self.system
        if self.mcp:
            body["tools"] = [{"type": "mcp", "server_label": label,
                              "require_approval": "never"} for label in self.mcp]
        return body

    def reset(self) -> None:
        self.items.clear()

    def ask(self, text: str, figures: bool = True) -> Outcome:
        """One turn: stream the answer into a live view until it ends or Ctrl-C, which
        may come at any point of it, also while the request is still being set up; then
        print it whole."""
        self.items.append({"role": "user", "content": text})
        plain = PlainText(self.console) if self.plain else None
        answer = Answer(on_text=plain.write if plain else None)
        stopped, started = False, time.perf_counter()
        failed: ServerError | None = None
        # Live redraws the answer's end from a thread of its own, REDRAW times a second
        # (not once per token), and erases it when the answer has ended
        live = Live(answer.live, console=self.console, refresh_per_second=REDRAW,
                    transient=True)
        try:
            try:
                if plain is None:
                    with interrupts_held():
                        live.start(refresh=True)
                with self.server.events("/v1/responses", self.request()) as events:
                    for event in events:
                        answer.feed(event)
                        if (said := stream_error(event)) is not None:  # (its end)
                            raise ServerError(said)
            finally:
                with interrupts_held():
                    live.stop()
        except KeyboardInterrupt:
            stopped = True  # leaving the `with` closed the stream: the server stops
        except ServerError as exc:  # no answer (or a broken one): the turn is not kept
            failed = exc
        # the answer has ended: a Ctrl-C now has nothing to stop (and must not leave
        # the turn half kept, nor end the program)
        with contextlib.suppress(KeyboardInterrupt), interrupts_held():
            if failed is not None:
                self.items.pop()
            else:
                if answer.model and not self.model:
                    self.model = answer.model
                self.mcp_tools.update(answer.tools)
                if kept := answer.kept():
                    self.items.extend(kept)
                else:
                    self.items.pop()
        if plain is not None:
            plain.end()
        else:
            self._print(answer)
        with contextlib.suppress(KeyboardInterrupt), interrupts_held():
            if failed is not None:
                self.errors.print(f"[red]error:[/] {escape(str(failed))}", soft_wrap=True)
            elif figures and plain is None:
                self.console.print(answer.figures(time.perf_counter() - started, stopped))
        return "failed" if failed is not None else "stopped" if stopped else "answered"

    def once(self, text: str) -> int:
        """One question, its answer, and the exit status (`parlance run`, piped input)."""
        try:
            outcome = self.ask(text, figures=False)
        except KeyboardInterrupt:
            return 130
        return {"answered": 0, "failed": 1, "stopped": 130}[outcome]

    def pick_model(self, name: str) -> str | None:
        """Talk to `name` from now on, if the server has it; else why not (and which
        it has)."""
        try:
            self.server.get(f"/v1/models/{quote(name, safe='/:')}")
        except ServerError as exc:
            try:
                known = model_ids(self.server.get("/v1/models"))
            except ServerError:
                return str(exc)
            if name not in known:
                listed = ", ".join(known) or "none"
                return f"the server has no model {name!r}; it has: {listed}"
        self.model = name
        return None

    def _print(self, answer: Answer) -> None:
        """The answer as it ended; Ctrl-C cuts a long one short (the turn is kept)."""
        try:
            self.console.print(answer)
        except KeyboardInterrupt:
            with contextlib.suppress(KeyboardInterrupt), interrupts_held():
                self.console.print("\n(the rest of this answer not shown)", style="dim")

    def run(self, read: ReadLine = input) -> int:
        if not self.plain:
            self.console.print(f"Chatting with {self.model or 'the default model'} at "
                               f"{self.server.url}. /help for commands, Ctrl-D to leave.",
                               style="dim", markup=False)
        while True:
            try:
                text = read_message(read)
            except KeyboardInterrupt:
                self.console.print()
                continue
            except EOFError:
                self.console.print()
                return 0
            if not text.strip():
                continue
            if text.startswith("/"):
                if run_command(self, text) == "exit":
                    return 0
                continue
            self.ask(text)


class PlainText:
    """An answer's text written as it comes (nothing else of it, no control
    characters), ending with a line end."""

    def __init__(self, console: Console) -> None:
        self.file = console.file
        self.last = "\n"

    def write(self, text: str) -> None:
        if text := clean(text):
            self.file.write(text)
            self.file.flush()
            self.last = text[-1]

    def end(self) -> None:
        if self.last != "\n":
            self.write("\n")


def model_ids(listing: dict[str, Any]) -> list[str]:
    """The ids of an OpenAI model list."""
    return [wire.text(entry, "id", "model of GET /v1/models")
            for entry in wire.objects(listing, "data", "answer to GET /v1/models")]


def read_message(read: ReadLine) -> str:
    """One message: a line, lines continued with a trailing backslash, or a block
    between `\"\"\"` lines."""
    line = read(PROMPT)
    if line.strip().startswith(FENCE):
        return _fenced(line.strip()[len(FENCE):], read)
    lines = []
    while line.endswith("\\"):
        lines.append(line[:-1])
        line = read(MORE)
    lines.append(line)
    return "\n".join(lines)


def _fenced(first: str, read: ReadLine) -> str:
    lines = [first] if first else []
    while True:
        if lines and lines[-1].rstrip().endswith(FENCE):
            lines[-1] = lines[-1].rstrip()[:-len(FENCE)]
            return "\n".join(lines).strip("\n")
        lines.append(read(MORE))


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Ctrl-C inside the block is raised at its end. Rich's live view starts and stops
    in steps (the console's live stack, its render hook, stdout redirected, a redraw
    thread), and one interrupted between them is never undone: the console then takes
    every later view for a nested one, which draws nothing until its answer has
    ended. (Signals are handled in the main thread only; elsewhere, nothing to hold.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None
                      else previous)
    if held:
        raise KeyboardInterrupt


@contextlib.contextmanager
def line_history(path: Path | None) -> Iterator[None]:
    """readline's history, kept in `path` between sessions (when readline exists)."""
    try:
        import readline
    except ImportError:  # (Windows without pyreadline)
        yield
        return
    if path is not None:
        with contextlib.suppress(OSError):
            readline.read_history_file(path)
    readline.set_history_length(1000)
    try:
        yield
    finally:
        if path is not None:
            with contextlib.suppress(OSError):
                path.parent.mkdir(parents=True, exist_ok=True)
                readline.write_history_file(path)

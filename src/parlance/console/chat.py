"""`parlance chat`: a conversation in the terminal over the server's Chat Completions
API (the client keeps the messages, so `/reset`, `/system` and `/model` act at once and
nothing depends on the server's store). Input is read with readline (editing, and a
history file when one is given). A line ending in `\\` continues on the next line, and
a block between two `\"\"\"` lines is one message. Ctrl-C while an answer streams closes
the stream (the server cancels the generation and frees its slot) and comes back to the
prompt; Ctrl-C at the prompt clears the line; Ctrl-D or `/exit` leaves."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape

from parlance.console.client import Server, ServerError, error_message
from parlance.console.render import Answer
from parlance.console.slash import Chat, run_command

PROMPT = ">>> "
MORE = "... "
FENCE = '"""'
REDRAW = 10  # redraws of a streaming answer per second

ReadLine = Callable[[str], str]


class ChatSession(Chat):
    def __init__(self, server: Server, console: Console, model: str | None = None,
                 system: str | None = None) -> None:
        self.server = server
        self.console = console
        self.model = model
        self.system = system
        self.messages: list[dict[str, Any]] = []

    def request(self) -> dict[str, Any]:
        messages = ([{"role": "system", "content": self.system}] if self.system else [])
        body: dict[str, Any] = {"messages": messages + self.messages, "stream": True,
                                "stream_options": {"include_usage": True}}
        if self.model:
            body["model"] = self.model
        return body

    def reset(self) -> None:
        self.messages.clear()

    def ask(self, text: str) -> None:
        """One turn: stream the answer into a live view until it ends or Ctrl-C."""
        self.messages.append({"role": "user", "content": text})
        answer, stopped, started = Answer(), False, time.perf_counter()
        try:
            # Live redraws from a thread of its own, REDRAW times a second (the Markdown
            # is rendered whole each time: not once per token), and once more at the end
            with (Live(answer, console=self.console, refresh_per_second=REDRAW,
                       vertical_overflow="visible"),
                  self.server.events("/v1/chat/completions", self.request()) as chunks):
                for chunk in chunks:
                    if (failed := error_message(chunk)) is not None:  # (the stream's end)
                        raise ServerError(failed)
                    answer.feed(chunk)
        except KeyboardInterrupt:
            stopped = True  # leaving the `with` closed the stream: the server stops
        except ServerError as exc:
            self.messages.pop()  # no answer (or a broken one): the turn is not kept
            self.console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
            return
        if answer.model and not self.model:
            self.model = answer.model
        if (reply := answer.message()) is not None:
            self.messages.append(reply)
        else:
            self.messages.pop()
        self.console.print(answer.figures(time.perf_counter() - started, stopped))

    def run(self, read: ReadLine = input) -> int:
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

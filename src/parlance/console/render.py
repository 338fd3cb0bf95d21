"""One answer as it streams: the Responses stream's output items in their order:
reasoning dim, text as Markdown (a code block is a code block before it closes), each
tool call with its arguments and, for one the server ran on an MCP server, its result or
error; then a dim line of figures. It also says what the conversation keeps of the
answer.

Drawing is bounded whatever the server sends: while the answer streams, the live view
draws only its end (the last `LIVE_CHARS` characters, at most a screenful of lines), so
a redraw costs the same at the first token and at the ten-millionth; once it has ended
the answer is printed whole, each block up to `SHOWN_TEXT` characters (the
conversation keeps all of it). Every field is read with its type checked
(`console.wire`): an event of the wrong shape ends the answer with an error."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markdown import Markdown
from rich.segment import Segment
from rich.text import Text

from parlance.console.client import error_message
from parlance.console.wire import an_object_field, objects, text
from parlance.console.wire import field as typed

SHOWN_OUTPUT = 2000  # characters of a tool's result shown (the model reads them all)
SHOWN_ARGUMENTS = 20_000  # characters of a call's arguments shown
SHOWN_NAME = 200  # characters of a tool's (or a server's) name shown
SHOWN_TEXT = 250_000  # characters of one block's text printed once the answer has ended
LIVE_CHARS = 8000  # characters of the answer's end the live view draws
CALLS = ("function_call", "mcp_call")
ENDED = ("response.completed", "response.incomplete", "response.failed")


def cut(value: str, limit: int) -> str:
    """`value`, or its first `limit` characters and how many more there are."""
    more = len(value) - limit
    return value if more <= 0 else f"{value[:limit]} … ({more} more characters)"


@dataclass
class ToolCall:
    name: str = ""
    arguments: str = ""
    server: str | None = None  # the MCP server that runs it; None: the client's own tool
    output: str | None = None
    error: str | None = None

    def shown(self, live: bool = False) -> Text:
        """The call as a line (and its outcome); `live`: its arguments' end only."""
        if live and len(self.arguments) > LIVE_CHARS:
            args = f"… {self.arguments[-LIVE_CHARS:]}"
        elif live or len(self.arguments) > SHOWN_ARGUMENTS:
            args = cut(self.arguments, SHOWN_ARGUMENTS)  # (not parsed while it streams)
        else:
            try:
                args = json.dumps(json.loads(self.arguments), ensure_ascii=False)
            except (ValueError, RecursionError):
                args = self.arguments  # not JSON
        shown = Text(f"⚙ {cut(self.name, SHOWN_NAME)}({args})", style="cyan")
        if self.server is not None:
            shown.append(f" on {cut(self.server, SHOWN_NAME)}", style="dim cyan")
        if self.error is not None:
            shown.append(f"\n  ✗ {cut(self.error, SHOWN_OUTPUT)}", style="red")
        elif self.output is not None:
            shown.append(f"\n  → {cut(self.output, SHOWN_OUTPUT)}", style="dim")
        return shown


@dataclass
class Block:
    """One output item: reasoning or message text, or a tool call."""

    kind: str
    text: str = ""
    call: ToolCall | None = None
    done: dict[str, Any] | None = None  # the finished item, as the server sent it

    def drawn(self, chars: int | None = None) -> RenderableType | None:
        """The block, or with `chars` its last that many characters (live)."""
        if self.call is not None:
            return self.call.shown(live=chars is not None)
        body = self.text if chars is None else _tail(self.text, chars)
        if self.kind == "reasoning":
            body = body.strip("\n")
            if not body.strip():
                return None
        if chars is None and len(body) > SHOWN_TEXT:
            more = Text(f"… ({len(body) - SHOWN_TEXT} more characters not shown; the "
                        "conversation keeps them)", style="dim")
            return Group(self._styled(body[:SHOWN_TEXT]), more)
        return self._styled(body) if body else None

    def _styled(self, body: str) -> RenderableType:
        return Text(body, style="dim italic") if self.kind == "reasoning" else Markdown(body)


@dataclass
class Answer:
    """What the Responses events of one answer said so far. Printed (`__rich__`): the
    whole answer; `live`: the view of its end while it streams."""

    blocks: dict[int, Block] = field(default_factory=dict)  # by output index
    model: str | None = None
    output_tokens: int | None = None
    ended: str | None = None  # why it ended other than by finishing its answer
    tools: dict[str, list[str]] = field(default_factory=dict)  # each MCP server's, listed
    on_text: Callable[[str], None] | None = None  # told each piece of the answer's text
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def feed(self, event: dict[str, Any]) -> None:
        """One event (a `Malformed` one raises `ServerError`, the answer unchanged by it
        but for what its earlier fields said)."""
        with self._lock:  # (drawn meanwhile by the live display's thread)
            self._feed(event)

    def _feed(self, event: dict[str, Any]) -> None:
        kind = text(event, "type", "event")
        where = f"{kind or 'event'} event"
        if kind in ("response.created", "response.in_progress"):
            response = an_object_field(event, "response", where)
            self.model = text(response, "model", where) or self.model
        elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            self._block(event, where, "reasoning").text += text(event, "delta", where)
        elif kind == "response.output_text.delta":
            delta = text(event, "delta", where)
            self._block(event, where, "message").text += delta
            if self.on_text is not None:
                self.on_text(delta)
        elif kind in ("response.function_call_arguments.delta",
                      "response.mcp_call_arguments.delta"):
            delta = text(event, "delta", where)
            if (call := self._call(event, where)) is not None:
                call.arguments += delta
        elif kind in ("response.output_item.added", "response.output_item.done"):
            self._item(event, where, an_object_field(event, "item", where),
                       done=kind.endswith(".done"))
        elif kind in ENDED:
            self._end(an_object_field(event, "response", where), where)

    def _index(self, event: dict[str, Any], where: str) -> int:
        index = typed(event, "output_index", int, where)
        return -1 if index is None else index

    def _block(self, event: dict[str, Any], where: str, kind: str) -> Block:
        return self.blocks.setdefault(self._index(event, where), Block(kind))

    def _call(self, event: dict[str, Any], where: str) -> ToolCall | None:
        block = self.blocks.get(self._index(event, where))
        return block.call if block is not None else None

    def _item(self, event: dict[str, Any], where: str, item: dict[str, Any], *,
              done: bool) -> None:
        kind = text(item, "type", where)
        if kind == "mcp_list_tools" and done:
            label = text(item, "server_label", where)
            self.tools[label] = [text(tool, "name", where)
                                 for tool in objects(item, "tools", where)]
        if kind not in CALLS:
            return
        name, server = text(item, "name", where), typed(item, "server_label", str, where)
        arguments = text(item, "arguments", where)
        output, error = typed(item, "output", str, where), item.get("error")
        block = self._block(event, where, kind)
        call = block.call = block.call or ToolCall(name)
        call.server = server
        if done or arguments:
            call.arguments = arguments
        if done:
            block.done = item
            call.output = output
            if error is not None:
                call.error = _error_text(error)

    def _end(self, response: dict[str, Any], where: str) -> None:
        self.model = text(response, "model", where) or self.model
        usage = an_object_field(response, "usage", where)
        self.output_tokens = typed(usage, "output_tokens", int, where) or self.output_tokens
        details = an_object_field(response, "incomplete_details", where)
        if reason := text(details, "reason", where):
            self.ended = reason
        elif any(b.kind == "function_call" for b in self.blocks.values()):
            self.ended = "function_call"  # the model asked for a tool the terminal has not

    def kept(self) -> list[dict[str, Any]]:
        """The input items the conversation keeps of this answer, in order: its text,
        and the MCP calls that ran with their results (the model reads them next time).
        A call to a client tool stays on the screen only: the terminal runs none, so it
        has no result to follow it. Empty when it said nothing."""
        out: list[dict[str, Any]] = []
        for _, block in sorted(self.blocks.items()):
            if block.kind == "message" and block.text:
                out.append({"role": "assistant", "content": block.text})
            elif block.kind == "mcp_call" and block.done is not None:
                out.append(block.done)
        return out

    def __rich__(self) -> RenderableType:
        with self._lock:
            return Group(*(drawn for _, block in sorted(self.blocks.items())
                           if (drawn := block.drawn()) is not None))

    @property
    def live(self) -> LiveView:
        return LiveView(self)

    def _end_drawn(self) -> RenderableType:
        """The blocks the last `LIVE_CHARS` characters of the answer are in, each cut
        to its part of them."""
        with self._lock:
            parts: list[RenderableType] = []
            budget = LIVE_CHARS
            for _, block in sorted(self.blocks.items(), reverse=True):
                if budget <= 0:
                    break
                if (drawn := block.drawn(budget)) is not None:
                    parts.append(drawn)
                budget -= len(block.text) + len(block.call.arguments if block.call else "")
            return Group(*reversed(parts))

    def figures(self, seconds: float, stopped: bool) -> Text:
        """The dim line after the answer: tokens, speed, and why it ended."""
        shown = []
        if self.output_tokens is not None:
            shown.append(f"{self.output_tokens} tokens")
            if seconds > 0:
                shown.append(f"{self.output_tokens / seconds:.1f} tokens/s")
        shown.append(f"{seconds:.1f} s")
        if stopped:
            shown.append("stopped")
        elif self.ended:
            shown.append(f"ended: {cut(self.ended, SHOWN_NAME)}")
        return Text(" · ".join(shown), style="dim")


class LiveView:
    """The end of an answer as it streams: the lines of its last `LIVE_CHARS`
    characters that fit the screen (less one line, so the view never scrolls: a view
    taller than the screen cannot be redrawn in place)."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        height = max(1, (options.height or console.height) - 1)
        lines = console.render_lines(self.answer._end_drawn(), options.update(height=None),
                                     pad=False)
        for number, line in enumerate(lines[-height:]):
            if number:
                yield Segment.line()
            yield from line


def _tail(value: str, chars: int) -> str:
    """The last `chars` characters of `value`, from a line's start where one is near
    (Markdown read from the middle of a line would draw that line's end wrongly)."""
    if len(value) <= chars:
        return value
    tail = value[-chars:]
    start = tail.find("\n")
    return tail[start + 1:] if 0 <= start < chars // 2 else tail


def stream_error(event: dict[str, Any]) -> str | None:
    """Why the stream failed, when this event says it did: `response.failed` (its
    response's error), an `error` event, or any of the server's error envelopes."""
    if event.get("type") == "response.failed":
        response = an_object_field(event, "response", "response.failed event")
        error = response.get("error")
        message = error_message({"error": error}) if error is not None else None
        return message or "the response failed"
    if event.get("type") == "error" and isinstance(event.get("message"), str):
        return str(event["message"])
    return error_message(event)


def _error_text(error: Any) -> str:
    """An MCP call's error: its message, or the text its tool reported."""
    if isinstance(error, dict):
        if isinstance(error.get("message"), str):
            return str(error["message"])
        content = error.get("content")
        texts = [str(part.get("text")) for part in content if isinstance(part, dict)
                 and part.get("text")] if isinstance(content, list) else []
        if texts:
            return " ".join(texts)
    return error if isinstance(error, str) else json.dumps(error)

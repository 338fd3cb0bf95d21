"""One answer as it streams, drawn by `rich.live`: the Responses stream's output items
in their order: reasoning dim, text as Markdown (re-rendered as it grows, so a code
block is a code block before it closes), each tool call with its arguments and, for
one the server ran on an MCP server, its result or error; then a dim line of figures.
It also says what the conversation keeps of the answer."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.markdown import Markdown
from rich.text import Text

from parlance.console.client import error_message

SHOWN_OUTPUT = 2000  # characters of a tool's result shown (the model reads them all)
CALLS = ("function_call", "mcp_call")
ENDED = ("response.completed", "response.incomplete", "response.failed")


@dataclass
class ToolCall:
    name: str = ""
    arguments: str = ""
    server: str | None = None  # the MCP server that runs it; None: the client's own tool
    output: str | None = None
    error: str | None = None

    def shown(self) -> Text:
        try:
            args = json.dumps(json.loads(self.arguments), ensure_ascii=False)
        except ValueError:
            args = self.arguments  # still streaming, or not JSON
        text = Text(f"⚙ {self.name}({args})", style="cyan")
        if self.server is not None:
            text.append(f" on {self.server}", style="dim cyan")
        if self.error is not None:
            text.append(f"\n  ✗ {self.error}", style="red")
        elif self.output is not None:
            cut = len(self.output) - SHOWN_OUTPUT
            more = f" … ({cut} more characters)" if cut > 0 else ""
            text.append(f"\n  → {self.output[:SHOWN_OUTPUT]}{more}", style="dim")
        return text


@dataclass
class Block:
    """One output item: reasoning or message text, or a tool call."""

    kind: str
    text: str = ""
    call: ToolCall | None = None
    done: dict[str, Any] | None = None  # the finished item, as the server sent it


@dataclass
class Answer:
    """What the Responses events of one answer said so far."""

    blocks: dict[int, Block] = field(default_factory=dict)  # by output index
    model: str | None = None
    output_tokens: int | None = None
    ended: str | None = None  # why it ended other than by finishing its answer
    tools: dict[str, list[str]] = field(default_factory=dict)  # each MCP server's, listed
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def feed(self, event: dict[str, Any]) -> None:
        with self._lock:  # (drawn meanwhile by the live display's thread)
            self._feed(event)

    def _feed(self, event: dict[str, Any]) -> None:
        kind, index = event.get("type"), event.get("output_index")
        if kind in ("response.created", "response.in_progress"):
            self.model = (event.get("response") or {}).get("model") or self.model
        elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            self._block(index, "reasoning").text += event.get("delta") or ""
        elif kind == "response.output_text.delta":
            self._block(index, "message").text += event.get("delta") or ""
        elif kind in ("response.function_call_arguments.delta",
                      "response.mcp_call_arguments.delta"):
            if (call := self._call(index)) is not None:
                call.arguments += event.get("delta") or ""
        elif kind in ("response.output_item.added", "response.output_item.done"):
            self._item(index, event.get("item") or {}, done=kind.endswith(".done"))
        elif kind in ENDED:
            self._end(event.get("response") or {})

    def _block(self, index: Any, kind: str) -> Block:
        return self.blocks.setdefault(index if isinstance(index, int) else -1, Block(kind))

    def _call(self, index: Any) -> ToolCall | None:
        block = self.blocks.get(index)
        return block.call if block is not None else None

    def _item(self, index: Any, item: dict[str, Any], *, done: bool) -> None:
        kind = item.get("type")
        if kind == "mcp_list_tools" and done:
            self.tools[str(item.get("server_label"))] = [
                str(tool.get("name")) for tool in item.get("tools") or []]
        if kind not in CALLS:
            return
        block = self._block(index, kind)
        call = block.call = block.call or ToolCall(str(item.get("name") or ""))
        call.server = item.get("server_label")
        if done or item.get("arguments"):
            call.arguments = str(item.get("arguments") or "")
        if done:
            block.done = item
            call.output = item.get("output")
            if item.get("error") is not None:
                call.error = _error_text(item["error"])

    def _end(self, response: dict[str, Any]) -> None:
        self.model = response.get("model") or self.model
        usage = response.get("usage") or {}
        self.output_tokens = usage.get("output_tokens", self.output_tokens)
        reason = (response.get("incomplete_details") or {}).get("reason")
        if reason:
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
            return self._drawn()

    def _drawn(self) -> RenderableType:
        parts: list[RenderableType] = []
        for _, block in sorted(self.blocks.items()):
            if block.call is not None:
                parts.append(block.call.shown())
            elif block.kind == "reasoning" and block.text.strip():
                parts.append(Text(block.text.strip("\n"), style="dim italic"))
            elif block.text:
                parts.append(Markdown(block.text))
        return Group(*parts)

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
            shown.append(f"ended: {self.ended}")
        return Text(" · ".join(shown), style="dim")


def stream_error(event: dict[str, Any]) -> str | None:
    """Why the stream failed, when this event says it did: `response.failed` (its
    response's error), an `error` event, or any of the server's error envelopes."""
    if event.get("type") == "response.failed":
        error = (event.get("response") or {}).get("error") or {}
        return str(error.get("message") or "the response failed")
    if event.get("type") == "error" and isinstance(event.get("message"), str):
        return str(event["message"])
    return error_message(event)


def _error_text(error: Any) -> str:
    """An MCP call's error: its message, or the text its tool reported."""
    if isinstance(error, dict):
        if isinstance(error.get("message"), str):
            return str(error["message"])
        texts = [str(part.get("text")) for part in error.get("content") or []
                 if isinstance(part, dict) and part.get("text")]
        if texts:
            return " ".join(texts)
    return error if isinstance(error, str) else json.dumps(error)

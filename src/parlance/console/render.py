"""One answer as it streams, drawn by `rich.live`: the reasoning dim, the content as
Markdown (re-rendered as it grows, so a code block is a code block before it closes),
the tool calls with their arguments, then a dim line of figures."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.markdown import Markdown
from rich.text import Text


@dataclass
class ToolCall:
    name: str = ""
    arguments: str = ""

    def shown(self) -> str:
        try:
            args = json.dumps(json.loads(self.arguments), ensure_ascii=False)
        except ValueError:
            args = self.arguments  # still streaming, or not JSON
        return f"⚙ {self.name}({args})"


@dataclass
class Answer:
    """What the Chat Completions chunks of one answer said so far (choice 0)."""

    reasoning: str = ""
    content: str = ""
    calls: dict[int, ToolCall] = field(default_factory=dict)
    finish_reason: str | None = None
    model: str | None = None
    completion_tokens: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def feed(self, chunk: dict[str, Any]) -> None:
        with self._lock:  # (drawn meanwhile by the live display's thread)
            self._feed(chunk)

    def _feed(self, chunk: dict[str, Any]) -> None:
        self.model = chunk.get("model") or self.model
        if isinstance(usage := chunk.get("usage"), dict):
            self.completion_tokens = usage.get("completion_tokens")
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            self.reasoning += delta.get("reasoning_content") or ""
            self.content += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                known = self.calls.setdefault(call.get("index", 0), ToolCall())
                function = call.get("function") or {}
                known.name += function.get("name") or ""
                known.arguments += function.get("arguments") or ""
            self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def message(self) -> dict[str, Any] | None:
        """The assistant message to keep in the conversation: its text (a tool call
        stays on the screen only: the terminal runs no tools, so it has no result to
        follow it); None when it said nothing."""
        return {"role": "assistant", "content": self.content} if self.content else None

    def __rich__(self) -> RenderableType:
        with self._lock:
            return self._drawn()

    def _drawn(self) -> RenderableType:
        parts: list[RenderableType] = []
        if self.reasoning:
            parts.append(Text(self.reasoning.strip("\n"), style="dim italic"))
        if self.content:
            parts.append(Markdown(self.content))
        parts.extend(Text(call.shown(), style="cyan") for _, call in sorted(self.calls.items()))
        return Group(*parts)

    def figures(self, seconds: float, stopped: bool) -> Text:
        """The dim line after the answer: tokens, speed, and why it ended."""
        shown = []
        if self.completion_tokens is not None:
            shown.append(f"{self.completion_tokens} tokens")
            if seconds > 0:
                shown.append(f"{self.completion_tokens / seconds:.1f} tokens/s")
        shown.append(f"{seconds:.1f} s")
        if stopped:
            shown.append("stopped")
        elif self.finish_reason and self.finish_reason != "stop":
            shown.append(f"ended: {self.finish_reason}")
        return Text(" · ".join(shown), style="dim")

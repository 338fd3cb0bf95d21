"""The Messages stream: `message_start`, a `ping`, then per content block
`content_block_start` / `_delta` / `_stop` with consecutive indexes (one block open at a
time), `message_delta` (stop reason, cumulative output tokens), `message_stop`.
Every event's SSE name equals its `data.type`. A failure is an `event: error` frame.
`message_delta`'s usage is the final one, cumulative, with the prompt split into
`input_tokens` and `cache_read_input_tokens` (the split is known only after
`message_start` has gone out).

With `mcp_servers`, each server's `mcp_tool_listing` block comes first, whole. A call
the server runs itself (an `mcp_servers` tool) is an `mcp_tool_use` block, its
input streamed as `input_json_delta`, then its `mcp_tool_result` block whole; what the
model says after the call waits for that result, so the stream shows each call next
to its result, in the same order as the non-stream Message."""

from __future__ import annotations

from typing import Any, Literal

from parlance.core.errors import ParlanceError
from parlance.core.events import (
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    ToolRefused,
    ToolResult,
    ToolsListed,
    Usage,
)
from parlance.dialects.anthropic import mcp
from parlance.dialects.anthropic.errors import error_frame
from parlance.dialects.anthropic.ids import tool_use_id
from parlance.dialects.anthropic.result import (
    message_shell,
    signature,
    start_usage,
    stop_fields,
    usage,
)
from parlance.dialects.base import Frame

BlockKind = Literal["text", "thinking", "tool_use", "mcp_tool_use", "mcp_tool_result",
                    "mcp_tool_listing"]


def event(data: dict[str, Any]) -> Frame:
    return Frame(data, event=data["type"])


PING = event({"type": "ping"})


class MessageEncoder:
    """Choice 0 of the generation (Messages has no `n`)."""

    def __init__(self, message_id: str, model: str, input_tokens: int) -> None:
        self._shell = message_shell(message_id, model)
        self._input_tokens = input_tokens
        self._open: BlockKind | None = None
        self._index = -1  # the index of the block opened last
        self._thinking = ""  # the open thinking block's text, for its signature
        self._finish: Finish | None = None
        self._usage: Usage | None = None
        self._call_id = ""  # the open tool block's call id
        self._awaiting: tuple[int, str] | None = None  # the server-side call (index, id)
        self._held: list[Event] = []  # events after that call, until its result

    def open(self) -> list[Frame]:
        message = {**self._shell, "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": start_usage(self._input_tokens)}
        return [event({"type": "message_start", "message": message}), PING]

    def feed(self, ev: Event) -> list[Frame]:
        if self._awaiting is not None:
            call_index, call_id = self._awaiting
            if isinstance(ev, ToolResult | ToolRefused) and ev.call_index == call_index:
                block = (mcp.result_block(call_id, ev) if isinstance(ev, ToolRefused)
                         else mcp.result_block(call_id, ev.output, ev.is_error))
                self._awaiting = None
                frames = [*self._start("mcp_tool_result", block), *self._stop()]
                return frames + self._release()
            self._held.append(ev)
            return []
        match ev:
            case TextDelta(text=text, index=0) if text:
                return [*self._ensure("text", {"type": "text", "text": ""}),
                        self._delta({"type": "text_delta", "text": text})]
            case ReasoningDelta(text=text, index=0) if text:
                frames = self._ensure("thinking", {"type": "thinking", "thinking": "",
                                                   "signature": ""})
                self._thinking += text
                return [*frames, self._delta({"type": "thinking_delta", "thinking": text})]
            case ToolCallStart(call_id=call_id, name=name, index=0, provider=provider) if (
                    provider is not None):
                self._call_id = call_id
                block = mcp.use_block(call_id, name, provider.label, {})
                return [*self._stop(), *self._start("mcp_tool_use", block)]
            case ToolCallEnd(index=0, call_index=call_index) if self._open == "mcp_tool_use":
                self._awaiting = (call_index, self._call_id)
                return self._stop()
            case ToolCallStart(call_id=call_id, name=name, index=0):
                frames = self._stop()
                block = {"type": "tool_use", "id": tool_use_id(call_id),
                         "name": name, "input": {}}
                return [*frames, *self._start("tool_use", block)]
            case ToolCallArgs(fragment=fragment, index=0) if fragment:
                return [self._delta({"type": "input_json_delta", "partial_json": fragment})]
            case ToolCallEnd(index=0):
                return self._stop()
            case ToolsListed():
                return [*self._stop(), *self._start("mcp_tool_listing", mcp.listing_block(ev)),
                        *self._stop()]
            case Finish(index=0):
                self._finish = ev
                return self._stop()
            case Usage():
                self._usage = ev
        return []

    def close(self) -> list[Frame]:
        frames: list[Frame] = []
        while self._awaiting is not None:  # a server-side call that never ran: no result
            frames += self._release()
        frames += self._stop()
        reason, stop_sequence = stop_fields(self._finish)
        counts = self._usage or Usage(self._input_tokens, 0)
        return [*frames,
                event({"type": "message_delta",
                       "delta": {"stop_reason": reason, "stop_sequence": stop_sequence},
                       "usage": usage(counts)}),
                event({"type": "message_stop"})]

    def fail(self, error: ParlanceError) -> list[Frame]:
        return [error_frame(error)]

    def _release(self) -> list[Frame]:
        """The events held back behind a server-side call, now that it has its result."""
        held, self._held, self._awaiting = self._held, [], None
        frames: list[Frame] = []
        for ev in held:
            frames += self.feed(ev)
        return frames

    def _ensure(self, kind: BlockKind, block: dict[str, Any]) -> list[Frame]:
        if self._open == kind:
            return []
        return [*self._stop(), *self._start(kind, block)]

    def _start(self, kind: BlockKind, block: dict[str, Any]) -> list[Frame]:
        self._open, self._index = kind, self._index + 1
        return [event({"type": "content_block_start", "index": self._index,
                       "content_block": block})]

    def _delta(self, delta: dict[str, Any]) -> Frame:
        return event({"type": "content_block_delta", "index": self._index, "delta": delta})

    def _stop(self) -> list[Frame]:
        """Close the open block; a thinking block gets its signature first."""
        if self._open is None:
            return []
        frames = []
        if self._open == "thinking":
            frames.append(self._delta({"type": "signature_delta",
                                       "signature": signature(self._thinking)}))
            self._thinking = ""
        self._open = None
        return [*frames, event({"type": "content_block_stop", "index": self._index})]

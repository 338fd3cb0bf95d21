"""The `/api/v1/chat` event stream, as LM Studio sends it: `chat.start` first,
`chat.end` last (even after an `error`), and in between model load and prompt
processing progress, then reasoning, message and tool-call blocks in generation order.

Each frame is `event: <type>` + `data: {"type": <type>, ...}`. `chat.end` carries
the result body built from the same accumulator as the non-stream answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from parlance.core.accumulate import Accumulator, Completion
from parlance.core.errors import ParlanceError
from parlance.core.events import (
    Event,
    ModelLoad,
    PromptProgress,
    ReasoningDelta,
    TextDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolRefused,
    ToolResult,
)
from parlance.dialects.base import Frame
from parlance.dialects.lmstudio.result import arguments_object, failure_metadata, provider_info

Render = Callable[[Completion], dict[str, Any]]


def frame(kind: str, **fields: Any) -> Frame:
    return Frame({"type": kind, **fields}, event=kind)


class ChatEventEncoder:
    def __init__(self, model: str, render: Render, error_object: Callable[[ParlanceError],
                                                                             dict[str, Any]]):
        self._model = model
        self._render = render
        self._error_object = error_object
        self._acc = Accumulator()
        self._block: str | None = None  # "reasoning" or "message" while one is open
        self._load = LoadFrames()
        self._prompting = False

    def open(self) -> list[Frame]:
        return [frame("chat.start", model_instance_id=self._model)]

    def feed(self, event: Event) -> list[Frame]:
        self._acc.feed(event)
        match event:
            case ModelLoad():
                return self._load.feed(event)
            case PromptProgress(done=done, total=total):
                return self._progress(done, total)
            case ReasoningDelta(text=text) if text:
                return [*self._enter("reasoning"), frame("reasoning.delta", content=text)]
            case TextDelta(text=text) if text:
                return [*self._enter("message"), frame("message.delta", content=text)]
            case ToolCallStart(name=name, provider=provider):
                frames = self._enter(None)
                if provider is not None:
                    frames.append(frame("tool_call.start", tool=name,
                                        provider_info=provider_info(provider)))
                return frames
            case ToolCallEnd(call_index=i):
                call = self._acc.result.choice(0).tool_calls[i]
                arguments = arguments_object(call.arguments)
                if call.provider is None or arguments is None:
                    return []  # refused next: tool_call.failure says why
                return [frame("tool_call.arguments", tool=call.name, arguments=arguments,
                              provider_info=provider_info(call.provider))]
            case ToolResult(call_index=i, output=output):
                call = self._acc.result.choice(0).tool_calls[i]
                if call.provider is None:
                    return []  # not a server-side call: nothing to report
                return [frame("tool_call.success", tool=call.name,
                              arguments=arguments_object(call.arguments) or {}, output=output,
                              provider_info=provider_info(call.provider))]
            case ToolRefused(call_index=i):
                call = self._acc.result.choice(0).tool_calls[i]
                return [frame("tool_call.failure", reason=event.reason,
                              metadata=failure_metadata(call, event))]
        return []

    def close(self) -> list[Frame]:
        return [*self._enter(None), frame("chat.end", result=self.outcome())]

    def fail(self, error: ParlanceError) -> list[Frame]:
        """The error event, then chat.end with whatever was generated."""
        return [*self._enter(None), frame("error", error=self._error_object(error)),
                frame("chat.end", result=self.outcome())]

    def outcome(self) -> dict[str, Any]:
        return self._render(self._acc.result)

    # -- blocks -----------------------------------------------------------------

    def _progress(self, done: int, total: int) -> list[Frame]:
        """One start/progress.../end cycle per model call (each tool round has one)."""
        frames = self._enter(None)
        if not self._prompting:
            self._prompting = True
            frames.append(frame("prompt_processing.start"))
        frames.append(frame("prompt_processing.progress",
                            progress=round(done / total, 4) if total else 1.0))
        if done >= total:
            self._prompting = False
            frames.append(frame("prompt_processing.end"))
        return frames

    def _enter(self, block: str | None) -> list[Frame]:
        """Close the open block unless it is `block`, then open `block`."""
        if self._block == block:
            return []
        frames = [frame(f"{self._block}.end")] if self._block else []
        if self._prompting:  # generation began: the prompt is done
            self._prompting = False
            frames.append(frame("prompt_processing.end"))
        if block is not None:
            frames.append(frame(f"{block}.start"))
        self._block = block
        return frames


class LoadFrames:
    """One model load's `model_load.*` frames: `model_load.start` before its first
    report, a `model_load.progress` per fraction, `model_load.end` with its time (and
    `extra` fields there: the load endpoint's stream adds its answer)."""

    def __init__(self) -> None:
        self._started = False

    def start(self, model: str) -> list[Frame]:
        """`model_load.start`, unless it was sent already."""
        if self._started:
            return []
        self._started = True
        return [frame("model_load.start", model_instance_id=model)]

    def feed(self, event: ModelLoad, **extra: Any) -> list[Frame]:
        frames = self.start(event.model)
        if event.seconds is None:
            frames.append(frame("model_load.progress", model_instance_id=event.model,
                                progress=round(event.progress, 4)))
        else:
            frames.append(frame("model_load.end", model_instance_id=event.model,
                                load_time_seconds=round(event.seconds, 3), **extra))
        return frames

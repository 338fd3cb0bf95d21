"""One accumulator that folds a stream of events into a final result.

Every dialect's non-streaming body is `render(accumulate(events))`, so the
streamed and non-streamed answers cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from parlance.core.errors import ParlanceError
from parlance.core.events import (
    Event,
    Failed,
    Finish,
    FinishReason,
    ModelLoad,
    PromptProgress,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    ToolRefused,
    ToolResult,
    ToolsListed,
    Usage,
)
from parlance.core.tools import ToolProvider


@dataclass(slots=True)
class ToolCallResult:
    """A call as the model made it; for a server-side call also what came of it."""

    call_id: str
    name: str
    arguments: str = ""
    provider: ToolProvider | None = None
    output: str | None = None  # the tool ran and said this
    output_is_error: bool = False  # ... and reported failure (MCP's isError)
    refused: ToolRefused | None = None  # the tool was not run, and why
    awaits_approval: bool = False  # held until the client approves it
    approved_by: str | None = None  # ran on this approval of the client's


@dataclass(slots=True)
class TextPart:
    kind: Literal["text", "reasoning"]
    text: str
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass(slots=True)
class ChoiceResult:
    """One choice's output, merged (`text`, `reasoning`, `tool_calls`) and in the
    order it was generated (`parts`: tool listings, then text and reasoning runs and
    calls, interleaved)."""

    index: int
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallResult] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    finish_reason: FinishReason | None = None
    stop_sequence: str | None = None  # the stop string that ended it
    token_ids: tuple[int, ...] | None = None  # the tokens it generated, when known
    parts: list[TextPart | ToolCallResult | ToolsListed] = field(default_factory=list)

    def add_text(self, kind: Literal["text", "reasoning"], text: str,
                 logprobs: tuple[TokenLogprob, ...] = ()) -> None:
        last = self.parts[-1] if self.parts else None
        if isinstance(last, TextPart) and last.kind == kind:
            last.text += text
            last.logprobs += logprobs
        elif text or logprobs:
            self.parts.append(TextPart(kind, text, list(logprobs)))


@dataclass(slots=True)
class Completion:
    choices: dict[int, ChoiceResult] = field(default_factory=dict)
    usage: Usage | None = None
    error: ParlanceError | None = None
    load_seconds: float | None = None  # the model was loaded for this request

    def choice(self, index: int) -> ChoiceResult:
        found = self.choices.get(index)
        if found is None:
            found = self.choices[index] = ChoiceResult(index=index)
        return found

    def ordered_choices(self) -> list[ChoiceResult]:
        return [self.choices[i] for i in sorted(self.choices)]


class Accumulator:
    """Feed events one by one; `result` is the completion so far."""

    def __init__(self) -> None:
        self.result = Completion()

    def feed(self, event: Event) -> None:
        result = self.result
        match event:
            case TextDelta(text=text, index=index, logprobs=logprobs):
                choice = result.choice(index)
                choice.text += text
                choice.add_text("text", text, logprobs or ())
                if logprobs is not None:
                    choice.logprobs = (choice.logprobs or []) + list(logprobs)
            case ReasoningDelta(text=text, index=index):
                choice = result.choice(index)
                choice.reasoning += text
                choice.add_text("reasoning", text)
            case ToolCallStart(call_id=call_id, name=name, index=index, provider=provider):
                call = ToolCallResult(call_id, name, provider=provider,
                                      awaits_approval=event.awaits_approval,
                                      approved_by=event.approved_by)
                result.choice(index).tool_calls.append(call)
                result.choice(index).parts.append(call)
            case ToolCallArgs(fragment=fragment, index=index, call_index=call_index):
                result.choice(index).tool_calls[call_index].arguments += fragment
            case ToolResult(output=output, index=index, call_index=call_index):
                call = result.choice(index).tool_calls[call_index]
                call.output, call.output_is_error = output, event.is_error
            case ToolRefused(index=index, call_index=call_index):
                result.choice(index).tool_calls[call_index].refused = event
            case ToolsListed():
                result.choice(0).parts.append(event)
            case ModelLoad(seconds=seconds):
                if seconds is not None:
                    result.load_seconds = seconds
            case ToolCallEnd() | PromptProgress():
                pass
            case Finish(reason=reason, index=index):
                result.choice(index).finish_reason = reason
                result.choice(index).stop_sequence = event.stop_sequence
                result.choice(index).token_ids = event.token_ids
            case Usage():
                result.usage = event
            case Failed(error=error):
                result.error = error


def accumulate(events: list[Event]) -> Completion:
    acc = Accumulator()
    for event in events:
        acc.feed(event)
    return acc.result

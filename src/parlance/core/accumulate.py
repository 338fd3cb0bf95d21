"""One accumulator that folds a stream of events into a final result.

Every dialect's non-streaming body is `render(accumulate(events))`, so the
streamed and non-streamed answers cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parlance.core.errors import ParlanceError
from parlance.core.events import (
    Event,
    Failed,
    Finish,
    FinishReason,
    Progress,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)


@dataclass(slots=True)
class ToolCallResult:
    call_id: str
    name: str
    arguments: str = ""


@dataclass(slots=True)
class ChoiceResult:
    index: int
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallResult] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    finish_reason: FinishReason | None = None


@dataclass(slots=True)
class Completion:
    choices: dict[int, ChoiceResult] = field(default_factory=dict)
    usage: Usage | None = None
    error: ParlanceError | None = None

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
                if logprobs is not None:
                    choice.logprobs = (choice.logprobs or []) + list(logprobs)
            case ReasoningDelta(text=text, index=index):
                result.choice(index).reasoning += text
            case ToolCallStart(call_id=call_id, name=name, index=index):
                result.choice(index).tool_calls.append(ToolCallResult(call_id, name))
            case ToolCallArgs(fragment=fragment, index=index, call_index=call_index):
                result.choice(index).tool_calls[call_index].arguments += fragment
            case ToolCallEnd() | Progress():
                pass
            case Finish(reason=reason, index=index):
                result.choice(index).finish_reason = reason
            case Usage():
                result.usage = event
            case Failed(error=error):
                result.error = error


def accumulate(events: list[Event]) -> Completion:
    acc = Accumulator()
    for event in events:
        acc.feed(event)
    return acc.result

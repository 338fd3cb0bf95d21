"""Neutral chat messages, as every dialect's input converges on them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Role = Literal["system", "developer", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the assistant made earlier in the conversation (arguments as JSON text,
    or for a `freeform` tool the raw text the model wrote as its input)."""

    id: str
    name: str
    arguments: str
    freeform: bool = False


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: str = ""
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)
    tool_call_id: str | None = None
    reasoning: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-able record, for stored conversations."""
        return asdict(self)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Message:
        calls = tuple(ToolCall(**c) for c in record.get("tool_calls") or ())
        return cls(**{**record, "tool_calls": calls})


def unanswered_result(messages: Sequence[Message]) -> tuple[int, str] | None:
    """The first tool result that answers no call an earlier assistant message made (its
    index and call id), which OpenAI's APIs refuse; None when each
    answers one. A result without a call id is not judged (Ollama's have none)."""
    made: set[str] = set()
    for i, message in enumerate(messages):
        made.update(call.id for call in message.tool_calls)
        call_id = message.tool_call_id
        if message.role == "tool" and call_id is not None and call_id not in made:
            return i, call_id
    return None

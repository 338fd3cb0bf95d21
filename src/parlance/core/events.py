"""The closed set of stream events engines emit and dialects encode.

Merge rules (what the accumulator does, and what every encoder may rely on):
- `TextDelta`/`ReasoningDelta` texts concatenate per choice `index`, in order.
- A tool call is `ToolCallStart`, zero or more `ToolCallArgs` (concatenated),
  then `ToolCallEnd`, all with the same `index` and `call_index`.
- A server-side tool call (one the server runs itself, e.g. on an MCP server)
  is followed by its `ToolResult` or `ToolRefused`, same `index`/`call_index`.
- `ToolsListed` (one per tool server) comes before any generated event.
- `PromptProgress` and `ModelLoad` are advisory and may be dropped by a dialect.
- Each choice ends with exactly one `Finish`; after every choice has finished
  the engine sends one `Usage` for the whole request.
- `Failed` ends the stream early; nothing follows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from parlance.core.errors import ParlanceError
from parlance.core.tools import ToolProvider, ToolSpec


class FinishReason(StrEnum):
    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"


@dataclass(frozen=True, slots=True)
class TopLogprob:
    """An alternative token. `token` is lossy (U+FFFD) when `bytes` is not whole
    UTF-8; each dialect decides how to spell such a token from its bytes."""

    token: str
    logprob: float
    bytes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One emitted token. `token` texts concatenate to exactly the emitted text.

    `logprob` is None for the first token of an echoed prompt (nothing predicts it).
    """

    token: str
    logprob: float | None
    bytes: tuple[int, ...]
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    index: int = 0
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str
    index: int = 0


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """`provider` is set for a call the server runs itself (None: the client runs it,
    or no known tool has that name). Such a call may be held for the client's
    approval (`awaits_approval`: it does not run in this turn), or run because the
    client approved it (`approved_by`: the approval's id)."""

    call_id: str
    name: str
    index: int = 0
    call_index: int = 0
    provider: ToolProvider | None = None
    awaits_approval: bool = False
    approved_by: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallArgs:
    fragment: str
    index: int = 0
    call_index: int = 0


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    index: int = 0
    call_index: int = 0


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A server-side tool call ran; `output` is the tool's raw result text. `is_error`:
    the tool itself reported failure (MCP's `isError`); `output` then says why."""

    output: str
    index: int = 0
    call_index: int = 0
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class ToolRefused:
    """A server-side tool call was not run: `kind` is "invalid_name" (no such tool)
    or "invalid_arguments" (arguments not JSON or not valid for the tool's schema)."""

    kind: str
    reason: str
    index: int = 0
    call_index: int = 0


@dataclass(frozen=True, slots=True)
class ToolsListed:
    """The tools a server-side tool server offers the model in this request (after
    the request's own filter), sent before anything else is generated."""

    provider: ToolProvider
    tools: tuple[ToolSpec, ...]


@dataclass(frozen=True, slots=True)
class ModelLoad:
    """The model this request needs is being loaded: `progress` from 0 to 1, and on
    the last event `seconds`, the load time. Only a request that caused the load
    sees these."""

    model: str
    progress: float
    seconds: float | None = None


@dataclass(frozen=True, slots=True)
class PromptProgress:
    """Prompt evaluation progress: `done` of `total` prompt tokens evaluated."""

    done: int
    total: int
    index: int = 0


@dataclass(frozen=True, slots=True)
class Finish:
    """`stop_sequence`: the request's stop string that ended the choice, if one did
    (Anthropic reports which one matched). `token_ids`: the tokens the choice
    generated, when the engine has them (Ollama's `context` returns them)."""

    reason: FinishReason
    index: int = 0
    stop_sequence: str | None = None
    token_ids: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts and timings for the whole request (all choices).

    `first_token_seconds`: from request admission to the first generated token.
    `decode_seconds`: from the first to the last generated token.
    `cached_tokens`: of `prompt_tokens`, those not evaluated because an earlier
    request left them in the engine's cache (prefix reuse).
    """

    prompt_tokens: int
    completion_tokens: int
    first_token_seconds: float | None = None
    decode_seconds: float | None = None
    reasoning_tokens: int = 0  # of completion_tokens, those spent inside reasoning
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def throughput_after_first_token(self) -> float | None:
        """Tokens per second after the first one; None when it cannot be measured."""
        if not self.decode_seconds or self.completion_tokens < 2:
            return None
        return (self.completion_tokens - 1) / self.decode_seconds


@dataclass(frozen=True, slots=True)
class Failed:
    error: ParlanceError


Event = (
    TextDelta
    | ReasoningDelta
    | ToolCallStart
    | ToolCallArgs
    | ToolCallEnd
    | ToolResult
    | ToolRefused
    | ToolsListed
    | ModelLoad
    | PromptProgress
    | Finish
    | Usage
    | Failed
)

"""The `/api/chat` and `/api/generate` NDJSON streams: one line per piece of text or
thinking (`done: false`), each tool call whole in a line of its own once its arguments
are complete (Ollama's clients read `arguments` as an object), then the final line
with `done: true`, `done_reason` and the metrics. A failure after the stream began is
a last line `{"error": "..."}`, with no final line (Ollama's own streams end so)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from parlance.core.accumulate import Accumulator, Completion
from parlance.core.errors import ParlanceError
from parlance.core.events import Event, ReasoningDelta, TextDelta, TokenLogprob, ToolCallEnd
from parlance.dialects.base import Frame
from parlance.dialects.ollama import result
from parlance.dialects.ollama.errors import error_line

Final = Callable[[Completion], dict[str, Any]]  # the final line's fields after `done`


class OllamaEncoder:
    """Choice 0 (Ollama has no `n`). `generate`: lines carry `response`, not `message`."""

    def __init__(self, model: str, *, generate: bool, with_logprobs: bool,
                 final: Final) -> None:
        self._model = model
        self._generate = generate
        self._with_logprobs = with_logprobs
        self._final = final
        self._acc = Accumulator()

    def open(self) -> list[Frame]:
        return []

    def feed(self, event: Event) -> list[Frame]:
        self._acc.feed(event)
        match event:
            case TextDelta(text=text, index=0, logprobs=lps) if text or lps:
                return [self._line(text, logprobs=lps if self._with_logprobs else None)]
            case ReasoningDelta(text=text, index=0) if text:
                return [self._line("", thinking=text)]
            case ToolCallEnd(index=0, call_index=i) if not self._generate:
                call = self._acc.result.choice(0).tool_calls[i]
                if call.provider is not None:
                    return []  # run by the server (none are, through this API)
                return [self._line("", calls=[result.tool_call(call, i)])]
        return []

    def close(self) -> list[Frame]:
        completion = self._acc.result
        line = self._head()
        if self._generate:
            line["response"] = ""
        else:
            line["message"] = result.assistant_message("")
        line |= {"done": True,
                 "done_reason": result.done_reason(completion.choices.get(0))}
        return [Frame({**line, **self._final(completion)})]

    def fail(self, error: ParlanceError) -> list[Frame]:
        return [error_line(error)]

    def _head(self) -> dict[str, Any]:
        return {"model": self._model, "created_at": result.timestamp()}

    def _line(self, text: str, *, thinking: str = "",
              calls: list[dict[str, Any]] | None = None,
              logprobs: tuple[TokenLogprob, ...] | None = None) -> Frame:
        line = self._head()
        if self._generate:
            line["response"] = text
            if thinking:
                line["thinking"] = thinking
        else:
            line["message"] = result.assistant_message(text, thinking, calls)
        line["done"] = False
        if logprobs:
            line["logprobs"] = result.logprobs(logprobs)
        return Frame(line)

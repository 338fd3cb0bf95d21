"""What OpenAI's Chat and Completions dialects share: ids, the usage object, the
sampling fields both accept, and the chunk stream (its error frame from `errors.py`)."""

from __future__ import annotations

import secrets
import time
from typing import Annotated, Any

from pydantic import Field, field_validator

from parlance.core.errors import ParlanceError
from parlance.core.events import Event, Finish, TextDelta, TopLogprob, Usage
from parlance.core.request import SamplingParams
from parlance.dialects.base import DONE, Frame
from parlance.dialects.openai.errors import error_frames
from parlance.dialects.shared.wire import Probability, WireModel

Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


def now() -> int:
    return int(time.time())


def token_spelling(alternative: TopLogprob) -> str:
    """OpenAI spells a token that is not whole UTF-8 by its bytes: `bytes:\\xNN…`."""
    raw = bytes(alternative.bytes)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


def usage_object(usage: Usage | None, *, details: bool = False) -> dict[str, Any]:
    """Token counts; Chat adds `prompt_tokens_details.cached_tokens` (prompt tokens
    reused from the engine's cache) and `completion_tokens_details.reasoning_tokens`."""
    usage = usage or Usage(0, 0)
    out: dict[str, Any] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
    if details:
        out["prompt_tokens_details"] = {"cached_tokens": usage.cached_tokens}
        out["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
    return out


def streamed_usage_object(usage: Usage | None, *, details: bool = False) -> dict[str, Any]:
    """The final usage chunk adds time to first token (ms) and throughput (tokens/s)."""
    out: dict[str, Any] = usage_object(usage, details=details)
    ttft = usage.first_token_seconds if usage else None
    rate = usage.throughput_after_first_token if usage else None
    out["time_to_first_token"] = round(ttft * 1000, 3) if ttft is not None else None
    out["throughput_after_first_token"] = round(rate, 3) if rate is not None else None
    return out


class StreamOptions(WireModel):
    include_usage: bool = False


class SamplingFields(WireModel):
    """Sampling fields accepted by both chat and legacy completions."""

    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Probability | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    min_p: Probability | None = None
    seed: int | None = None
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repeat_penalty: Annotated[float, Field(gt=0.0)] | None = None
    repeat_last_n: Annotated[int, Field(ge=-1)] | None = None  # llama-server's name
    logit_bias: dict[str, Annotated[float, Field(ge=-100.0, le=100.0)]] | None = None
    n: Annotated[int, Field(ge=1, le=128)] = 1

    @field_validator("logit_bias")
    @classmethod
    def _token_ids(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key in value or {}:
            if not key.lstrip("-").isdigit():
                raise ValueError(f"keys must be token ids, got {key!r}")
        return value

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=self.top_k or 0,
            min_p=self.min_p or 0.0,
            seed=self.seed,
            repeat_penalty=self.repeat_penalty or 1.0,
            repeat_last_n=64 if self.repeat_last_n is None else self.repeat_last_n,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            logit_bias=tuple((int(k), v) for k, v in (self.logit_bias or {}).items()),
        )

    def sampling_set(self) -> frozenset[str]:
        return frozenset(self.model_fields_set & set(SamplingParams.__dataclass_fields__))

    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChunkEncoder:
    """What Chat and Completions streams share: the chunk envelope (same id, created
    and model in every chunk), the optional usage chunk, `[DONE]` and the error frame.
    Subclasses say what a text delta and a finish look like."""

    object_type = ""
    envelope_extra: dict[str, Any] = {}
    usage_details = False  # add prompt_tokens_details and completion_tokens_details

    def __init__(self, *, id: str, created: int, model: str, include_usage: bool) -> None:
        self._envelope = {"id": id, "object": self.object_type, "created": created,
                          "model": model}
        self._include_usage = include_usage
        self._usage: Usage | None = None

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> Frame:
        return Frame({**self._envelope, "choices": choices, **self.envelope_extra, **extra})

    def open(self) -> list[Frame]:
        return []

    def idle(self) -> Frame:
        """A chunk with no choices: the shape of OpenAI's own usage chunk (and of Azure
        OpenAI's first, content-filter chunk), which every SDK's accumulator skips, and
        a data line for clients whose idle timer ignores comments (Qwen Code)."""
        return self.chunk([])

    def feed(self, event: Event) -> list[Frame]:
        match event:
            case TextDelta():
                return self.on_text(event) if event.text or event.logprobs else []
            case Finish():
                return self.on_finish(event)
            case Usage():
                self._usage = event
                return []
        return self.on_other(event)

    def on_text(self, delta: TextDelta) -> list[Frame]:
        raise NotImplementedError

    def on_finish(self, finish: Finish) -> list[Frame]:
        raise NotImplementedError

    def on_other(self, event: Event) -> list[Frame]:
        """Reasoning and tool-call events; a dialect without them drops them."""
        return []

    def close(self) -> list[Frame]:
        frames = []
        if self._include_usage:
            frames.append(self.chunk([], usage=streamed_usage_object(
                self._usage, details=self.usage_details)))
        return [*frames, Frame(DONE)]

    def fail(self, error: ParlanceError) -> list[Frame]:
        return error_frames(error)

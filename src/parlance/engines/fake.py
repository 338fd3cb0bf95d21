"""A scripted, deterministic engine for protocol tests (our `MockTransport`).

Enqueue a script per request: events are yielded in order, a float sleeps that
many seconds, an exception instance is raised mid-stream. With no script the
engine answers `default_reply` word by word, honouring `max_tokens`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from parlance.core.errors import ContextOverflow, InvalidRequest
from parlance.core.events import Event, Finish, FinishReason, TextDelta, Usage
from parlance.core.request import ChatInput, GenerationRequest, TextInput
from parlance.engines.base import PromptInfo
from parlance.engines.metrics import EngineMetrics

ScriptItem = Event | float | BaseException


def _prompt_text(prompt: ChatInput | TextInput) -> str:
    if isinstance(prompt, ChatInput):
        return "\n".join(m.content for m in prompt.messages)
    if prompt.token_ids is not None:
        return " ".join(str(t) for t in prompt.token_ids)
    return prompt.text or ""


@dataclass
class FakeGeneration:
    script: Sequence[ScriptItem]
    prompts: tuple[PromptInfo, ...]
    cancelled: bool = False
    finished: bool = False
    yielded: list[Event] = field(default_factory=list)
    _woken: asyncio.Event = field(default_factory=asyncio.Event)

    def cancel(self) -> None:
        self.cancelled = True
        self._woken.set()

    async def __aiter__(self) -> AsyncIterator[Event]:
        for item in self.script:
            if self.cancelled:
                return
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, float | int):
                with contextlib.suppress(TimeoutError):  # a cancel ends the pause at once
                    await asyncio.wait_for(self._woken.wait(), item)
                continue
            self.yielded.append(item)
            yield item
        self.finished = True


class FakeEngine:
    def __init__(self, *, context_length: int = 2048, default_reply: str = "Hello there!",
                 slots: int = 4):
        self.context_length = context_length
        self.slots = slots
        self.default_reply = default_reply
        self.scripts: deque[list[ScriptItem]] = deque()
        self.requests: list[GenerationRequest] = []
        self.generations: list[FakeGeneration] = []
        self.metrics = EngineMetrics()

    def enqueue(self, *items: ScriptItem) -> None:
        self.scripts.append(list(items))

    async def start(self, request: GenerationRequest) -> FakeGeneration:
        prompts = tuple(
            PromptInfo(text, len(text.split())) for text in map(_prompt_text, request.prompts)
        )
        needed = max(p.n_tokens for p in prompts) + (request.max_tokens or 1)
        if needed > self.context_length:
            raise ContextOverflow(
                f"This model's maximum context length is {self.context_length} tokens; "
                f"the request needs {needed}.",
                param="messages",
                code="context_length_exceeded",
            )
        if request.n > self.slots:
            raise InvalidRequest(f"n is {request.n}; at most {self.slots}.", param="n")
        self.requests.append(request)
        script = self.scripts.popleft() if self.scripts else self._default_script(request, prompts)
        generation = FakeGeneration(script, prompts)
        self.generations.append(generation)
        return generation

    def _default_script(
        self, request: GenerationRequest, prompts: tuple[PromptInfo, ...]
    ) -> list[ScriptItem]:
        words = self.default_reply.split(" ")
        pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
        limit = request.max_tokens if request.max_tokens is not None else len(pieces)
        script: list[ScriptItem] = []
        choices = len(prompts) * request.n
        for index in range(choices):
            script += [TextDelta(p, index=index) for p in pieces[:limit]]
            reason = FinishReason.LENGTH if limit < len(pieces) else FinishReason.STOP
            script.append(Finish(reason, index=index))
        completion = min(limit, len(pieces)) * choices
        script.append(Usage(sum(p.n_tokens for p in prompts), completion, 0.01, 0.02))
        return script

    async def aclose(self) -> None:
        return None

"""A request admitted to the llama.cpp worker, and its bridge back to asyncio.

The worker thread calls `emit()`; events land on the request's asyncio queue
through `call_soon_threadsafe`, one hop per event, no thread pool involved.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from parlance.core.events import Event
from parlance.core.request import SamplingParams
from parlance.engines.base import PromptInfo
from parlance.engines.llamacpp.sampler import SamplerChain

_END = object()


@dataclass(slots=True)
class SequenceSpec:
    """One choice to generate: its prompt tokens, budget and sampler."""

    index: int
    tokens: list[int]
    max_tokens: int
    sampler: SamplerChain
    echo: bool = False


class Job:
    def __init__(
        self,
        sequences: list[SequenceSpec],
        *,
        stop: tuple[str, ...],
        logprobs: int | None,
        sampling: SamplingParams,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.sequences = sequences
        self.stop = stop
        self.logprobs = logprobs
        self.sampling = sampling
        self.created = time.perf_counter()
        self._cancel = threading.Event()
        self._loop = loop
        self.queue: asyncio.Queue[object] = asyncio.Queue()
        self.ran = False  # set by the worker when it starts the job
        self.done = threading.Event()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        self._cancel.set()

    def emit(self, event: Event) -> None:
        self._post(event)

    def close(self) -> None:
        """Worker side: no more events; frees the samplers."""
        for seq in self.sequences:
            seq.sampler.free()
        self.done.set()
        self._post(_END)

    def _post(self, item: object) -> None:
        try:
            self._loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the event loop is gone (server shutting down)
            pass


class LlamaGeneration:
    """The `Generation` handed to the server for a llama.cpp job."""

    def __init__(self, job: Job, prompts: tuple[PromptInfo, ...]) -> None:
        self._job = job
        self.prompts = prompts

    @property
    def job(self) -> Job:
        return self._job

    def cancel(self) -> None:
        self._job.cancel()

    async def __aiter__(self) -> AsyncIterator[Event]:
        while True:
            item = await self._job.queue.get()
            if item is _END:
                return
            yield item  # type: ignore[misc]

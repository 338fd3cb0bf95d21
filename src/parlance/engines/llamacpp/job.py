"""A request admitted to the llama.cpp engine, and its bridge back to asyncio.

A `Job` is one request; it holds one `GroupSpec` per prompt (legacy
completions may send several). A group is evaluated once and fans out to its
`n` choices. The scheduler emits events through the shared `Outbox`, which
delivers them on the job's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from parlance.core.events import Event, Failed
from parlance.core.prompts import PromptInfo
from parlance.engines.llamacpp.drafting import NgramDrafter
from parlance.engines.llamacpp.guide import GuidePlan
from parlance.engines.llamacpp.outbox import Outbox
from parlance.engines.llamacpp.sampler import SamplerChain
from parlance.engines.llamacpp.scoring import ScoreSpec
from parlance.engines.output_check import OutputCheck

_END = object()


@dataclass(slots=True)
class GroupSpec:
    """One prompt and its choices: prefilled once, then copied to one sequence per choice."""

    job: Job
    tokens: list[int]
    max_tokens: int
    indices: tuple[int, ...]  # the choice index of each sequence
    samplers: list[SamplerChain]
    plan: GuidePlan | None = None  # how the output is parsed and constrained
    drafter: NgramDrafter | None = None  # the prompt's n-gram index when its choices draft
    score: ScoreSpec | None = None  # continuations to score instead of choices to sample

    @property
    def n(self) -> int:
        return len(self.indices)


class Job:
    def __init__(
        self,
        *,
        stop: tuple[str, ...],
        logprobs: int | None,
        echo: bool,
        outbox: Outbox,
        on_cancel: Callable[[], None],
    ) -> None:
        self.groups: list[GroupSpec] = []
        self.finished_groups: list[list] = []  # the sequences of each finished group
        self.stop = stop
        self.logprobs = logprobs
        self.echo = echo
        self.created = time.perf_counter()
        self.loop = asyncio.get_running_loop()
        # Delivered items and the consumer's wait: a plain deque and one future per
        # wait, lighter per token than asyncio.Queue (on Python 3.11 its every wait
        # also asks the kernel for the pid, to find the running loop).
        self.items: deque[object] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self.started = False  # set by the scheduler when a group of it is admitted
        self.cached_tokens = 0  # prompt tokens its groups found in the cache when admitted
        self.done = threading.Event()
        self._cancel = threading.Event()
        self._outbox = outbox
        self._on_cancel = on_cancel

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        if not self._cancel.is_set():
            self._cancel.set()
            self._on_cancel()

    # -- scheduler thread -------------------------------------------------------

    def emit(self, event: Event) -> None:
        self._outbox.put(self, event)

    def close(self) -> None:
        """No more events; frees the samplers (on the thread that used them)."""
        for group in self.groups:
            for sampler in group.samplers:
                sampler.free()
        self.done.set()
        self._outbox.put(self, _END)

    def end_now(self, event: Event) -> None:
        """From any thread: `event`, then the end, straight to the event loop, for a
        scheduler thread that is stuck for good in llama.cpp (its outbox never flushes
        again: an RPC server was lost)."""
        def deliver() -> None:
            self.receive(event)
            self.receive(_END)

        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody listens
            self.loop.call_soon_threadsafe(deliver)

    # -- event loop ---------------------------------------------------------------

    def receive(self, item: object) -> None:
        self.items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def arrival(self) -> asyncio.Future[None]:
        """Done when the next item is delivered (await it while `items` is empty)."""
        self._waiter = self.loop.create_future()
        return self._waiter


class LlamaGeneration:
    """The `Generation` handed to the server for a llama.cpp job. `check`: the
    finished values checked against the client's schemas (a breach fails the
    generation instead of its normal finish)."""

    def __init__(self, job: Job, prompts: tuple[PromptInfo, ...],
                 check: OutputCheck | None = None) -> None:
        self._job = job
        self.prompts = prompts
        self._check = check

    @property
    def job(self) -> Job:
        return self._job

    def cancel(self) -> None:
        """The stream ends at once, after what was already delivered (on the event
        loop); the scheduler frees the slot at its next step, which on a loaded
        machine may be seconds away, and nobody has to wait for that."""
        self._job.cancel()
        self._job.receive(_END)

    async def __aiter__(self) -> AsyncIterator[Event]:
        job, items = self._job, self._job.items
        while True:
            while not items:
                await job.arrival()
            item = items.popleft()
            if item is _END:
                return
            if isinstance(item, Failed):  # the engine failed it: nothing more to check
                self._check = None
            elif self._check is not None:
                breach = self._check.breach(item)  # type: ignore[arg-type]
                if breach is not None:
                    self._job.cancel()
                    yield Failed(breach)
                    return
            yield item  # type: ignore[misc]

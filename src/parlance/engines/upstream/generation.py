"""One request's upstream streams merged into one generation.

Each upstream stream is read by a task of its own (`_pump`) that hands its events to
the generation; `cancel()` (the client left, the deadline passed) cancels those
tasks, which closes their connections, and the upstream server sees its client
leave and stops generating. Once a replica has produced an event nothing is
retried: a stream it breaks ends with `Failed`. A replica that breaks a stream
before producing anything is replaced, silently, through the `Opener`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from parlance.core.errors import EngineFailure, ParlanceError, UpstreamFailure
from parlance.core.events import Event, Failed, PromptProgress, Usage
from parlance.core.prompts import PromptInfo
from parlance.core.request import ChatInput, GenerationRequest, TextInput
from parlance.engines.metrics import EngineMetrics
from parlance.engines.upstream.chunks import ChoiceMapper, StreamError, UpstreamUsage
from parlance.engines.upstream.http1 import UpstreamHTTPError
from parlance.engines.upstream.opening import Opened, Opener
from parlance.engines.upstream.sse import DONE, SseSplitter, payloads
from parlance.engines.upstream.tool_contract import ToolContract
from parlance.engines.upstream.wire import SubRequest, structured_call, tool_names

log = logging.getLogger("parlance.upstream")


@dataclass(frozen=True, slots=True)
class _Done:
    """One upstream stream finished; its usage."""

    sub: SubRequest
    usage: UpstreamUsage


class Running:
    """The generations of one engine still streaming; the engine's running-requests
    and slots-in-use gauges follow their number."""

    def __init__(self, metrics: EngineMetrics) -> None:
        self.metrics = metrics
        self._generations: set[UpstreamGeneration] = set()

    def add(self, generation: UpstreamGeneration) -> None:
        self._generations.add(generation)
        self._count()

    def discard(self, generation: UpstreamGeneration) -> None:
        self._generations.discard(generation)
        self._count()

    def abort_all(self, error: ParlanceError) -> None:
        for generation in list(self._generations):
            generation.abort(error)

    def _count(self) -> None:
        self.metrics.requests_running = len(self._generations)
        self.metrics.slots_in_use = len(self._generations)


def prompt_infos(request: GenerationRequest) -> tuple[PromptInfo, ...]:
    """The prompts as far as the gateway knows them: their text (offsets of legacy
    completions count from it); their token counts arrive with the usage."""
    out = []
    for prompt in request.prompts:
        if isinstance(prompt, ChatInput):
            out.append(PromptInfo("", 0))
        elif isinstance(prompt, TextInput):
            out.append(PromptInfo(prompt.text or "", len(prompt.token_ids or ())))
    return tuple(out)


class UpstreamGeneration:
    """The events of every upstream stream of one request, merged; one `Usage` at the
    end. Pump tasks deliver into `_items`; the consumer waits on `_waiter`. It leaves
    `running` when it settles (finished, cancelled or read to its end)."""

    def __init__(self, opener: Opener, running: Running, request: GenerationRequest,
                 opened: list[Opened], keys: dict[int, tuple[int, ...]], clip: bool,
                 started: float, contract: ToolContract | None = None) -> None:
        """`clip`: a replica's context overflow is answered by asking again without
        max_tokens (`UpstreamEngine.clips`); `contract`: what tool_choice promises, a
        fresh copy checked on each choice."""
        self.prompts = prompt_infos(request)
        self._opener = opener
        self._clip = clip
        self._running = running
        self._metrics = running.metrics
        self._request = request
        self._keys = keys
        self._items: deque[Any] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._started = started
        self._first: float | None = None
        self._last = started
        self._cancelled = False
        self._settled = False
        self._pending = len(opened)
        self._usages: list[_Done] = []
        # The upstream is evaluating the prompt now; it is done when the first token comes.
        # (No finer progress crosses the API: LM Studio's prompt_processing events.)
        self._progress_index = opened[0].sub.index
        self._items.append(PromptProgress(0, 1, self._progress_index))
        freeform = frozenset(t.name for t in request.tools if t.freeform)
        names = tool_names(request)
        self._tasks = [asyncio.ensure_future(self._pump(o, ChoiceMapper(
            o.sub.index, stops=request.stop, freeform=freeform, names=names,
            contract=contract.fresh() if contract is not None else None,
            max_arguments=o.replica.max_event_bytes)))
            for o in opened]

    # -- the Generation seam ------------------------------------------------------

    def cancel(self) -> None:
        if not self._cancelled:
            self._cancelled = True
            for task in self._tasks:
                task.cancel()
            self._wake()
            self._settle()

    def abort(self, error: ParlanceError) -> None:
        """End the stream now with `Failed(error)` (the model is being unloaded)."""
        if self._settled:
            return
        for task in self._tasks:
            task.cancel()
        self._items.append(Failed(error))
        self._wake()

    async def __aiter__(self) -> AsyncIterator[Event]:
        items = self._items
        try:
            while True:
                while items:
                    if self._cancelled:
                        return
                    item = items.popleft()
                    if type(item) is _Done:
                        self._pending -= 1
                        self._usages.append(item)
                    elif type(item) is Failed:
                        for task in self._tasks:
                            task.cancel()
                        yield item
                        return
                    else:
                        yield item
                if self._cancelled:
                    return
                if not self._pending:
                    break
                self._waiter = asyncio.get_running_loop().create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None
            yield self._usage()
        finally:
            self._settle()

    # -- internals --------------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _deliver(self, events: list[Any], *, generated: bool = True) -> None:
        if generated:
            now = time.perf_counter()
            metrics = self._metrics
            if self._first is None:
                self._first = now
                metrics.time_to_first_token.observe(now - self._started)
                self._items.append(PromptProgress(1, 1, self._progress_index))
            else:
                metrics.inter_token.observe(now - self._last)
            self._last = now
        self._items.extend(events)
        self._wake()

    def _settle(self) -> None:
        if self._settled:
            return
        self._settled = True
        self._running.discard(self)

    def _usage(self) -> Usage:
        prompt = completion = reasoning = cached = 0
        for done in self._usages:
            if done.sub.first_of_prompt:
                prompt += done.usage.prompt_tokens
                cached += done.usage.cached_tokens
            completion += done.usage.completion_tokens
            reasoning += done.usage.reasoning_tokens
        metrics = self._metrics
        metrics.tokens_generated += completion
        metrics.prompt_tokens_evaluated += prompt - cached
        metrics.prompt_tokens_cached += cached
        if cached:
            metrics.prefix_cache_hits += 1
        first = self._first
        return Usage(prompt, completion,
                     first - self._started if first is not None else None,
                     self._last - first if first is not None else None,
                     reasoning, cached_tokens=cached)

    def _structured(self, opened: Opened, mapper: ChoiceMapper, exc: StreamError,
                    produced: bool) -> SubRequest | None:
        """The forced call a replica left unmade, asked again as structured output
        (`wire.structured_call`): only while nothing of the answer has gone out, once."""
        if (exc.error.code != "tool_choice_unmet" or produced or mapper.structured
                or self._cancelled):
            return None
        retry = structured_call(opened.sub)
        if retry is not None:
            log.info("upstream %s left tool_choice unmet; asking again with the call as "
                     "structured output", opened.replica.label)
        return retry

    async def _pump(self, opened: Opened, mapper: ChoiceMapper) -> None:
        """Read one upstream stream to its end into the generation. A replica that
        breaks the stream before anything came is replaced (the opener again)."""
        produced = done = False

        def feed(raw: bytes) -> None:
            """One read of the body, inside the connection's read callback."""
            nonlocal produced, done
            events: list[Any] = []
            for chunk in payloads(splitter.feed(raw)):
                if chunk is DONE:
                    done = True
                else:
                    events += mapper.feed(chunk)
            if events:
                if not produced:
                    produced = True
                    opened.replica.metrics.time_to_first_token.observe(
                        time.perf_counter() - opened.started)
                self._deliver(events)

        while True:
            replica = opened.replica
            splitter = SseSplitter(replica.max_event_bytes)  # one per attempt (`feed` reads it)
            done = False
            try:
                await opened.response.stream(feed)
                if DONE in splitter.end():
                    done = True
            except StreamError as exc:
                await opened.close()
                log.warning("upstream %s failed a stream: %s %s", replica.label,
                            exc.error.message, exc.said)
                retry = self._structured(opened, mapper, exc, produced)
                if retry is not None:
                    try:
                        opened = await self._opener.open(
                            retry, self._keys[retry.prompt], clip=self._clip)
                    except ParlanceError as error:
                        self._deliver([Failed(error)], generated=False)
                        return
                    mapper = mapper.constrained()
                    continue
                self._deliver([Failed(exc.error)], generated=False)
                return
            except UpstreamHTTPError as exc:
                await opened.close()
                replica.failed(at_once=True)
                log.warning("upstream %s broke a stream: %s", replica.label, exc)
                if not produced and not self._cancelled:
                    try:
                        opened = await self._opener.open(
                            opened.sub, self._keys[opened.sub.prompt],
                            clip=self._clip, tried=opened.tried)
                    except ParlanceError as error:
                        self._deliver([Failed(error)], generated=False)
                        return
                    continue
                self._deliver([Failed(UpstreamFailure(
                    f"The upstream replica {replica.label} broke the stream before it "
                    "finished.", code="upstream_disconnected"))], generated=False)
                return
            except asyncio.CancelledError:
                await opened.close()
                raise
            except Exception as exc:  # a bug here must still end the stream
                await opened.close()
                log.exception("reading an upstream stream failed")
                self._deliver([Failed(EngineFailure(
                    f"The upstream stream could not be read: {type(exc).__name__}",
                    code="upstream_error"))], generated=False)
                return
            await opened.close()
            if not mapper.finished and not done:
                # It answered, malformed: this request fails, and the replica counts one
                # failure (its circuit opens after several in a row, not on one reply).
                replica.failed()
                self._deliver([Failed(UpstreamFailure(
                    f"The upstream replica {replica.label} ended the stream before it "
                    "finished.", code="upstream_disconnected"))], generated=False)
                return
            replica.succeeded()
            usage = mapper.usage()
            replica.metrics.tokens_relayed += usage.completion_tokens
            try:
                tail = mapper.end_of_stream()
            except StreamError as exc:
                log.warning("upstream %s failed a stream: %s", replica.label, exc.error.message)
                self._deliver([Failed(exc.error)], generated=False)
                return
            if tail:
                self._deliver(tail)
            self._deliver([_Done(opened.sub, usage)], generated=False)
            return

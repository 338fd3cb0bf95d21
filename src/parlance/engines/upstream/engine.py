"""UpstreamEngine: a model served by streaming from OpenAI-compatible servers.

`start()` sends each upstream request (one per choice, see `wire.sub_requests`)
and waits for the replica's answer: a refusal that is the client's fault (400,
413, 422, 501) is raised as the typed error, so it is a real HTTP error in the
client's dialect even for a stream; a replica that fails (refused connection,
5xx, 429, unknown model) is given up for another, until every replica was tried.
Once a replica has produced an event nothing is retried: a stream it breaks ends
with `Failed`. A replica that breaks a stream before producing anything is
replaced too, silently.

Each upstream stream is read by a task of its own that hands its events to the
generation; `cancel()` (the client left, the deadline passed) cancels those tasks,
which closes their connections, and the upstream server sees its client leave and
stops generating.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from parlance.core.embeddings import EmbeddingRequest, Embeddings, Normalize, unit
from parlance.core.errors import (
    ContextOverflow,
    EngineFailure,
    InvalidRequest,
    ModelUnloaded,
    NotImplementedHere,
    Overloaded,
    ParlanceError,
    Unavailable,
)
from parlance.core.events import Event, Failed, Progress, Usage
from parlance.core.request import ChatInput, GenerationRequest, TextInput
from parlance.engines.base import PromptInfo
from parlance.engines.metrics import EngineMetrics
from parlance.engines.upstream.affinity import prefix_keys
from parlance.engines.upstream.chunks import ChoiceMapper, StreamError, UpstreamUsage
from parlance.engines.upstream.counting import tokenizer_count
from parlance.engines.upstream.http1 import StreamResponse, UpstreamHTTPError
from parlance.engines.upstream.pool import Pool
from parlance.engines.upstream.refusals import classify, parse_body
from parlance.engines.upstream.replica import Replica
from parlance.engines.upstream.sse import DONE, SseSplitter, payloads
from parlance.engines.upstream.wire import (
    EMBEDDINGS_PATH,
    SubRequest,
    request_body,
    sub_requests,
    tool_names,
)

log = logging.getLogger("parlance.upstream")

MAX_ERROR_BODY = 64 * 1024  # of a refusal's body, read to classify it


@dataclass(slots=True)
class _Opened:
    """An upstream stream whose replica answered 200."""

    sub: SubRequest
    replica: Replica
    response: StreamResponse
    tried: list[Replica]
    body: dict[str, Any]
    started: float  # when the request was first sent (per-replica time to first token)


@dataclass(frozen=True, slots=True)
class _Done:
    """One upstream stream finished; its usage."""

    sub: SubRequest
    usage: UpstreamUsage


class UpstreamEngine:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.model = pool.model
        self.metrics = EngineMetrics()
        self.context_length = 0
        self.slots = 1
        self._live: set[UpstreamGeneration] = set()
        self._closed = False
        self.refresh()

    def refresh(self) -> None:
        """What the replicas said about themselves (the fleet calls this after each
        health check): the smallest context any replica gives this model, and the
        sequences they decode together."""
        replicas = self.pool.replicas
        lengths = [n for r in replicas if (n := r.context_lengths.get(self.model))]
        self.context_length = min(lengths) if lengths else 0
        self.slots = max(1, sum(r.slots or 1 for r in replicas))
        self.metrics.slots_total = self.slots

    # -- the engine seam ----------------------------------------------------------

    async def start(self, request: GenerationRequest) -> UpstreamGeneration:
        if self._closed:
            raise ModelUnloaded()
        subs = sub_requests(request, self.model)
        keys = {p: prefix_keys(request, prompt) for p, prompt in enumerate(request.prompts)}
        started = time.perf_counter()
        if len(subs) == 1:
            opened = [await self._open(subs[0], keys[0], clip=request.clip_to_context)]
        else:
            tasks = [asyncio.ensure_future(self._open(s, keys[s.prompt],
                                                      clip=request.clip_to_context))
                     for s in subs]
            try:
                await asyncio.wait(tasks)
            finally:  # refused, or the caller left: close what did open
                failure = next((t.exception() for t in tasks
                                if t.done() and not t.cancelled() and t.exception()), None)
                if failure is not None or not all(t.done() for t in tasks):
                    for task in tasks:
                        task.cancel()
                    for task in tasks:
                        with contextlib.suppress(BaseException):
                            await _close(await task)
            if failure is not None:
                raise failure
            opened = [t.result() for t in tasks]
        generation = UpstreamGeneration(self, request, opened, keys, _prompts(request), started)
        self._live.add(generation)
        self.metrics.requests_running = len(self._live)
        self.metrics.slots_in_use = len(self._live)
        return generation

    async def count_tokens(self, request: GenerationRequest) -> int:
        """The prompt tokens the upstream evaluates for the first prompt: by its own
        tokenizer endpoint where it has one (`counting.py`), else from the usage of a
        one-token generation, which every OpenAI-compatible server reports and which
        leaves the prompt in that replica's cache for the request to come."""
        prompt = request.prompts[0]
        replica = self.pool.choose(prefix_keys(request, prompt))
        if replica is not None:
            try:
                counted = await tokenizer_count(replica, self.model, request, prompt)
            finally:
                replica.release()
            if counted is not None:
                return counted
        counting = replace(request, n=1, logprobs=None, echo=False, max_tokens=1,
                           clip_to_context=False)
        path, body = request_body(counting, prompt, self.model)
        sub = SubRequest(path, body, 0, 0, True)
        opened = await self._open(sub, prefix_keys(request, prompt))
        mapper = ChoiceMapper(0)
        try:
            splitter = SseSplitter(opened.replica.max_event_bytes)
            raw = await opened.response.aread()
            for chunk in payloads(splitter.feed(raw) + splitter.end()):
                if chunk is not DONE:
                    mapper.feed(chunk)
        except StreamError as exc:
            raise exc.error from None
        except UpstreamHTTPError as exc:
            opened.replica.failed(at_once=True)
            raise EngineFailure(f"The upstream replica failed while counting tokens: {exc}",
                                code="upstream_disconnected") from None
        finally:
            await _close(opened)
        usage = mapper.usage()
        if not usage.reported:
            raise NotImplementedHere("The upstream server of this model does not report token "
                                     "usage, so its tokens cannot be counted.")
        return usage.prompt_tokens

    async def embed(self, request: EmbeddingRequest) -> Embeddings:
        """One vector per input from the upstream's `/v1/embeddings`."""
        inputs: list[Any] = [list(i.token_ids) if i.token_ids is not None else i.text or ""
                             for i in request.inputs]
        body: dict[str, Any] = {"model": self.model, "input": inputs,
                                "encoding_format": "float"}
        if request.dimensions is not None:
            body["dimensions"] = request.dimensions
        try:
            opened = await self._open(SubRequest(EMBEDDINGS_PATH, body, 0, 0, True), ())
        except ContextOverflow as exc:
            raise ContextOverflow(exc.message, param=request.param, code=exc.code) from None
        try:
            raw = await opened.response.aread()
        except UpstreamHTTPError as exc:
            opened.replica.failed(at_once=True)
            raise EngineFailure("The upstream replica failed while embedding: "
                                f"{type(exc).__name__}", code="upstream_disconnected") from None
        finally:
            await _close(opened)
        try:
            reply = json.loads(raw)
            data = sorted(reply["data"], key=lambda d: d["index"])
            vectors = [[float(x) for x in d["embedding"]] for d in data]
        except (ValueError, KeyError, TypeError) as exc:
            raise EngineFailure("The upstream server answered embeddings in a shape this "
                                "server does not read.", code="upstream_error") from exc
        if len(vectors) != len(inputs):
            raise EngineFailure(f"The upstream server returned {len(vectors)} vectors for "
                                f"{len(inputs)} inputs.", code="upstream_error")
        if request.dimensions is not None and any(len(v) != request.dimensions
                                                  for v in vectors):
            raise InvalidRequest(f"This model's vectors do not have {request.dimensions} "
                                 "dimensions.", param="dimensions")
        if request.normalize is Normalize.UNIT:
            vectors = [unit(v) for v in vectors]
        usage = reply.get("usage") if isinstance(reply, dict) else None
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return Embeddings(tuple(vectors), tokens if isinstance(tokens, int) else 0)

    async def aclose(self) -> None:
        self._closed = True
        for generation in list(self._live):
            generation.abort(ModelUnloaded())

    # -- opening a stream on some replica -------------------------------------------

    async def _open(self, sub: SubRequest, keys: tuple[int, ...], *, clip: bool = False,
                    tried: list[Replica] | None = None) -> _Opened:
        """Send `sub` to the best replica that has not failed it yet and wait for its
        answer; on a replica's failure, the next one."""
        tried = tried if tried is not None else []
        body = sub.body
        failure: ParlanceError | None = None
        started = time.perf_counter()
        while True:
            replica = self.pool.choose(keys, tried)
            if replica is None:
                raise self._exhausted(failure, tried)
            tried.append(replica)
            try:
                # (a timeout scope, not wait_for: no task of its own, so the request
                # is written now rather than a loop turn later)
                async with asyncio.timeout(replica.answer_timeout):
                    response = await _send(replica, sub.path, body)
            except TimeoutError:
                replica.release()
                replica.failed()
                log.warning("upstream %s did not answer %s within %ss", replica.label,
                            sub.path, replica.answer_timeout)
                failure = Unavailable("The upstream replica did not answer in time.",
                                      code="upstream_timeout")
                continue
            except UpstreamHTTPError as exc:
                replica.release()
                replica.failed(at_once=True)
                log.warning("upstream %s refused %s: %s", replica.label, sub.path, exc)
                failure = Unavailable("The upstream replica could not be reached "
                                      f"({type(exc).__name__}).", code="upstream_unreachable")
                continue
            except BaseException:
                replica.release()
                raise
            if response.status_code == 200:
                self.pool.remember(keys, replica)
                return _Opened(sub, replica, response, tried, body, started)
            try:
                raw = await response.aread(MAX_ERROR_BODY)
            except UpstreamHTTPError:
                raw = b""
            finally:
                await response.aclose()
                replica.release()
            refusal = classify(response.status_code, parse_body(raw),
                               response.headers.get("retry-after"))
            if refusal.client_fault:
                replica.succeeded()  # it answered: nothing wrong with the replica
                if isinstance(refusal.error, ContextOverflow) and clip and "max_tokens" in body:
                    # max_tokens is only a ceiling: without it the upstream stops at the
                    # end of its context, which is below the ceiling that overflowed.
                    body = {k: v for k, v in body.items() if k != "max_tokens"}
                    tried.remove(replica)
                    continue
                raise refusal.error
            if response.status_code != 429:  # a busy replica is not a broken one
                replica.failed()
            log.warning("upstream %s answered %s %s: %s", replica.label, sub.path,
                        response.status_code, refusal.error.message)
            failure = refusal.error

    def _exhausted(self, failure: ParlanceError | None, tried: list[Replica]) -> ParlanceError:
        if isinstance(failure, Overloaded):
            return failure
        replicas = self.pool.replicas
        if not replicas:
            return Unavailable(f"No upstream replica serves '{self.model}' now.",
                               code="upstream_unavailable")
        if failure is None:
            return Unavailable(f"Every upstream replica of '{self.model}' is down "
                               f"({len(replicas)} configured); retry shortly.",
                               code="upstream_unavailable")
        return Unavailable(f"No upstream replica of '{self.model}' could take the request "
                           f"({len(tried)} tried): {failure.message}",
                           code="upstream_unavailable")


def _prompts(request: GenerationRequest) -> tuple[PromptInfo, ...]:
    """The prompts as far as the gateway knows them: their text (offsets of legacy
    completions count from it); their token counts arrive with the usage."""
    out = []
    for prompt in request.prompts:
        if isinstance(prompt, ChatInput):
            out.append(PromptInfo("", 0))
        elif isinstance(prompt, TextInput):
            out.append(PromptInfo(prompt.text or "", len(prompt.token_ids or ())))
    return tuple(out)


async def _send(replica: Replica, path: str, body: dict[str, Any]) -> StreamResponse:
    return await replica.streams.post(path, json.dumps(body, ensure_ascii=False).encode())


async def _close(opened: _Opened) -> None:
    try:
        await opened.response.aclose()
    finally:
        opened.replica.release()


class UpstreamGeneration:
    """The events of every upstream stream of one request, merged; one `Usage` at the
    end. Pump tasks deliver into `_items`; the consumer waits on `_waiter`."""

    def __init__(self, engine: UpstreamEngine, request: GenerationRequest,
                 opened: list[_Opened], keys: dict[int, tuple[int, ...]],
                 prompts: tuple[PromptInfo, ...], started: float) -> None:
        self.prompts = prompts
        self._engine = engine
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
        self._items.append(Progress(0, 1, self._progress_index))
        freeform = frozenset(t.name for t in request.tools if t.freeform)
        names = tool_names(request)
        self._tasks = [asyncio.ensure_future(self._pump(o, ChoiceMapper(
            o.sub.index, stops=request.stop, freeform=freeform, names=names)))
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
            metrics = self._engine.metrics
            if self._first is None:
                self._first = now
                metrics.time_to_first_token.observe(now - self._started)
                self._items.append(Progress(1, 1, self._progress_index))
            else:
                metrics.inter_token.observe(now - self._last)
            self._last = now
        self._items.extend(events)
        self._wake()

    def _settle(self) -> None:
        if self._settled:
            return
        self._settled = True
        engine = self._engine
        engine._live.discard(self)
        engine.metrics.requests_running = len(engine._live)
        engine.metrics.slots_in_use = len(engine._live)

    def _usage(self) -> Usage:
        prompt = completion = reasoning = cached = 0
        for done in self._usages:
            if done.sub.first_of_prompt:
                prompt += done.usage.prompt_tokens
                cached += done.usage.cached_tokens
            completion += done.usage.completion_tokens
            reasoning += done.usage.reasoning_tokens
        metrics = self._engine.metrics
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

    async def _pump(self, opened: _Opened, mapper: ChoiceMapper) -> None:
        """Read one upstream stream to its end into the generation. A replica that
        breaks the stream before anything came is replaced (`_open` again)."""
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
                await _close(opened)
                self._deliver([Failed(exc.error)], generated=False)
                return
            except UpstreamHTTPError as exc:
                await _close(opened)
                replica.failed(at_once=True)
                log.warning("upstream %s broke a stream: %s", replica.label, exc)
                if not produced and not self._cancelled:
                    try:
                        opened = await self._engine._open(
                            opened.sub, self._keys[opened.sub.prompt],
                            clip=self._request.clip_to_context, tried=opened.tried)
                    except ParlanceError as error:
                        self._deliver([Failed(error)], generated=False)
                        return
                    continue
                self._deliver([Failed(EngineFailure(
                    "The upstream server of this model broke the stream before it finished.",
                    code="upstream_disconnected"))], generated=False)
                return
            except asyncio.CancelledError:
                await _close(opened)
                raise
            except Exception as exc:  # a bug here must still end the stream
                await _close(opened)
                log.exception("reading an upstream stream failed")
                self._deliver([Failed(EngineFailure(
                    f"The upstream stream could not be read: {type(exc).__name__}",
                    code="upstream_error"))], generated=False)
                return
            await _close(opened)
            if not mapper.finished and not done:
                replica.failed(at_once=True)
                self._deliver([Failed(EngineFailure(
                    "The upstream server of this model ended the stream before it finished.",
                    code="upstream_disconnected"))], generated=False)
                return
            replica.succeeded()
            usage = mapper.usage()
            replica.metrics.tokens_relayed += usage.completion_tokens
            tail = mapper.end_of_stream()
            if tail:
                self._deliver(tail)
            self._deliver([_Done(opened.sub, usage)], generated=False)
            return


"""Opening an upstream stream with failover: the request goes to the best replica that
has not failed it yet, and until one answers 200 the next replica takes it.

A refusal that is the client's fault (400, 413, 422, 501) is raised as the typed
error, so it is a real HTTP error in the client's dialect even for a stream; a
replica that fails (refused connection, no answer in time, 5xx, 429, unknown model)
is given up for another, until every replica was tried.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from parlance.core.errors import (
    ContextOverflow,
    Overloaded,
    ParlanceError,
    Unavailable,
    UpstreamFailure,
)
from parlance.engines.upstream.http1 import StreamResponse, UpstreamHTTPError
from parlance.engines.upstream.pool import Pool
from parlance.engines.upstream.refusals import classify, parse_body, upstream_message
from parlance.engines.upstream.replica import Replica
from parlance.engines.upstream.wire import SubRequest

log = logging.getLogger("parlance.upstream")

MAX_ERROR_BODY = 64 * 1024  # of a refusal's body, read to classify it


@dataclass(slots=True)
class Opened:
    """An upstream stream whose replica answered 200. It holds the replica (one of its
    outstanding requests) until `close`."""

    sub: SubRequest
    replica: Replica
    response: StreamResponse
    tried: list[Replica]  # every replica given this request so far, this one last
    body: dict[str, Any]
    started: float  # when the request was first sent (per-replica time to first token)

    async def close(self) -> None:
        try:
            await self.response.aclose()
        finally:
            self.replica.release()


class Opener:
    """Sends one model's upstream requests, each to the replicas of `pool` in turn."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.model = pool.model

    async def open(self, sub: SubRequest, keys: tuple[int, ...], *, clip: bool = False,
                   tried: list[Replica] | None = None) -> Opened:
        """Send `sub` to the best replica that has not failed it yet (none of `tried`)
        and wait for its answer; on a replica's failure, the next one. With `clip`, a
        context overflow is retried without `max_tokens` (it is only a ceiling)."""
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
                return Opened(sub, replica, response, tried, body, started)
            try:
                raw = await response.aread(MAX_ERROR_BODY)
            except UpstreamHTTPError:
                raw = b""
            finally:
                await response.aclose()
                replica.release()
            body_sent = parse_body(raw)
            refusal = classify(response.status_code, body_sent,
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
                        response.status_code, upstream_message(body_sent))
            failure = refusal.error
            if isinstance(failure, UpstreamFailure):  # which replica, not what it said
                failure = UpstreamFailure(f"The upstream replica {replica.label} answered "
                                          f"HTTP {response.status_code}.")

    async def open_all(self, subs: list[SubRequest], keys: dict[int, tuple[int, ...]], *,
                       clip: bool) -> list[Opened]:
        """Open every sub-request of one generation together: all of them, or (when
        one is refused or the caller leaves) none, closing those that did open."""
        if len(subs) == 1:
            return [await self.open(subs[0], keys[subs[0].prompt], clip=clip)]
        tasks = [asyncio.ensure_future(self.open(s, keys[s.prompt], clip=clip)) for s in subs]
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
                        await (await task).close()
        if failure is not None:
            raise failure
        return [t.result() for t in tasks]

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
        why = (f"No upstream replica of '{self.model}' could take the request "
               f"({len(tried)} tried): {failure.message}")
        if isinstance(failure, UpstreamFailure):  # it answered, with a server error: 502
            return UpstreamFailure(why, code="upstream_unavailable")
        return Unavailable(why, code="upstream_unavailable")


async def _send(replica: Replica, path: str, body: dict[str, Any]) -> StreamResponse:
    return await replica.streams.post(path, json.dumps(body, ensure_ascii=False).encode())

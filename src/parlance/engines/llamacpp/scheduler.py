"""Continuous batching: one thread owns the llama.cpp context and decodes every
running sequence together, one `llama_decode` per step.

Each step puts in one token for every sequence that is generating, then fills
the rest of the batch with prompt chunks of admitted groups (chunked prefill,
first come first served), decodes once, and samples each sequence with its own
sampler chain from its own output row. With speculation on, a sequence's token may be
followed by a draft of its next tokens (speculation.py); the draft's rows are
sampled in order, the confirmed tokens kept and the rest's cells removed. A prompt
evaluated to its end fans out to its `n` choices by copying KV cells, not by
evaluating it again. A scoring group (decisions, rerank) instead forces the tokens of
its continuations after the prompt, beside the others' rows (scoring.py).

Admission is FIFO from a wait queue bounded in sequences, not requests (full →
`Overloaded`, i.e. 429 with Retry-After). A group enters when it has slots for
all its choices and the cache has room for its prompt beside the running
sequences. A cancelled request leaves at the next step and its KV cells are
freed at once; a finished one leaves its tokens cached for the next request
sharing their prefix.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import llama_cpp

from parlance.core.errors import (
    ContextOverflow,
    EngineFailure,
    ModelUnloaded,
    Overloaded,
    ParlanceError,
)
from parlance.core.events import Failed, FinishReason, PromptProgress, Usage
from parlance.engines.llamacpp.batch import DECODED, NO_ROOM, Batch
from parlance.engines.llamacpp.draft_model import DraftModel
from parlance.engines.llamacpp.draft_plan import ModelDrafts
from parlance.engines.llamacpp.job import GroupSpec, Job
from parlance.engines.llamacpp.kv_state import copy_sequence
from parlance.engines.llamacpp.logprobs import log_softmax_row
from parlance.engines.llamacpp.model import LlamaModel
from parlance.engines.llamacpp.outbox import Outbox
from parlance.engines.llamacpp.prompt_cache import PromptCache
from parlance.engines.llamacpp.scoring import ScoreSpec
from parlance.engines.llamacpp.sequence import (
    PendingLogprob,
    Sequence,
    emit_echo,
    logprob_record,
)
from parlance.engines.llamacpp.slots import Claim, SlotTable
from parlance.engines.llamacpp.speculation import (
    NO_SPECULATION,
    Candidate,
    SpeculativeSettings,
    Speculator,
)
from parlance.engines.llamacpp.verification import verify
from parlance.engines.metrics import EngineMetrics

log = logging.getLogger(__name__)

# Prompt tokens per step while other sequences are generating: every running stream
# waits for the step, so a step's prompt chunk bounds their inter-token latency; but a
# chunk that is too small loses more than it saves. llama.cpp's CPU flash attention
# takes its tiled kernel only for 64 or more query rows of a sequence in one ubatch
# (GGML_FA_TILE_Q); below that it runs one row at a time, several times slower deep
# in a prompt, and the chunk gives one of its rows to the ubatch of the decoding
# rows. bench/prompts_beside_streams.py (8 streams of a 1,300-token prompt sent at
# once, 2 cores, quiet): 64 gave 0.70x llama-server's throughput and an inter-token
# p50 of 213 ms; 256 gave 0.98x, p50 52 ms, p99 under 0.8 s; 128 fell between and
# varied more (0.8-1.1x). llama-server fills its batch: p99 about 5 s. Alone, a prompt
# uses the whole batch.
PREFILL_WHILE_DECODING = 256


@dataclass(slots=True)
class RunningGroup:
    """An admitted group: prefilling its prompt, then generating its choices."""

    spec: GroupSpec
    claim: Claim
    admitted_at: float
    evaluated: int  # prompt tokens in the leader's cache
    prompt_logprobs: bool
    records: list[PendingLogprob] = field(default_factory=list)
    sequences: list[Sequence] = field(default_factory=list)
    scoring: ScoreSpec | None = None  # its prompt evaluated, these continuations scored

    @property
    def job(self) -> Job:
        return self.spec.job

    @property
    def prefilling(self) -> bool:
        return not self.sequences and self.scoring is None

    @property
    def finished(self) -> bool:
        if self.prefilling:
            return False
        return not self.live() and (self.scoring is None or self.scoring.done)

    def live(self) -> list[Sequence]:
        return [s for s in self.sequences if not s.finished]


@dataclass(slots=True)
class _Chunk:
    group: RunningGroup
    start: int
    count: int
    row: int  # batch row of the chunk's first token


class Scheduler:
    def __init__(self, model: LlamaModel, *, slots: int, max_waiting: int,
                 metrics: EngineMetrics | None = None, cache: PromptCache | None = None,
                 speculative: SpeculativeSettings = NO_SPECULATION,
                 draft: DraftModel | None = None) -> None:
        self.model = model
        self.slots = SlotTable(model.memory, slots, unified=model.settings.kv_unified,
                               copy=functools.partial(copy_sequence, model), cache=cache)
        self.metrics = metrics or EngineMetrics(slots_total=slots)
        self.draft = draft  # the draft model (`draft` mode), its streams beside the slots
        self.speculator = Speculator(speculative, self.metrics, None if draft is None else
                                     ModelDrafts.of(draft, model, speculative))
        self.outbox = Outbox()
        self.max_waiting = max_waiting
        self._batch = Batch(model.settings.n_batch)
        self._waiting: deque[GroupSpec] = deque()
        self._active: list[RunningGroup] = []
        self._wake = threading.Condition()
        self._closing = False
        self._lost: ParlanceError | None = None  # see abandon()
        self._clear_requests: list[threading.Event] = []
        self._service_seconds = 1.0  # moving average of a group's time in the engine
        self._busy = False  # requests running, as the prompt cache's writer last heard
        self._thread = threading.Thread(target=self._run, name="parlance-scheduler", daemon=True)
        self._thread.start()

    # -- any thread ---------------------------------------------------------------

    def submit(self, job: Job) -> None:
        with self._wake:
            if self._lost is not None:
                raise self._lost
            if self._closing:
                raise EngineFailure("The engine is shutting down.")
            waiting = self._waiting_sequences()
            if waiting + sum(g.n for g in job.groups) > self.max_waiting:
                self.metrics.requests_rejected += 1
                raise Overloaded(
                    f"The server is busy: {waiting} sequences are waiting for "
                    f"{len(self.slots.slots)} slots. Retry shortly.",
                    retry_after=self._retry_after(),
                )
            self._waiting.extend(job.groups)
            self.metrics.requests_waiting = len({g.job for g in self._waiting})
            self._wake.notify()

    def clear_cache(self) -> threading.Event:
        """Ask for every cached prefix to be dropped once no request is running; the
        event is set when done (tests that need a prompt evaluated cold start here).
        The prompt cache's disk tier keeps its files."""
        done = threading.Event()
        with self._wake:
            self._clear_requests.append(done)
            self._wake.notify()
        return done

    def wake(self) -> None:
        with self._wake:
            self._wake.notify()

    def close(self) -> bool:
        """Cancel everything and stop; True once the thread has ended."""
        if self._lost is not None:
            return False  # the thread is stuck for good in llama.cpp
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join(timeout=30)
        return not self._thread.is_alive()

    def abandon(self, error: ParlanceError) -> None:
        """From any thread, when the scheduler thread is stuck for good in llama.cpp (an
        RPC server holding layers was lost: llama.cpp waits for it forever). Every
        running and waiting job ends now with `error`, as does every later submit; the
        model is never freed under the stuck decode."""
        # The stuck thread may hold the lock (a cache clear on the lost server): then
        # it mutates nothing any more, and the jobs are read without it.
        locked = self._wake.acquire(timeout=1.0)
        try:
            self._lost = error
            self._closing = True
            for job in {g.job for g in list(self._active)} | {g.job for g in list(self._waiting)}:
                if not job.cancelled and not job.done.is_set():
                    job.end_now(Failed(error))  # before anything the thread may still send
            if locked:
                self._wake.notify()
        finally:
            if locked:
                self._wake.release()

    def _waiting_sequences(self) -> int:
        """What the wait queue holds, counted in sequences (a group has `n`): a request
        with many prompts or choices takes its full share of the bound."""
        return sum(g.n for g in self._waiting)

    def _retry_after(self) -> float:
        rounds = (self._waiting_sequences() + 1) / max(1, len(self.slots.slots))
        return float(max(1, math.ceil(self._service_seconds * rounds)))

    # -- scheduler thread -----------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._next_round():
                try:
                    self._step()
                except Exception as exc:  # every stream must still end by its contract
                    self._fail_all(exc)
        finally:
            self._shutdown()

    def _next_round(self) -> bool:
        """Drop cancelled work, admit what fits; block while there is nothing to do."""
        with self._wake:
            while True:
                if self._closing:
                    return False
                self._drop_cancelled()
                if self._clear_requests and not self._active:
                    self._clear_slots()
                    for done in self._clear_requests:
                        done.set()
                    self._clear_requests.clear()
                self._admit()
                self._publish()
                self._tell_cache(busy=bool(self._active))
                if self._active:
                    return True  # the step flushes the outbox just before it decodes
                self.outbox.flush()
                self._wake.wait()

    def _tell_cache(self, *, busy: bool) -> None:
        if busy != self._busy and self.slots.cache is not None:
            self.slots.cache.engine_busy(busy)
        self._busy = busy

    def _drop_cancelled(self) -> None:
        """A cancelled job's slots are freed; what it evaluated stays cached (the slots'
        bookkeeping is exact between steps), so a client that gives up and sends the
        request again (Claude Code after its 5-minute stream watchdog, a reconnecting
        agent) resumes the prompt where the first attempt stopped."""
        for job in {g.job for g in self._active} | {g.job for g in self._waiting}:
            if job.cancelled:
                self._drop_job(job, keep_cache=True)

    def _drop_job(self, job: Job, *, keep_cache: bool) -> None:
        for group in [g for g in self._active if g.job is job]:
            self._release(group, keep_cache=keep_cache)
        self._waiting = deque(g for g in self._waiting if g.job is not job)
        if not job.done.is_set():
            job.close()

    def _admit(self) -> None:
        while self._waiting:
            spec = self._waiting[0]
            if spec.n > self.slots.free:
                return
            if (self.model.settings.kv_unified and self._active
                    and self.slots.cells_in_use() + len(spec.tokens) > self.model.n_cells):
                return  # wait until running sequences leave room in the shared cache
            prompt_logprobs = spec.job.echo and spec.job.logprobs is not None
            if self.slots.fetching(spec.tokens, reuse=not prompt_logprobs, ready=self.wake):
                return  # its prefix is being read from disk; running streams go on
            self._waiting.popleft()
            claim = self.slots.claim(spec.tokens, spec.n, reuse=not prompt_logprobs)
            if claim.reused:
                self.metrics.prefix_cache_hits += 1
                self.metrics.prompt_tokens_cached += claim.reused
            spec.job.started = True
            spec.job.cached_tokens += claim.reused
            self._active.append(RunningGroup(spec, claim, time.perf_counter(), claim.reused,
                                             prompt_logprobs))

    def _step(self) -> None:
        batch = self._batch
        batch.clear()
        # In slot order: with a KV stream per slot llama.cpp evaluates together only
        # sequences of consecutive ids in batch order (one pass over the weights each).
        decoding = sorted((s for g in self._active for s in g.sequences
                           if s.pending is not None), key=lambda s: s.slot)
        rows = []
        for seq, draft in zip(decoding, self._drafts(decoding), strict=True):
            row = batch.add(seq.pending, seq.n_past, seq.slot, output=True)  # type: ignore[arg-type]
            for i, token in enumerate(draft, start=1):
                batch.add(token, seq.n_past + i, seq.slot, output=True)
            rows.append((seq, row, draft))
        scoring = [(g, g.scoring) for g in self._active if g.scoring is not None]
        for group, score in scoring:
            claim = group.claim
            score.fill(batch, [claim.leader.id, *(f.id for f in claim.followers)],
                       len(group.spec.tokens))
        chunks = []
        budget = min(batch.room, PREFILL_WHILE_DECODING) if batch.size else batch.room
        for group in self._active:
            if not group.prefilling or budget == 0:
                continue
            tokens, start = group.spec.tokens, group.evaluated
            count = min(budget, len(tokens) - start)
            budget -= count
            chunks.append(_Chunk(group, start, count, batch.size))
            last = len(tokens) - 1
            for pos in range(start, start + count):
                batch.add(tokens[pos], pos, group.claim.leader.id,
                          output=group.prompt_logprobs or pos == last)
        if not self._decode():
            for group, score in scoring:
                if group in self._active:
                    score.not_decoded()
            return
        for seq, row, draft in rows:
            self._advance(seq, row, draft)
        for group, score in scoring:
            score.read(self.model, len(group.spec.tokens))
        for chunk in chunks:
            self._prefilled(chunk)
        for group in [g for g in self._active if g.finished]:
            self._retire(group, keep_cache=True)

    def _decode(self) -> bool:
        """One `llama_decode`; makes room by evicting cached prefixes, then by cutting
        the newest request short. False when this step's batch was not decoded.

        The previous step's events leave just before: the event loop wakes while
        this thread is in llama.cpp without the GIL, instead of blocking on the GIL
        while this thread still prepares the batch."""
        self.outbox.flush()
        while (code := self._batch.decode(self.model.ctx)) == NO_ROOM:
            if not self.slots.evict_one():
                self._shed_newest()
                return False
        if code != DECODED:
            raise EngineFailure(f"llama_decode failed with status {code}")
        return True

    def _shed_newest(self) -> None:
        group = self._active[-1]
        if group.prefilling or group.scoring is not None:
            group.job.emit(Failed(ContextOverflow(
                "The server's context cache is full; the request could not be evaluated.",
                code="context_length_exceeded")))
            self._drop_job(group.job, keep_cache=False)
            return
        for seq in group.live():
            seq.finish(FinishReason.LENGTH)
        self._retire(group, keep_cache=False)

    def _drafts(self, decoding: list[Sequence]) -> list[list[int]]:
        """Each decoding sequence's draft for this step ([] for most); `decoding` in slot
        order."""
        if not any(s.draft is not None for s in decoding):
            return [[] for _ in decoding]
        candidates = [Candidate(s.slot, s.draft, s.draft_limit() if s.draft else 0,
                                s.tokens, s.screen_draft) for s in decoding]
        return self.speculator.plan(candidates, self._batch.room - len(decoding),
                                    unified=self.model.settings.kv_unified)

    def _advance(self, seq: Sequence, row: int, draft: list[int]) -> None:
        """The pending token was decoded at `row`, followed by `draft`: keep the draft's
        tokens the sequence's own sampling confirms, one row each, and remove the
        cells of the rest."""
        slot = self.slots.slots[seq.slot]
        # Greedy picks every row's token in one pass; a sampling chain goes row by row.
        picks = seq.sampler.picks(self.model, row, len(draft) + 1) if draft else None

        def sample(position: int) -> int | None:
            slot.tokens.append(seq.pending)  # type: ignore[arg-type]
            seq.n_past += 1
            self._sample(seq, row + position, None if picks is None else picks[position])
            return seq.pending

        accepted = verify(draft, sample)
        if not draft:
            return
        if accepted < len(draft) or seq.finished:
            llama_cpp.llama_memory_seq_rm(self.model.memory, seq.slot, seq.n_past, -1)
        self.speculator.record(seq.draft, len(draft), accepted)  # type: ignore[arg-type]

    def _sample(self, seq: Sequence, row: int, picked: int | None = None) -> None:
        before, generated = seq.last_token_at, seq.generated
        seq.sample(row, picked)
        metrics = self.metrics
        metrics.tokens_generated += seq.generated - generated
        now = seq.last_token_at
        if now is None:  # never: sample() stamps it
            return
        if before is None:
            metrics.time_to_first_token.observe(now - seq.job.created)
        else:
            metrics.inter_token.observe(now - before)

    def _prefilled(self, chunk: _Chunk) -> None:
        group, spec = chunk.group, chunk.group.spec
        end = chunk.start + chunk.count
        group.claim.leader.tokens.extend(spec.tokens[chunk.start:end])
        group.evaluated = end
        self.metrics.prompt_tokens_evaluated += chunk.count
        if group.prompt_logprobs:
            group.records += self._prompt_logprobs(group, chunk)
        group.job.emit(PromptProgress(end, len(spec.tokens), index=spec.indices[0]))
        if end == len(spec.tokens):
            if spec.score is not None:
                self._start_scoring(group, spec.score, chunk.row + chunk.count - 1)
            else:
                self._start_choices(group, chunk.row + chunk.count - 1)

    def _prompt_logprobs(self, group: RunningGroup, chunk: _Chunk) -> list[PendingLogprob]:
        model, tokens, job = self.model, group.spec.tokens, group.job
        records = [] if chunk.start else [PendingLogprob(None, model.piece(tokens[0]))]
        for i in range(chunk.count - 1 if chunk.start + chunk.count == len(tokens) else
                       chunk.count):
            row = log_softmax_row(model.logits(chunk.row + i))
            records.append(logprob_record(model, row, tokens[chunk.start + i + 1],
                                          job.logprobs or 0))
        return records

    def _start_scoring(self, group: RunningGroup, score: ScoreSpec, row: int) -> None:
        """The prompt's last row scores every continuation's first token; the prompt's
        cells go to the group's other slots for the continuations to force (scoring.py)."""
        claim = group.claim
        score.first(log_softmax_row(self.model.logits(row)))
        if score.pending:
            self.slots.fork(claim.leader, claim.followers)
        group.scoring = score

    def _start_choices(self, group: RunningGroup, row: int) -> None:
        spec, claim = group.spec, group.claim
        self.slots.fork(claim.leader, claim.followers)
        slots = [claim.leader, *claim.followers]
        group.sequences = [
            Sequence(self.model, spec.job, index, slot.id, sampler, spec.max_tokens,
                     n_past=len(spec.tokens),
                     guide=spec.plan.for_choice(index) if spec.plan else None)
            for index, slot, sampler in zip(spec.indices, slots, spec.samplers, strict=True)
        ]
        if spec.drafter is not None:
            drafts = self.speculator.start(spec.drafter, len(group.sequences))
            for seq, draft in zip(group.sequences, drafts, strict=True):
                seq.draft = draft
        for seq in group.sequences:
            if spec.job.echo:
                emit_echo(self.model, spec.job, seq.index, spec.tokens, group.records)
            if spec.max_tokens == 0:
                seq.finish(FinishReason.LENGTH)
            else:
                self._sample(seq, row)

    def _retire(self, group: RunningGroup, *, keep_cache: bool) -> None:
        job = group.job
        self._release(group, keep_cache=keep_cache)
        alpha = 0.2
        spent = time.perf_counter() - group.admitted_at
        self._service_seconds = (1 - alpha) * self._service_seconds + alpha * spent
        job.finished_groups.append(group.sequences)
        if len(job.finished_groups) == len(job.groups):
            job.emit(_usage(job))
            job.close()

    def _release(self, group: RunningGroup, *, keep_cache: bool) -> None:
        self._active.remove(group)
        for slot in [group.claim.leader, *group.claim.followers]:
            self.slots.release(slot, keep=keep_cache)

    def _fail_all(self, exc: Exception) -> None:
        error = exc if isinstance(exc, ParlanceError) else EngineFailure(
            f"The engine failed: {exc}")
        for job in {g.job for g in self._active}:
            job.emit(Failed(error))
            self._drop_job(job, keep_cache=False)
        self._clear_slots()

    def _clear_slots(self) -> None:
        self.slots.clear()
        if self.draft is not None:
            self.draft.clear()

    def _publish(self) -> None:
        metrics = self.metrics
        metrics.slots_in_use = self.slots.busy
        metrics.requests_running = len({g.job for g in self._active})
        metrics.requests_waiting = len({g.job for g in self._waiting})

    def _shutdown(self) -> None:
        """Every job still running or waiting ends with `Failed(ModelUnloaded)`: a stream
        cut short by an unload must not read as one that finished."""
        with self._wake:
            self._closing = True
            jobs = {g.job for g in self._active} | {g.job for g in self._waiting}
            for job in jobs:
                if not job.cancelled and not job.done.is_set():
                    job.emit(Failed(ModelUnloaded()))
                job.cancel()
                self._drop_job(job, keep_cache=False)
            self._publish()
            self.outbox.flush()
        self._keep_prefixes()
        self._batch.free()

    def _keep_prefixes(self) -> None:
        """The cached prefixes go to the prompt cache's disk tier before the context
        goes; a failure there must not keep the model from being freed."""
        cache = self.slots.cache
        if cache is None:
            return
        try:
            self.slots.flush()
        except Exception:  # the cache is an optimization; the shutdown goes on
            log.exception("prompt cache: could not save the slots' prefixes")
        cache.close()


def _usage(job: Job) -> Usage:
    sequences = [s for group in job.finished_groups for s in group]
    firsts = [s.first_token_at for s in sequences if s.first_token_at is not None]
    lasts = [s.last_token_at for s in sequences if s.last_token_at is not None]
    return Usage(
        prompt_tokens=sum(len(g.tokens) for g in job.groups),
        completion_tokens=sum(s.generated for s in sequences),
        reasoning_tokens=sum(s.reasoning_tokens for s in sequences),
        cached_tokens=job.cached_tokens,
        first_token_seconds=(min(firsts) - job.created) if firsts else None,
        decode_seconds=(max(lasts) - min(firsts)) if firsts else None,
    )

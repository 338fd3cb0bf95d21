"""The decode loop for one sequence on the single llama.cpp context.

Prefill in chunks of `n_batch` (checking for cancellation and reporting
progress between chunks), then sample → detokenize (UTF-8 safe) → hold back
possible stop strings → emit, one token per step. The KV cache keeps the last
sequence so that a prompt sharing its prefix only evaluates the new suffix.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import llama_cpp

from parlance.core.errors import EngineFailure
from parlance.core.events import Finish, FinishReason, Progress, TextDelta, TokenLogprob
from parlance.engines.llamacpp.job import Job, SequenceSpec
from parlance.engines.llamacpp.logprobs import log_softmax_row, top_alternatives
from parlance.engines.llamacpp.model import LlamaModel
from parlance.engines.text import Piece, StopMatcher, Utf8Stream

LAST_OUTPUT = -1


@dataclass(slots=True)
class SequenceStats:
    prompt_tokens: int
    generated: int = 0
    first_token_at: float | None = None
    last_token_at: float | None = None


@dataclass(slots=True)
class _Pending:
    """A token's logprob data waiting for its final text (stops may cut it)."""

    logprob: float | None
    raw: bytes
    top: tuple = ()


@dataclass(slots=True)
class _Emitter:
    """Merges released pieces into TextDeltas; empty-text tokens ride with the next one."""

    job: Job
    index: int
    carry: list[TokenLogprob] = field(default_factory=list)

    def send(self, pieces: list[Piece[_Pending | None]], *, final: bool = False) -> None:
        text = "".join(p.text for p in pieces)
        if self.job.logprobs is not None:
            self.carry += [
                TokenLogprob(p.text, p.payload.logprob,
                             tuple(p.text.encode() if p.cut else p.payload.raw), p.payload.top)
                for p in pieces if p.payload is not None
            ]
        if not text and not (final and self.carry):
            return
        logprobs = tuple(self.carry) if self.job.logprobs is not None else None
        self.carry = []
        self.job.emit(TextDelta(text, index=self.index, logprobs=logprobs))


class SequenceRunner:
    """Runs sequences one after another, reusing the KV prefix between them."""

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self.batch = llama_cpp.llama_batch_init(model.settings.n_batch, 0, 1)
        self.cached: list[int] = []  # tokens whose KV entries are in sequence 0

    def close(self) -> None:
        llama_cpp.llama_batch_free(self.batch)

    def run(self, job: Job, seq: SequenceSpec) -> SequenceStats | None:
        """Generate one choice; None when the job was cancelled on the way."""
        want_prompt_logprobs = seq.echo and job.logprobs is not None
        reuse = 0 if want_prompt_logprobs else self._reusable_prefix(seq.tokens)
        echo_records = self._prefill(job, seq, reuse, want_prompt_logprobs)
        if echo_records is None:
            return None
        if seq.echo:
            self._emit_echo(job, seq, echo_records)
        return self._generate(job, seq)

    # -- prompt -----------------------------------------------------------------

    def _reusable_prefix(self, tokens: list[int]) -> int:
        common = 0
        for a, b in zip(self.cached, tokens):
            if a != b:
                break
            common += 1
        return min(common, len(tokens) - 1)  # always evaluate one token for fresh logits

    def _prefill(
        self, job: Job, seq: SequenceSpec, reuse: int, all_logits: bool
    ) -> list[_Pending] | None:
        model, tokens = self.model, seq.tokens
        llama_cpp.llama_memory_seq_rm(model.memory, 0, reuse, -1)
        self.cached = tokens[:reuse]
        records: list[_Pending] = []
        n_batch = model.settings.n_batch
        for start in range(reuse, len(tokens), n_batch):
            if job.cancelled:
                return None
            chunk = tokens[start : start + n_batch]
            self._fill(chunk, start, all_logits=all_logits, last=len(tokens) - 1)
            self._decode()
            self.cached += chunk
            if all_logits:
                records += self._prompt_logprobs(job, tokens, start, len(chunk))
            job.emit(Progress(start + len(chunk), len(tokens), index=seq.index))
        return records

    def _prompt_logprobs(self, job: Job, tokens: list[int], start: int, size: int) -> list[_Pending]:
        records = [] if start else [_Pending(None, self.model.piece(tokens[0]))]
        for i in range(size):
            nxt = start + i + 1
            if nxt >= len(tokens):
                break
            row = log_softmax_row(self.model.ctx, i, self.model.n_vocab)
            records.append(self._record(job, row, tokens[nxt]))
        return records

    def _emit_echo(self, job: Job, seq: SequenceSpec, records: list[_Pending]) -> None:
        utf8 = Utf8Stream()
        pieces: list[Piece[_Pending | None]] = []
        for position, token in enumerate(seq.tokens):
            payload = records[position] if records else None
            pieces.append(Piece(utf8.push(self.model.piece(token)), payload))
        pieces.append(Piece(utf8.flush(), None))
        _Emitter(job, seq.index).send(pieces, final=True)

    # -- generation -------------------------------------------------------------

    def _generate(self, job: Job, seq: SequenceSpec) -> SequenceStats | None:
        model = self.model
        stats = SequenceStats(prompt_tokens=len(seq.tokens))
        utf8, stops = Utf8Stream(), StopMatcher[_Pending | None](job.stop)
        emitter = _Emitter(job, seq.index)
        position = len(seq.tokens)
        reason = FinishReason.LENGTH
        while seq.max_tokens > 0:
            if job.cancelled:
                return None
            token = seq.sampler.sample(model.ctx, LAST_OUTPUT)
            now = time.perf_counter()
            stats.first_token_at = stats.first_token_at or now
            stats.last_token_at = now
            if model.is_eog(token):
                reason = FinishReason.STOP
                break
            stats.generated += 1
            record = None
            if job.logprobs is not None:
                row = log_softmax_row(model.ctx, LAST_OUTPUT, model.n_vocab)
                record = self._record(job, row, token)
            emitter.send(stops.push(utf8.push(model.piece(token)), record))
            if stops.stopped:
                reason = FinishReason.STOP
                break
            if stats.generated >= seq.max_tokens or position + 1 >= model.n_ctx:
                break
            self._fill([token], position, all_logits=False, last=position)
            self._decode()
            self.cached.append(token)
            position += 1
        if not stops.stopped:
            tail = utf8.flush()
            emitter.send(stops.push(tail, None) if tail else [])
            emitter.send(stops.flush(), final=True)
        job.emit(Finish(reason, index=seq.index))
        return stats

    def _record(self, job: Job, row, token: int) -> _Pending:
        top = top_alternatives(row, job.logprobs or 0, self._describe)
        return _Pending(float(row[token]), self.model.piece(token), top)

    def _describe(self, token: int) -> tuple[str, bytes]:
        raw = self.model.piece(token)
        return raw.decode("utf-8", errors="replace"), raw

    # -- llama.cpp batch --------------------------------------------------------

    def _fill(self, tokens: list[int], start: int, *, all_logits: bool, last: int) -> None:
        batch = self.batch
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = all_logits or start + i == last
        batch.n_tokens = len(tokens)

    def _decode(self) -> None:
        code = llama_cpp.llama_decode(self.model.ctx, self.batch)
        if code != 0:
            self.cached = []
            llama_cpp.llama_memory_clear(self.model.memory, True)
            raise EngineFailure(f"llama_decode failed with status {code}")

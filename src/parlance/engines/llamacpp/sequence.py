"""One choice being generated: sampled tokens → UTF-8-safe text → stop strings →
events. Knows nothing of batches or slots; the scheduler feeds it tokens.

Stop strings are held back until they can no longer match, a multi-byte
character is never split across deltas, and logprob records ride with the
text they belong to (a token that yields no text yet rides with the next one).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from parlance.core.events import Event, Failed, Finish, FinishReason, TextDelta, TokenLogprob
from parlance.engines.llamacpp.guide import ChoiceGuide
from parlance.engines.llamacpp.job import Job
from parlance.engines.llamacpp.logprobs import log_softmax_row, top_alternatives
from parlance.engines.llamacpp.model import LlamaModel
from parlance.engines.llamacpp.sampler import SamplerChain
from parlance.engines.llamacpp.speculation import SequenceDraft
from parlance.engines.parsing.output import Mode, OutputParser
from parlance.engines.text import Piece, StopMatcher, Utf8Stream


@dataclass(slots=True)
class PendingLogprob:
    """A token's logprob data waiting for its final text (stops may cut it)."""

    logprob: float | None
    raw: bytes
    top: tuple = ()


def logprob_record(model: LlamaModel, row: np.ndarray, token: int, top_k: int) -> PendingLogprob:
    def describe(alt: int) -> tuple[str, bytes]:
        raw = model.piece(alt)
        return raw.decode("utf-8", errors="replace"), raw

    return PendingLogprob(float(row[token]), model.piece(token),
                          top_alternatives(row, top_k, describe))


@dataclass(slots=True)
class Emitter:
    """Merges released pieces into TextDeltas; empty-text tokens ride with the next one.

    With a parser, the text is split into content, reasoning and tool-call events;
    logprobs then ride with the content they belong to (a token that ends up in
    reasoning or a call has no logprob entry, as in OpenAI's `logprobs.content`).
    """

    job: Job
    index: int
    parser: OutputParser | None = None
    carry: list[TokenLogprob] = field(default_factory=list)

    def send(self, pieces: list[Piece[PendingLogprob | None]], *, final: bool = False) -> None:
        text = "".join(p.text for p in pieces)
        if self.job.logprobs is not None:
            self.carry += [
                TokenLogprob(p.text, p.payload.logprob,
                             tuple(p.text.encode() if p.cut else p.payload.raw), p.payload.top)
                for p in pieces if p.payload is not None
            ]
        if self.parser is not None:
            self._parsed(self.parser.push(text) if text else [])
            return
        if not text and not (final and self.carry):
            return
        logprobs = tuple(self.carry) if self.job.logprobs is not None else None
        self.carry = []
        self.job.emit(TextDelta(text, index=self.index, logprobs=logprobs))

    def close(self) -> None:
        """The output ended: release what the parser still holds."""
        if self.parser is not None:
            self._parsed(self.parser.finish())

    def _parsed(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, TextDelta) and self.job.logprobs is not None:
                event = TextDelta(event.text, event.index, tuple(self.carry))
                self.carry = []
            self.job.emit(event)
        if self.parser is not None and self.parser.mode is not Mode.CONTENT:
            self.carry = []


def emit_echo(model: LlamaModel, job: Job, index: int, tokens: list[int],
              records: list[PendingLogprob]) -> None:
    """The prompt as the first delta of a choice (legacy completions `echo`)."""
    utf8 = Utf8Stream()
    pieces: list[Piece[PendingLogprob | None]] = []
    for position, token in enumerate(tokens):
        payload = records[position] if records else None
        pieces.append(Piece(utf8.push(model.piece(token)), payload))
    pieces.append(Piece(utf8.flush(), None))
    Emitter(job, index).send(pieces, final=True)


class Sequence:
    """The state of one choice: where it is in the KV cache and what it has said."""

    __slots__ = ("job", "index", "slot", "sampler", "max_tokens", "n_past", "pending",
                 "generated", "reasoning_tokens", "first_token_at", "last_token_at",
                 "finished", "tokens", "_model", "_utf8", "_stops", "_emitter", "_guide",
                 "_forced", "draft")

    def __init__(self, model: LlamaModel, job: Job, index: int, slot: int,
                 sampler: SamplerChain, max_tokens: int, n_past: int,
                 guide: ChoiceGuide | None = None) -> None:
        self.job, self.index, self.slot = job, index, slot
        self.sampler, self.max_tokens = sampler, max_tokens
        self.n_past = n_past  # tokens of this sequence in the KV cache
        self.pending: int | None = None  # sampled, not yet decoded
        self.generated = 0
        self.reasoning_tokens = 0
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.finished = False
        self.tokens: list[int] = []  # what it generated (its Finish reports them)
        self._model = model
        self._utf8 = Utf8Stream()
        self._stops = StopMatcher[PendingLogprob | None](job.stop)
        self._guide = guide
        self._emitter = Emitter(job, index, guide.parser if guide else None)
        # Tokens to write instead of sampling: the end of reasoning once its budget is
        # spent (None until then; it is spent once).
        self._forced: list[int] | None = None
        self.draft: SequenceDraft | None = None  # its speculative drafting, when on

    def draft_limit(self) -> int:
        """The most draft tokens it may verify in one step: never past its token budget
        or its context, and none while the engine writes tokens itself."""
        if self._forced:
            return 0
        return min(self.max_tokens - self.generated - 1, self._model.n_ctx - self.n_past - 2)

    def screen_draft(self, draft: list[int]) -> list[int]:
        """The draft cut before the first token its active grammar refuses: verification
        could never accept that token nor anything after it."""
        if self._guide is None or not draft:
            return draft
        return draft[:self._guide.valid_prefix(draft)]

    def sample(self, output: int, picked: int | None = None) -> bool:
        """Sample from batch output row `output`; True while the sequence goes on.
        `picked`: the greedy sampler's token of that row, already found (a draft's rows
        are picked in one pass)."""
        model, guide = self._model, self._guide
        if self._forced:
            token = self._forced.pop(0)
            self.sampler.accept(token)
        elif guide:
            token = self._constrained_sample(output, picked)
            if guide.broken is not None:  # it allowed no token: nothing sampled counts
                self.job.emit(Failed(guide.broken))
                return self.finish(FinishReason.STOP)
        else:
            token = picked if picked is not None else self.sampler.sample(model, output)
        now = time.perf_counter()
        self.first_token_at = self.first_token_at or now
        self.last_token_at = now
        if model.is_eog(token) or (guide is not None and token in guide.plan.stop_tokens):
            return self.finish(FinishReason.STOP)
        self.generated += 1
        self.tokens.append(token)
        record = None
        if self.job.logprobs is not None:
            row = log_softmax_row(model.logits(output))
            record = logprob_record(model, row, token, self.job.logprobs)
        spelled = guide is not None and token in guide.plan.spelled  # a format's marker
        text = self._utf8.push(model.piece(token, special=spelled))
        reasoning = guide is not None and guide.parser.mode is Mode.REASONING
        self._emitter.send(self._stops.push(text, record))
        if guide is not None:
            if reasoning or guide.parser.mode is Mode.REASONING:
                self.reasoning_tokens += 1
            if self._forced is None and guide.over_budget(self.reasoning_tokens):
                self._forced = list(guide.plan.reasoning_end)
            if guide.parser.ended:  # it repeated a call word for word: nothing more to say
                return self.finish(FinishReason.STOP)
            if guide.accept(token, text):  # a forced grammar is complete
                return self.finish(FinishReason.STOP)
            if guide.broken is not None:  # the request fails: its consumer stops here
                self.job.emit(Failed(guide.broken))
                return self.finish(FinishReason.STOP)
        if self._stops.stopped:
            return self.finish(FinishReason.STOP)
        if self.generated >= self.max_tokens or self.n_past + 1 >= model.n_ctx:
            return self.finish(FinishReason.LENGTH)
        self.pending = token
        return True

    def _constrained_sample(self, output: int, picked: int | None) -> int:
        """Mask the row, then sample; a greedy pick the grammar allows needs no mask
        (see constraint.py; logprobs must come from the masked row, so they mask)."""
        guide, model = self._guide, self._model
        if self.sampler.stateless and self.job.logprobs is None:
            token = picked if picked is not None else self.sampler.sample(model, output)
            if guide.allows(token):  # type: ignore[union-attr]
                return token
        guide.mask(model.logits(output))  # type: ignore[union-attr]
        return self.sampler.sample(model, output)

    def finish(self, reason: FinishReason) -> bool:
        """Release held-back text and say why the choice ended; returns False."""
        if not self._stops.stopped:
            tail = self._utf8.flush()
            self._emitter.send(self._stops.push(tail, None) if tail else [])
            self._emitter.send(self._stops.flush(), final=True)
        self._emitter.close()
        if self._emitter.parser is not None:
            reason = self._emitter.parser.finish_reason(reason)
        self.job.emit(Finish(reason, index=self.index, stop_sequence=self._stops.matched,
                             token_ids=tuple(self.tokens)))
        self.finished, self.pending = True, None
        return False

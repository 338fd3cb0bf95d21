"""A draft model for speculative decoding: a second, smaller model of the same
vocabulary, in a llama.cpp context of its own, that guesses each drafting sequence's
next tokens greedily.

It has one job: keep each slot's draft KV stream in step with what that slot's
sequence holds (prompt and generated tokens), and propose k greedy tokens per
drafting sequence, every drafting sequence advancing together in one `llama_decode`
per draft position. A stream is synced by its common prefix with the sequence: cells
past it (rejected guesses, an earlier request's tail) are removed and what is missing
is evaluated, batched across slots, so a prefix the target restored from the prompt
cache, a cancelled sequence's slot taken by another, or the choices of `n` forked
from one prompt (copied from another stream when that saves tokens) all come right by
themselves. The draft only guesses: the target verifies every token, so a stale or
failed draft costs speed, never a different answer.

A guess is the draft's argmax: a point mass, for which verification.py's argument
holds (sampling with speculation keeps the target's distribution).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

from parlance.core.errors import EngineFailure, InvalidRequest
from parlance.engines.llamacpp.batch import DECODED, Batch
from parlance.engines.llamacpp.kv_state import copy_sequence
from parlance.engines.llamacpp.model import ContextSettings, LlamaModel
from parlance.engines.llamacpp.prompt_cache_entry import common_prefix
from parlance.engines.llamacpp.slots import MIN_STREAM_COPY

log = logging.getLogger(__name__)

# llama.cpp's own rule for a draft model (common/speculative.cpp): the vocabularies may
# differ in size by this many tokens, and every token text from this id on that both
# have must be equal (the first few are control tokens models number differently).
MAX_VOCAB_DIFFERENCE = 128
FIRST_CHECKED_TOKEN = 5


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """What decides whether two models' token ids mean the same text."""

    kind: int  # llama_vocab_type
    size: int
    add_bos: bool
    bos: int
    add_eos: bool
    eos: int
    text: Callable[[int], bytes]  # a token's text as the vocabulary stores it

    @classmethod
    def of(cls, model: LlamaModel) -> Vocabulary:
        vocab = model.vocab
        return cls(kind=llama_cpp.llama_vocab_type(vocab), size=model.n_vocab,
                   add_bos=bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
                   bos=llama_cpp.llama_vocab_bos(vocab),
                   add_eos=bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
                   eos=llama_cpp.llama_vocab_eos(vocab),
                   text=lambda token: llama_cpp.llama_vocab_get_text(vocab, token) or b"")


def vocabulary_mismatch(target: Vocabulary, draft: Vocabulary) -> str | None:
    """Why the draft's tokens cannot be verified as the target's (None: they can), by
    llama.cpp's rules for a draft model."""
    if target.kind != draft.kind:
        return f"its tokenizer is of another kind (type {draft.kind}, not {target.kind})"
    if target.add_bos != draft.add_bos or (target.add_bos and target.bos != draft.bos):
        return "it begins a text with another token"
    if target.add_eos != draft.add_eos or (target.add_eos and target.eos != draft.eos):
        return "it ends a text with another token"
    if abs(target.size - draft.size) > MAX_VOCAB_DIFFERENCE:
        return (f"it has {draft.size} tokens, the model {target.size} (at most "
                f"{MAX_VOCAB_DIFFERENCE} may differ)")
    for token in range(FIRST_CHECKED_TOKEN, min(target.size, draft.size)):
        if target.text(token) != draft.text(token):
            return (f"token {token} is {draft.text(token)!r} in it, "
                    f"{target.text(token)!r} in the model")
    return None


def weights_bytes(model: LlamaModel) -> int:
    """What a decode step of `model` reads: all of its weights."""
    return int(llama_cpp.llama_model_size(model.model))


class DraftFailed(Exception):
    """A draft decode failed: this step goes without drafts."""


class DraftModel:
    """The draft model's context, driven by the scheduler thread alone."""

    def __init__(self, model: LlamaModel, target_vocab: int) -> None:
        self.model = model
        self._target_vocab = target_vocab  # a guess past it is no token of the target
        self._held: list[list[int]] = [[] for _ in range(model.settings.parallel)]
        # (llama.cpp takes no more tokens a decode than its context's cells)
        self._batch = Batch(llama_cpp.llama_n_batch(model.ctx))
        self.failures = 0

    @classmethod
    def load(cls, path: Path, settings: ContextSettings, target: LlamaModel) -> DraftModel:
        """The draft at `path` in a context like the target's (a KV stream per slot, the
        same cells, threads and layout); refused when its vocabulary differs."""
        try:
            model = LlamaModel(path, settings)
        except EngineFailure as exc:
            raise EngineFailure(f"The draft model {path} could not be loaded: {exc.message}",
                                code="model_load_failed") from None
        problem = vocabulary_mismatch(Vocabulary.of(target), Vocabulary.of(model))
        if problem is not None:
            model.close()
            raise InvalidRequest(
                f"The draft model {path} cannot draft for {target.path.name}: its "
                f"vocabulary differs ({problem}). A draft model must share the model's "
                "tokenizer.", param="draft_model")
        return cls(model, target.n_vocab)

    def held(self, slot: int) -> list[int]:
        """The tokens slot `slot`'s draft stream holds, position by position."""
        return list(self._held[slot])

    def propose(self, wants: list[tuple[int, list[int], int]]) -> list[list[int]]:
        """For each (slot, context, k): up to k tokens the draft expects to follow
        `context` (the slot's sequence: prompt, generated tokens, the pending one).
        Streams catch up by one batch of context tokens per call at most (a long prompt
        the target restored from its cache): one still behind proposes nothing yet.
        On a failed decode, no drafts at all."""
        try:
            return self._propose(wants)
        except Exception:  # the step goes on without drafts; the streams start over
            self.failures += 1
            if self.failures == 1:
                log.exception("draft model: a decode failed; that step drafts nothing")
            for slot, _, _ in wants:
                self._forget(slot)
            return [[] for _ in wants]

    def clear(self) -> None:
        """Forget every stream (the target's cache was cleared)."""
        llama_cpp.llama_memory_clear(self.model.memory, True)
        for held in self._held:
            held.clear()

    def close(self) -> None:
        self._batch.free()
        self.model.close()

    # -- scheduler thread -----------------------------------------------------------

    def _propose(self, wants: list[tuple[int, list[int], int]]) -> list[list[int]]:
        batch = self._batch
        batch.clear()
        rows: dict[int, int] = {}  # want -> the batch row of its context's last token
        added: list[tuple[int, list[int]]] = []  # what this decode adds to each stream
        for i, (slot, context, k) in enumerate(wants):
            if k <= 0 or not context:
                continue
            start = self._sync(slot, context)
            if any(common_prefix(tokens, context) >= start + MIN_STREAM_COPY
                   for _, tokens in added):
                continue  # evaluated for another stream now: copied from it next time
            missing = context[start:]
            count = min(len(missing), batch.room)
            if count <= 0:
                continue
            for offset in range(count):
                batch.add(missing[offset], start + offset, slot,
                          output=offset == len(missing) - 1)
            added.append((slot, context[:start + count]))
            if count == len(missing):
                rows[i] = batch.size - 1
        self._decode()
        for slot, tokens in added:
            self._held[slot][:] = tokens
        drafts: list[list[int]] = [[] for _ in wants]
        for i, row in rows.items():
            drafts[i].append(self._guess(row))
        # One decode per further position, every sequence still guessing in it.
        for position in range(1, max((k for _, _, k in wants), default=0)):
            going = [i for i in rows if len(drafts[i]) == position and wants[i][2] > position
                     and self._goes_on(drafts[i][-1])]
            if not going:
                break
            batch.clear()
            for i in going:
                slot = wants[i][0]
                batch.add(drafts[i][-1], len(self._held[slot]), slot, output=True)
                self._held[slot].append(drafts[i][-1])
            self._decode()
            for row, i in enumerate(going):
                drafts[i].append(self._guess(row))
        return [d if d and d[-1] < self._target_vocab else d[:-1] for d in drafts]

    def _sync(self, slot: int, context: list[int]) -> int:
        """Bring the stream to the longest prefix of `context` it can keep (never all
        of it: the last token is evaluated again for its logits), copying another
        stream that holds more of it when that saves evaluating `MIN_STREAM_COPY`
        tokens (the choices of `n`); where the stream's missing tokens start."""
        held = self._held[slot]
        limit = len(context) - 1
        keep = min(common_prefix(held, context), limit)
        if limit - keep >= MIN_STREAM_COPY:
            best, source = keep, None
            for other, tokens in enumerate(self._held):
                if other != slot and (n := min(common_prefix(tokens, context), limit)) > best:
                    best, source = n, other
            if source is not None and best - keep >= MIN_STREAM_COPY:
                if copy_sequence(self.model, source, slot):
                    held[:] = self._held[source]
                    keep = best
                else:
                    held.clear()
                    keep = 0
        if len(held) > keep:
            llama_cpp.llama_memory_seq_rm(self.model.memory, slot, keep, -1)
            del held[keep:]
        return keep

    def _decode(self) -> None:
        if not self._batch.size:
            return
        code = self._batch.decode(self.model.ctx)
        if code != DECODED:
            raise DraftFailed(f"llama_decode failed with status {code}")

    def _guess(self, row: int) -> int:
        return int(self.model.logits(row).argmax())

    def _goes_on(self, token: int) -> bool:
        """A guess past the target's vocabulary or at the end of generation is the
        draft's last: nothing after it could be accepted."""
        return token < self._target_vocab and not self.model.is_eog(token)

    def _forget(self, slot: int) -> None:
        llama_cpp.llama_memory_seq_rm(self.model.memory, slot, 0, -1)
        self._held[slot].clear()

"""Teacher forcing inside the step loop: a scoring group's continuations, each as the
tokens a sequence would have produced, scored without sampling.

The group's prompt is prefilled once like any other (prefix reuse, chunks beside
running streams). Its last row already gives every continuation's first token; a
continuation of more tokens then needs its earlier tokens in the cache after the
prompt: the prompt's cells are copied to the group's other slots (`SlotTable.fork`),
each slot takes one continuation per step, all its tokens in one batch with an output
row each, and the rows give the log-probability of every following token. The cells
past the prompt are removed after reading, so each slot holds the prompt again (for
its next continuation, and as a cached prefix once released).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import llama_cpp
import numpy as np

from parlance.engines.llamacpp.batch import Batch
from parlance.engines.llamacpp.logprobs import log_softmax_row
from parlance.engines.llamacpp.model import LlamaModel


@dataclass(frozen=True, slots=True)
class Forced:
    """One continuation placed in one slot for this step."""

    index: int  # which continuation
    slot: int
    row: int  # batch row of its first token


@dataclass(slots=True)
class ScoreSpec:
    """A group's continuations (token lists, none empty) and what is known of them."""

    continuations: list[list[int]]
    logprobs: list[float] = field(default_factory=list)
    pending: deque[int] = field(default_factory=deque)  # waiting for a slot
    in_flight: list[Forced] = field(default_factory=list)

    @property
    def sequences(self) -> int:
        """Slots worth claiming: one per continuation that needs forcing, at least one."""
        return max(1, sum(len(c) > 1 for c in self.continuations))

    @property
    def done(self) -> bool:
        return not self.pending and not self.in_flight

    def first(self, row: np.ndarray) -> None:
        """The prompt's last row (log-probabilities): every continuation's first token;
        those of more tokens wait to be forced."""
        self.logprobs = [float(row[c[0]]) for c in self.continuations]
        self.pending = deque(i for i, c in enumerate(self.continuations) if len(c) > 1)

    def fill(self, batch: Batch, slots: list[int], n_past: int) -> None:
        """Put one pending continuation in each slot, as far as the batch has room."""
        for slot in slots:
            if not self.pending:
                return
            tokens = self.continuations[self.pending[0]]
            if batch.room < len(tokens) - 1:
                return
            index = self.pending.popleft()
            row = batch.size
            for k, token in enumerate(tokens[:-1]):
                batch.add(token, n_past + k, slot, output=True)
            self.in_flight.append(Forced(index, slot, row))

    def not_decoded(self) -> None:
        """The step's batch was not decoded (no room): its continuations wait again."""
        self.pending.extendleft(f.index for f in reversed(self.in_flight))
        self.in_flight.clear()

    def read(self, model: LlamaModel, n_past: int) -> None:
        """Add each forced continuation's later tokens, then remove its cells."""
        for forced in self.in_flight:
            tokens = self.continuations[forced.index]
            for k, token in enumerate(tokens[1:]):
                self.logprobs[forced.index] += float(
                    log_softmax_row(model.logits(forced.row + k))[token])
            llama_cpp.llama_memory_seq_rm(model.memory, forced.slot, n_past, -1)
        self.in_flight.clear()

"""What a decode step costs by its shape, in steps of one row: what speculation weighs
a draft's expected tokens against.

On a CPU a model this size is compute-bound: a row costs about the same in a prompt
chunk as in a draft. bench/speculation_counts.py (`rows --wall --threads 2`) measured
SmolLM2-135M Q4_1 on the project's two cores, quiet (load under 1.5), 400 tokens into
the context, the same in both KV layouts: one row 6.3 ms, two 12.6 ms, 8 rows 29.3,
16 rows 49.9, 32 rows 94.9, 64 rows 180.6 ms; 8 sequences of one row each 29.9 ms, of
two 49.5, of three 71.4. ggml's path for a single row is much cheaper than for two;
past that, `first_two + per_row * (rows - 2)` with 2.0 and 0.43 (least squares over
those shapes) is within 3.5% of each. So a long draft accepted whole costs about 0.47
of a one-row step a token (2.9 ms): the ceiling of one stream's decoding.

With a KV stream per sequence, llama.cpp splits a batch into ubatches
(`llama_batch_allocr::split_equal`, sequential): one ubatch takes sequences of
consecutive ids in batch order, the same number of rows of each, and every ubatch is
a pass over all the weights. `ubatches` follows that rule, so a draft that makes its
sequence longer than its neighbours is priced with the extra pass it causes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StepCost:
    """The cost of one ubatch of `rows` rows, a one-row step being 1."""

    first_two: float = 2.0
    per_row: float = 0.43

    def __call__(self, rows: int) -> float:
        return 1.0 if rows <= 1 else self.first_two + self.per_row * (rows - 2)

    def batch(self, slots: Sequence[int], rows: Sequence[int], *,
              unified: bool = False) -> float:
        """A batch of `rows[i]` rows (at least 1) of the sequence in slot `slots[i]`, in
        ascending slot order, as llama.cpp splits it."""
        if unified:  # one stream: any shape is one ubatch
            return self(sum(rows))
        return sum(self(r) for r in ubatches(slots, rows))


def ubatches(slots: Sequence[int], rows: Sequence[int]) -> list[int]:
    """The rows of each ubatch: one takes, from the first sequence with rows left, it and
    the sequences of the next slots that have rows left, the same number of each."""
    left = list(rows)
    out: list[int] = []
    while True:
        first = next((i for i, n in enumerate(left) if n), None)
        if first is None:
            return out
        end = first + 1
        while end < len(left) and left[end] and slots[end] == slots[end - 1] + 1:
            end += 1
        take = min(left[first:end])
        for i in range(first, end):
            left[i] -= take
        out.append(take * (end - first))

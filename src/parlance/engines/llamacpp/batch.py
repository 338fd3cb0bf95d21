"""A reusable llama.cpp batch: tokens of many sequences, one `llama_decode` per step."""

from __future__ import annotations

import llama_cpp

DECODED = 0
NO_ROOM = 1  # llama.cpp found no free KV cells for the batch; nothing was changed


class Batch:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._ptr = llama_cpp.llama_batch_init(capacity, 0, 1)
        self.size = 0

    @property
    def room(self) -> int:
        return self.capacity - self.size

    def clear(self) -> None:
        self.size = 0

    def add(self, token: int, position: int, seq_id: int, *, output: bool) -> int:
        """Append one token; returns its row, where its logits are found after decoding."""
        i, batch = self.size, self._ptr
        batch.token[i] = token
        batch.pos[i] = position
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq_id
        batch.logits[i] = output
        self.size = i + 1
        return i

    def decode(self, ctx: llama_cpp.llama_context_p) -> int:
        self._ptr.n_tokens = self.size
        return llama_cpp.llama_decode(ctx, self._ptr)

    def free(self) -> None:
        if self._ptr is not None:
            llama_cpp.llama_batch_free(self._ptr)
            self._ptr = None

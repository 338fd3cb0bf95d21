"""Output rows of llama.cpp logits as numpy arrays, at a per-token cost near zero.

Every sampled token reads one row. `np.ctypeslib.as_array` over llama-cpp-python's
`llama_get_logits_ith` builds a new ctypes array type and a new array each time.
Here the C function is bound directly (its address comes back as a plain int) and
the array over each address is built once: bench/engine_choices.py ("logits row")
reads a row right after a decode, when the CPU caches hold the model's weights
instead of Python's objects, in 32 µs against 82 µs. bench/single_stream.py counts
such µs: on a 135M model a token takes under 10 ms.

A view is only read right after the call that returned its address, so it always
covers memory llama.cpp owns at that moment, even if the output buffer was
reallocated since the view was made.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import llama_cpp.llama_cpp as bindings
import numpy as np

from parlance.core.errors import EngineFailure

_MAX_VIEWS = 4096  # addresses seen; the output buffer only moves when it grows


class LogitsRows:
    def __init__(self, ctx: llama_cpp.llama_context_p, n_vocab: int) -> None:
        # A second handle to the same loaded library: its function objects are ours
        # to give a pointer-as-int return type without touching llama_cpp's own.
        lib = ctypes.CDLL(bindings._lib._name)
        self._logits_ith = lib.llama_get_logits_ith
        self._logits_ith.argtypes = [llama_cpp.llama_context_p_ctypes, ctypes.c_int32]
        self._logits_ith.restype = ctypes.c_void_p
        self._ctx = ctx
        self._n_vocab = n_vocab
        self._row_type = ctypes.c_float * n_vocab
        self._views: dict[int, np.ndarray] = {}

    def row(self, output: int) -> np.ndarray:
        """Logits of batch row `output` (negative: from the last output); writable,
        valid until the next decode."""
        address = self._logits_ith(self._ctx, output)
        if not address:
            raise EngineFailure(f"llama.cpp has no logits for output row {output}.")
        view = self._views.get(address)
        if view is None:
            if len(self._views) >= _MAX_VIEWS:
                self._views.clear()
            row = self._row_type.from_address(address)
            # A ctypes array is a buffer; numpy's stubs do not say so.
            view = np.frombuffer(row, dtype=np.float32)  # type: ignore[call-overload]
            self._views[address] = view
        return view

    def rows(self, first: int, count: int) -> np.ndarray:
        """Logits of the `count` batch rows from `first` as one (count, n_vocab) array:
        llama.cpp stores a batch's outputs one after another in batch order, so
        consecutive rows that all have logits are one block, viewed in place (a copy,
        should they ever not be). Valid until the next decode."""
        start = self.row(first)
        address = start.ctypes.data
        if self._logits_ith(self._ctx, first + count - 1) != (
                address + (count - 1) * start.nbytes):
            return np.stack([self.row(first + i) for i in range(count)])
        block = (ctypes.c_float * (self._n_vocab * count)).from_address(address)
        flat = np.frombuffer(block, dtype=np.float32)  # type: ignore[call-overload]
        return flat.reshape(count, self._n_vocab)

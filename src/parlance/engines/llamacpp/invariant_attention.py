"""The switch for ggml's batch-invariant flash attention, a patch Parlance's build
carries (patches/llama.cpp-batch-invariant-attention.patch).

Stock ggml picks its CPU flash-attention kernel by a batch's shape: a tiled kernel for
64+ query rows of a sequence, a split over the cells for one row alone, a one-row kernel
otherwise, each summing in its own order. With the switch on, every node with f16 (or
f32) keys and values takes the tiled kernel whatever its number of rows; each row's
arithmetic in it is its own, so a token's logits no longer depend on its batch, its
prompt chunk or where its prefix came from. A row's cells are summed in fixed runs
merged in order, so a lone decoding row's runs are shared between the threads without
changing its sums, and the patch makes the kernel cheap for few rows (decoding): prompts
cost what they cost without the switch, decoding 1.0-1.05x stock's at 600-1,400 tokens
in and 1.2x at 4,000 (its values are prefetched; bench/batch_invariance.py --depth).

The switch is a process-wide flag in libggml-cpu: on while any batch-invariant context
is open. A context of another model opened meanwhile gets the same kernels (the same
answers as alone). A llama-cpp-python built
without the patch has no switch (`available()` is False): the batch-invariant layout then
keeps q8_0 keys instead, which always take the one-row kernel (prompts ~0.8x).
"""

from __future__ import annotations

import ctypes
import threading
from functools import cache

from parlance.engines.llamacpp import cpu_backend

SETTER = "ggml_cpu_set_flash_attn_batch_invariant"
GETTER = "ggml_cpu_get_flash_attn_batch_invariant"


class Switch:
    """The patched library's flag, held on by a count of open invariant contexts."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._set = getattr(library, SETTER)
        self._set.argtypes, self._set.restype = [ctypes.c_bool], None
        self._get = getattr(library, GETTER)
        self._get.argtypes, self._get.restype = [], ctypes.c_bool
        self._holders = 0
        self._lock = threading.Lock()

    @property
    def on(self) -> bool:
        return bool(self._get())

    def hold(self) -> None:
        with self._lock:
            self._holders += 1
            self._set(True)

    def release(self) -> None:
        with self._lock:
            self._holders = max(0, self._holders - 1)
            if self._holders == 0:
                self._set(False)


def loaded_ggml_cpu(symbol: str) -> ctypes.CDLL | None:
    """The libggml-cpu llama.cpp already runs, if it exports `symbol` (a patch's)."""
    backend = cpu_backend.loaded()
    return backend.library if backend is not None and hasattr(backend.library, symbol) else None


@cache
def switch() -> Switch | None:
    """The loaded libggml-cpu's switch; None when the library was built without it."""
    library = loaded_ggml_cpu(SETTER)
    return Switch(library) if library is not None and hasattr(library, GETTER) else None


def available() -> bool:
    return switch() is not None

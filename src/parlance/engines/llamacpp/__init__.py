"""llama.cpp engine over llama-cpp-python's low-level bindings."""

import os

# llama-cpp-python's ggml runs its threads under OpenMP. Between two decode steps
# (about 1 ms of Python: sampling, events) libgomp's default spin gives up and its
# worker sleeps, so every step pays a futex wake-up; a longer spin keeps it hot
# while tokens flow and still sleeps when the server idles (0 CPU measured idle).
# Measured over HTTP on 2 cores: one stream 117 → 141 tok/s. Must be set before
# libgomp loads, i.e. before `llama_cpp` is imported; a user's own value wins.
os.environ.setdefault("GOMP_SPINCOUNT", "30000000")

from parlance.engines.llamacpp.engine import LlamaCppEngine  # noqa: E402

__all__ = ["LlamaCppEngine"]

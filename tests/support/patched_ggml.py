"""The libggml-cpu llama.cpp already runs, for tests of a switch one of Parlance's ggml
patches adds (patches/llama.cpp-*.patch): a setter taking a bool and a getter."""

from __future__ import annotations

import ctypes
import os

import llama_cpp  # noqa: F401  (loads libggml-cpu)

LIBRARY_NAMES = ("libggml-cpu.so.0", "libggml-cpu.so", "libggml-cpu.dylib", "ggml-cpu.dll")


def patched_ggml(setter: str, getter: str) -> ctypes.CDLL:
    """The loaded library (RTLD_NOLOAD: never a second copy, whose flags no kernel reads)
    with `setter` and `getter` typed; fails where the build lacks them."""
    mode = getattr(os, "RTLD_NOLOAD", 0) | ctypes.DEFAULT_MODE
    for name in LIBRARY_NAMES:
        try:
            found = ctypes.CDLL(name, mode=mode)
        except OSError:
            continue
        if hasattr(found, setter):
            found[setter].argtypes, found[setter].restype = [ctypes.c_bool], None
            found[getter].argtypes, found[getter].restype = [], ctypes.c_bool
            return found
    raise AssertionError(f"llama-cpp-python lacks {setter} (a patch in patches/): "
                         "`make install` builds it from its sdist with the patches")

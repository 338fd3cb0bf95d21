"""The libggml-cpu llama.cpp already runs, for tests of a switch one of Parlance's ggml
patches adds (patches/llama.cpp-*.patch): a setter taking a bool and a getter."""

from __future__ import annotations

import ctypes

from parlance.engines.llamacpp.invariant_attention import loaded_ggml_cpu


def patched_ggml(setter: str, getter: str) -> ctypes.CDLL:
    """The loaded library (never a second copy, whose flags no kernel reads) with `setter`
    and `getter` typed; fails where the build lacks them."""
    found = loaded_ggml_cpu(setter)
    if found is None:
        raise AssertionError(f"llama-cpp-python lacks {setter} (a patch in patches/): "
                             "`make install` builds it from its sdist with the patches")
    found[setter].argtypes, found[setter].restype = [ctypes.c_bool], None
    found[getter].argtypes, found[getter].restype = [], ctypes.c_bool
    return found

"""The libggml-cpu llama.cpp already runs, for tests of a switch one of Parlance's ggml
patches adds (patches/llama.cpp-*.patch): a setter taking a bool and a getter."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager

import llama_cpp
import numpy as np

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


@contextmanager
def switched(setter: str, getter: str, on: bool) -> Iterator[bool]:
    """The switch set to `on` for the block, then back as it was; yields what the getter
    then says (whether the patched path is taken)."""
    ggml = patched_ggml(setter, getter)
    was = ggml[getter]()
    ggml[setter](on)
    try:
        yield bool(ggml[getter]())
    finally:
        ggml[setter](was)


def prompt_logits(llm: llama_cpp.Llama, tokens: list[int]) -> np.ndarray:
    """Every row's logits of `tokens` evaluated from an empty cache (`logits_all`)."""
    llm.reset()
    llm.eval(tokens)
    return np.array(llm.scores[:len(tokens)], copy=True)

"""Which build of ggml's CPU backend this process runs.

On x86-64, `make` builds the CPU backend once per feature level
(`libggml-cpu-<variant>.so`: x64, haswell, skylakex, cascadelake, zen4) and importing
llama_cpp loads the best one this CPU runs (ggml's score: the most features, none
missing), or the one `PARLANCE_GGML_CPU` names (patches/llama-cpp-python-cpu-variants.patch);
a build elsewhere is one library, `libggml-cpu.so`. Parlance's ggml patches add switches
to that library (`invariant_attention`), which must be set in the copy that runs, never
in a second copy a plain dlopen could make (its flags no kernel reads).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import llama_cpp

VARIANT_PREFIX = "libggml-cpu-"
# one library built for this machine (no GGML_BACKEND_DL), by soname
SONAMES = ("libggml-cpu.so.0", "libggml-cpu.so", "libggml-cpu.dylib", "ggml-cpu.dll")


@dataclass(frozen=True)
class CpuBackend:
    library: ctypes.CDLL
    variant: str  # the feature level's name, or "native" for one library built here


def library_dir() -> Path:
    """Where llama_cpp loads its libraries from (LLAMA_CPP_LIB_PATH, else its own lib/)."""
    return Path(getattr(llama_cpp.llama_cpp, "_base_path", Path(llama_cpp.__file__).parent / "lib"))


@cache
def loaded() -> CpuBackend | None:
    """The CPU backend llama.cpp already runs (dlopen with RTLD_NOLOAD succeeds for the
    loaded library alone); None when none is."""
    mode = getattr(os, "RTLD_NOLOAD", 0) | ctypes.DEFAULT_MODE
    variants = sorted(library_dir().glob(f"{VARIANT_PREFIX}*.so"))
    for candidate in (*map(str, variants), *SONAMES):
        try:
            library = ctypes.CDLL(candidate, mode=mode)
        except OSError:
            continue
        name = Path(candidate).name
        variant = name[len(VARIANT_PREFIX):-len(".so")] if candidate.startswith("/") else "native"
        return CpuBackend(library, variant)
    return None


def variant() -> str | None:
    """The running CPU backend's feature level ("zen4", "haswell", ...; "native")."""
    backend = loaded()
    return None if backend is None else backend.variant

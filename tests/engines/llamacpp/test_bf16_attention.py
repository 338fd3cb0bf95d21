"""The patched ggml's BF16 products in flash attention's tiled kernel
(patches/llama.cpp-batch-invariant-attention.patch): taken where the CPU has AVX-512 BF16
and the CPU backend loaded was built for it (`make` builds one module per x86 feature
level; test_cpu_variants.py runs this test on the lower ones), off by the switch, and changing a
prompt's logits by rounding only. That they keep batch invariance is the invariance
tests' job (test_llamacpp_real_batch_invariance.py and bench/batch_invariance.py run with
them on)."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from parlance.engines.llamacpp import cpu_backend
from tests.support.patched_ggml import prompt_logits, switched
from tests.support.real_engine import model_path

SETTER, GETTER = "ggml_cpu_set_flash_attn_bf16", "ggml_cpu_get_flash_attn_bf16"


def cpu_has_avx512_bf16() -> bool:
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(line.startswith("flags") and "avx512_bf16" in line.split()
               for line in cpuinfo.splitlines())


def bf16_path_built() -> bool:
    """The loaded module was built with AVX-512 BF16: the zen4 one, or one library built
    for a machine that has it."""
    return cpu_backend.variant() in ("zen4", "native")


@pytest.mark.model
def test_bf16_products_are_taken_where_the_cpu_has_them_and_only_round_the_logits() -> None:
    llm = llama_cpp.Llama(str(model_path()), n_ctx=1024, n_batch=256, n_ubatch=256,
                          n_threads=2, flash_attn=True, logits_all=True, verbose=False)
    text = " ".join(f"item {i}: the {i * 7 % 13} quick brown foxes jump" for i in range(80))
    tokens = llm.tokenize(text.encode())[:600]  # tiles of 64 cells, the causal diagonal
    try:
        with switched(SETTER, GETTER, True) as taken:
            bf16 = prompt_logits(llm, tokens)
        with switched(SETTER, GETTER, False):
            f32 = prompt_logits(llm, tokens)
    finally:
        llm.close()
    assert taken == (cpu_has_avx512_bf16() and bf16_path_built())
    assert np.isfinite(bf16).all() and np.isfinite(f32).all()
    if not taken:
        assert bf16.tobytes() == f32.tobytes()
        return
    assert bf16.tobytes() != f32.tobytes()  # the products are BF16's
    same_next = (bf16.argmax(axis=1) == f32.argmax(axis=1)).mean()
    assert same_next >= 0.95, same_next
    # rounding, not another computation: here 2.4% of the mean logit on average
    assert np.abs(bf16 - f32).mean() <= 0.05 * np.abs(f32).mean()

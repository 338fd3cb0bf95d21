"""The patched ggml's Q4_1 prompt GEMM (patches/llama.cpp-q4_1-gemm.patch): built in, and
its logits bit-identical to the stock per-row kernel's (the default model is Q4_1), so a
prompt's answer does not depend on the switch nor on how many rows share a batch."""

from __future__ import annotations

import llama_cpp
import numpy as np
import pytest

from tests.support.patched_ggml import prompt_logits, switched
from tests.support.real_engine import model_path

SETTER, GETTER = "ggml_cpu_set_q4_1_gemm", "ggml_cpu_get_q4_1_gemm"


@pytest.mark.model
def test_prompt_logits_are_bit_identical_with_the_gemm_and_without() -> None:
    llm = llama_cpp.Llama(str(model_path()), n_ctx=512, n_batch=128, n_ubatch=128,
                          n_threads=2, logits_all=True, verbose=False)
    text = " ".join(f"line {i}: the quick brown fox {i * 7 % 13} jumps" for i in range(30))
    tokens = llm.tokenize(text.encode())[:300]  # batches of 128, 128 and 44 rows
    try:
        with switched(SETTER, GETTER, True):
            with_gemm = prompt_logits(llm, tokens)
        with switched(SETTER, GETTER, False):
            stock = prompt_logits(llm, tokens)
    finally:
        llm.close()
    assert stock.shape[0] == len(tokens)
    assert np.isfinite(stock).all()
    assert with_gemm.tobytes() == stock.tobytes()

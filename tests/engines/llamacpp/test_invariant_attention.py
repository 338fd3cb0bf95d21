"""The patched ggml's batch-invariant attention switch: built in, and on while a
batch-invariant context is open (the rows it makes identical are compared in
test_llamacpp_real_batch_invariance.py and bench/batch_invariance.py)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import llama_cpp
import pytest

from parlance.engines.llamacpp import invariant_attention
from parlance.engines.llamacpp.model import INVARIANT_KV, ContextSettings, KvTypes, LlamaModel
from tests.support.real_engine import model_path

TINY = ContextSettings(n_ctx=256, n_threads=2, parallel=1, n_batch=64)


def switch() -> invariant_attention.Switch:
    found = invariant_attention.switch()
    assert found is not None, (
        "llama-cpp-python lacks patches/llama.cpp-batch-invariant-attention.patch: "
        "`make install` builds it from its sdist with the patch")
    return found


def test_the_build_carries_the_switch_and_the_invariant_layout_is_llama_cpps_own() -> None:
    switch()
    assert KvTypes(llama_cpp.GGML_TYPE_F16, llama_cpp.GGML_TYPE_F16) == INVARIANT_KV


def test_holds_are_counted() -> None:
    flag = [False]

    def set_flag(on: bool) -> None:
        flag[0] = on

    library = SimpleNamespace(**{invariant_attention.SETTER: set_flag,
                                 invariant_attention.GETTER: lambda: flag[0]})
    counted = invariant_attention.Switch(library)  # type: ignore[arg-type]
    counted.hold()
    counted.hold()
    counted.release()
    assert counted.on
    counted.release()
    assert not counted.on
    counted.release()  # one release too many leaves it off, and counts from zero again
    counted.hold()
    assert counted.on
    counted.release()
    assert not counted.on


@pytest.mark.model
def test_on_while_a_batch_invariant_context_is_open() -> None:
    before = switch().on  # another test's invariant engine may be open meanwhile
    invariant = LlamaModel(model_path(), replace(TINY, batch_invariant=True))
    assert switch().on
    invariant.close()
    invariant.close()  # closing twice releases once
    assert switch().on == before

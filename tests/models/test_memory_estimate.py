"""The memory estimate and the load plan, against the shipped SmolLM2 file (figures from
llama.cpp's own load log for it) and synthetic headers for the shapes SmolLM2 lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from parlance.core.errors import InvalidRequest
from parlance.models.load_plan import (
    MAX_CONTEXT,
    MAX_PARALLEL,
    LoadDefaults,
    LoadOptions,
    check_fits,
    plan_load,
    usable_memory,
)
from parlance.models.memory_estimate import (
    available_memory,
    estimate,
    kv_cells,
    model_shape,
)
from parlance.models.registry import BUILTIN, ModelSpec
from tests.support.gguf_writer import ARR, STR, U32, write_gguf

MIB = 1 << 20


@pytest.fixture(scope="module")
def smollm2() -> Path:
    return BUILTIN[0].locate()


def test_smollm2_shape(smollm2: Path) -> None:
    shape = model_shape(smollm2)
    assert shape.weights_bytes == smollm2.stat().st_size
    assert shape.trained_context == 8192
    # 30 layers x (3 KV heads x 64) keys and as many values, f16
    assert shape.kv_cell_bytes == 30 * 2 * 3 * 64 * 2
    assert shape.n_vocab == 49152 and shape.n_embd == 576


# (context, parallel, unified, batch) -> llama.cpp's log: "llama_kv_cache: size = X MiB",
# "CPU compute buffer size = Y MiB" plus "CPU output buffer size = Z MiB".
@pytest.mark.parametrize(("context", "parallel", "unified", "batch", "kv_mib", "compute_mib"), [
    (4096, 4, False, 512, 360.0, 98.25 + 0.75),
    (100, 3, False, 512, 16.875, 57.57 + 0.5625),  # a batch of 300: the context asked for
    (1000, 2, True, 512, 22.5, 98.25 + 0.375),
    (4096, 1, False, 2048, 90.0, 393.0 + 0.1875),
    (4096, 1, False, 64, 90.0, 12.28 + 0.1875),
    (512, 8, False, 512, 90.0, 98.25 + 1.5),
])
def test_estimate_matches_what_llama_cpp_allocates_for_smollm2(
        smollm2: Path, context: int, parallel: int, unified: bool, batch: int,
        kv_mib: float, compute_mib: float) -> None:
    got = estimate(model_shape(smollm2), context_length=context, parallel=parallel,
                   eval_batch_size=batch, unified=unified)
    assert got.kv / MIB == pytest.approx(kv_mib)
    assert got.compute / MIB == pytest.approx(compute_mib, rel=0.01)
    assert got.weights == smollm2.stat().st_size
    assert got.total == got.weights + got.kv + got.compute


def test_cells_are_padded_per_slot_as_llama_cpp_does() -> None:
    assert kv_cells(100, 3, unified=False) == 768  # "rounding down to 768", n_ctx_seq 256
    assert kv_cells(1000, 2, unified=True) == 1024
    assert kv_cells(4096, 4, unified=False) == 16384


def _synthetic(tmp_path: Path, **kv: tuple[int, object]) -> Path:
    path = tmp_path / "m.gguf"
    write_gguf(path, {"general.architecture": (STR, "toy"), **kv},
               [("t", (16,), 16)])
    return path


def test_per_layer_heads_key_lengths_and_a_vocabulary_counted_from_its_tokens(tmp_path) -> None:
    path = _synthetic(
        tmp_path,
        **{"toy.block_count": (U32, 3), "toy.embedding_length": (U32, 256),
           "toy.attention.head_count": (U32, 8),
           "toy.attention.head_count_kv": (ARR, (U32, [2, 0, 4])),  # a layer without KV
           "toy.attention.key_length": (U32, 64), "toy.attention.value_length": (U32, 32),
           "tokenizer.ggml.tokens": (ARR, (STR, ["t"] * 300))})
    shape = model_shape(path)
    assert shape.kv_cell_bytes == (2 + 0 + 4) * (64 + 32) * 2
    assert shape.n_vocab == 300  # a skipped array, counted
    assert shape.trained_context is None


def test_a_model_without_attention_has_no_kv_estimate(tmp_path) -> None:
    path = _synthetic(tmp_path, **{"toy.block_count": (U32, 2),
                                   "toy.embedding_length": (U32, 64)})
    shape = model_shape(path)
    assert shape.kv_cell_bytes is None
    assert estimate(shape, context_length=4096, parallel=4, eval_batch_size=512,
                    unified=False).kv == 0


def test_a_file_that_is_not_gguf_counts_its_size_only(tmp_path) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(b"nope" * 10)
    shape = model_shape(path)
    assert shape.weights_bytes == 40 and shape.kv_cell_bytes is None
    assert model_shape(tmp_path / "missing.gguf").weights_bytes == 0


def test_available_memory_reads_meminfo(tmp_path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  1000 kB\nMemAvailable:    2048 kB\n")
    assert available_memory(meminfo) == 2048 * 1024
    meminfo.write_text("MemTotal:  1000 kB\n")
    assert available_memory(meminfo) is None
    assert available_memory(tmp_path / "absent") is None
    real = available_memory()
    assert real is None or real > 0


# -- the plan ---------------------------------------------------------------------------

SMOL = BUILTIN[0]


def test_defaults_resolve_in_order_client_server_preset() -> None:
    plan = plan_load(SMOL, LoadOptions(), LoadDefaults())
    assert (plan.context_length, plan.parallel, plan.eval_batch_size) == (4096, 4, 512)
    plan = plan_load(SMOL, LoadOptions(), LoadDefaults(context_length=2048, parallel=2))
    assert (plan.context_length, plan.parallel) == (2048, 2)
    plan = plan_load(SMOL, LoadOptions(context_length=1024, parallel=1, eval_batch_size=64),
                     LoadDefaults(context_length=2048))
    assert (plan.context_length, plan.parallel, plan.eval_batch_size) == (1024, 1, 64)
    assert plan.memory.kv == 1024 * 23040


def test_the_unchosen_default_stays_within_the_trained_context(tmp_path) -> None:
    path = _synthetic(tmp_path, **{"toy.context_length": (U32, 2048)})
    spec = ModelSpec(id="toy", locate=lambda: path)
    assert plan_load(spec, LoadOptions(), LoadDefaults()).context_length == 2048
    # Chosen, a longer context is the client's call, as in llama.cpp (agent prompts
    # outgrow a small model's training context); memory is what bounds it.
    assert plan_load(spec, LoadOptions(context_length=4096), LoadDefaults()).context_length == 4096


def test_every_context_in_range_fits_llama_cpp_cells() -> None:
    assert MAX_CONTEXT * MAX_PARALLEL <= 2**32 - 1  # llama.cpp's n_ctx is a uint32
    with pytest.raises(InvalidRequest, match="between 64 and") as info:
        plan_load(SMOL, LoadOptions(context_length=2**32 + 64), LoadDefaults())
    assert info.value.param == "context_length"


def test_a_server_default_out_of_range_is_refused_naming_the_setting() -> None:
    with pytest.raises(InvalidRequest) as info:
        plan_load(SMOL, LoadOptions(), LoadDefaults(context_length=10**9))
    assert info.value.param == "context_length" and "1000000000" in info.value.message
    with pytest.raises(InvalidRequest) as info:
        plan_load(SMOL, LoadOptions(), LoadDefaults(parallel=1000))
    assert info.value.param == "parallel"


def test_check_fits_names_the_limit_and_the_largest_context_that_fits() -> None:
    plan = plan_load(SMOL, LoadOptions(parallel=2), LoadDefaults())
    check_fits(plan, "m", budget=plan.memory.total, available=None)  # exactly fits
    with pytest.raises(InvalidRequest, match="memory budget") as info:
        check_fits(plan, "m", budget=plan.memory.total - 1, available=None)
    assert info.value.param == "parallel" and info.value.code == "insufficient_memory"
    assert "The largest context_length that fits is 3840." in info.value.message
    free = plan.memory.total  # less the margin: too little
    with pytest.raises(InvalidRequest, match="has free"):
        check_fits(plan, "m", budget=None, available=free)
    check_fits(plan, "m", budget=None, available=free, freeable=free - usable_memory(free))


def test_a_draft_model_is_planned_with_its_model_in_a_context_like_its_own() -> None:
    """`--draft-model`: the draft's weights, KV cells and compute count against the
    budget with the model's, and the largest context that fits grows both caches."""
    from dataclasses import replace

    alone = plan_load(SMOL, LoadOptions(parallel=2), LoadDefaults())
    plan = plan_load(replace(SMOL, draft=SMOL), LoadOptions(parallel=2), LoadDefaults())
    assert plan.memory.draft == alone.memory  # (the same file drafting for itself)
    assert plan.memory.total == 2 * alone.memory.total
    check_fits(plan, "m", budget=plan.memory.total, available=None)
    budget = plan.memory.total - 1
    with pytest.raises(InvalidRequest, match="MiB for the draft model") as info:
        check_fits(plan, "m", budget=budget, available=None)
    largest = int(info.value.message.split("that fits is ")[1].rstrip("."))
    assert largest == 3840
    smaller = plan_load(replace(SMOL, draft=SMOL), LoadOptions(context_length=largest,
                                                               parallel=2), LoadDefaults())
    check_fits(smaller, "m", budget=budget, available=None)
    with pytest.raises(InvalidRequest):  # the next padded size up does not
        check_fits(plan_load(replace(SMOL, draft=SMOL), LoadOptions(
            context_length=largest + 1, parallel=2), LoadDefaults()), "m", budget=budget,
            available=None)

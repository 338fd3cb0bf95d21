"""ggml's CPU backend built once per x86 feature level (patches/llama.cpp-cpu-variants.patch,
patches/llama-cpp-python-cpu-variants.patch, the Makefile's CPU_VARIANTS): importing
llama_cpp loads the best module this CPU runs; each lower module holds no instruction above
its level; the engine's patched paths keep their promises on the AVX2 and baseline modules
(their own tests, run again on each); and on an emulated CPU without AVX-512 (qemu-user)
the build loads a lower module and generates, where a build for this machine would stop
at its first AVX-512 instruction."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from parlance.engines.llamacpp import cpu_backend
from tests.support.real_engine import model_path

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="the CPU variants are x86-64's (elsewhere one library)")

ROOT = Path(__file__).resolve().parents[3]
# What each module was built for (ggml/src/CMakeLists.txt's variants, by /proc/cpuinfo's
# names; "AVX512" is F, CD, VL, DQ and BW), lowest first: what ggml's score must agree with.
AVX2 = ("sse4_2", "avx", "f16c", "fma", "avx2", "bmi2")
AVX512 = (*AVX2, "avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")
VARIANTS = {
    "x64": (),
    "haswell": AVX2,
    "skylakex": AVX512,
    "cascadelake": (*AVX512, "avx512_vnni"),
    "zen4": (*AVX512, "avx512vbmi", "avx512_vnni", "avx512_bf16"),
}
# Instructions a module must not hold: above its level (a CPU it is for would fault)
ABOVE = {
    "x64": ("%ymm", "%zmm"),
    "haswell": ("%zmm",),
    "skylakex": ("vpdpbusd", "vdpbf16ps"),
    "cascadelake": ("vdpbf16ps",),
}
# The engine's tests of the patched ggml paths, run again on a named module: all of them
# on AVX2's; on the baseline's (scalar code, minutes) the batch-invariant kernel's alone
# (its Q4_1 GEMM and BF16 products need AVX2 and AVX-512 BF16)
PATCH_TESTS = {
    "haswell": ("test_invariant_attention.py", "test_q4_1_gemm.py", "test_bf16_attention.py",
                "test_llamacpp_real_batch_invariance.py"),
    "x64": ("test_invariant_attention.py", "test_llamacpp_real_batch_invariance.py::"
            "test_a_cached_prefix_whole_or_partial_gives_the_cold_answer"),
}


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def module(variant: str) -> Path:
    return cpu_backend.library_dir() / f"{cpu_backend.VARIANT_PREFIX}{variant}.so"


def run_python(code: str, env: dict[str, str], prefix: tuple[str, ...] = (),
               timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, **env}, timeout=timeout)


def test_the_build_has_a_module_per_level_and_loads_the_best_this_cpu_runs() -> None:
    built = sorted(p.name for p in cpu_backend.library_dir().glob("libggml-cpu-*.so"))
    assert built == sorted(module(v).name for v in VARIANTS)
    flags = cpu_flags()
    best = [v for v, needs in VARIANTS.items() if set(needs) <= flags][-1]
    assert os.environ.get("PARLANCE_GGML_CPU") is None
    assert cpu_backend.variant() == best


@pytest.mark.parametrize("variant", sorted(ABOVE))
def test_a_lower_module_holds_no_instruction_above_its_level(variant: str) -> None:
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed")
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(module(variant))],
                             capture_output=True, text=True, check=True).stdout
    assert not [op for op in ABOVE[variant] if op in listing]
    assert "ggml_cpu_set_flash_attn_batch_invariant" in listing  # the patches are in it


def test_the_bf16_module_holds_the_bf16_products() -> None:
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(module("zen4"))],
                             capture_output=True, text=True, check=True).stdout
    assert "vdpbf16ps" in listing


def test_a_module_that_is_not_there_is_a_clear_error() -> None:
    done = run_python("import llama_cpp", {"PARLANCE_GGML_CPU": "pentium"})
    assert done.returncode != 0
    assert "PARLANCE_GGML_CPU=pentium" in done.stderr and "no ggml CPU backend" in done.stderr


@pytest.mark.model
@pytest.mark.parametrize("variant", sorted(PATCH_TESTS))
def test_the_patched_paths_keep_their_promises_on_a_lower_module(variant: str) -> None:
    env = {"PARLANCE_GGML_CPU": variant}
    named = run_python("from parlance.engines.llamacpp import cpu_backend; "
                       "print(cpu_backend.variant())", env)
    assert named.stdout.split() == [variant], named.stderr[-2000:]
    here = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "model",
         *(str(here / name) for name in PATCH_TESTS[variant])],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env}, timeout=3600)
    assert done.returncode == 0, done.stdout[-4000:]
    assert " passed" in done.stdout and " skipped" not in done.stdout


GENERATE = """
import json, llama_cpp
from parlance.engines.llamacpp import cpu_backend
llm = llama_cpp.Llama(%r, n_ctx=128, n_threads=2, flash_attn=True, verbose=False)
out = llm("The capital of France is", max_tokens=4, temperature=0.0)
print(json.dumps({"variant": cpu_backend.variant(),
                  "tokens": out["usage"]["completion_tokens"]}))
"""


@pytest.mark.model
def test_a_cpu_without_avx512_loads_a_lower_module_and_generates() -> None:
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        pytest.skip("qemu-user is not installed (.ci/run installs it)")
    # QEMU's emulated x86 has no AVX-512 at all; Haswell's model has AVX2 where QEMU does
    done = run_python(GENERATE % str(model_path()), {}, prefix=(qemu, "-cpu", "Haswell"))
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["variant"] in ("haswell", "x64")
    assert answer["tokens"] >= 1
    # and the emulated CPU really lacks AVX-512: the BF16 module is refused there
    refused = run_python("import llama_cpp", {"PARLANCE_GGML_CPU": "zen4"},
                         prefix=(qemu, "-cpu", "Haswell"))
    assert refused.returncode != 0 and "no ggml CPU backend" in refused.stderr

"""Parlance's ggml patches on a CPU without AVX-512: ggml built from llama-cpp-python's
sdist with the patches, for AVX2 alone (`GGML_NATIVE=OFF`, `GGML_AVX512=OFF`), so the
build takes the patches' AVX2 paths whatever this machine has. The Q4_1 GEMM's check
(`patches/checks/q4_1_gemm.cpp`) then runs against it: every output of a batch
bit-identical to the same column computed alone, the GEMM on and off. The library is
checked to hold no 512-bit instruction, so what ran is what an AVX2-only CPU runs.

Built once per patch set into the peers' cache (`peers`: it compiles ggml, minutes)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.llama_cpp_programs import (
    BuildToolsMissing,
    PeerUnavailable,
    build_root,
    unpacked_sdist,
)

pytestmark = pytest.mark.peers

PATCHES = Path(__file__).resolve().parents[3] / "patches"
AVX2_ONLY = ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON",
             "-DGGML_F16C=ON", "-DGGML_BMI2=ON", "-DGGML_AVX512=OFF", "-DGGML_AVX_VNNI=OFF",
             "-DBUILD_SHARED_LIBS=OFF", "-DCMAKE_BUILD_TYPE=Release", "-DGGML_OPENMP=ON",
             "-DGGML_BUILD_TESTS=OFF", "-DGGML_BUILD_EXAMPLES=OFF",
             "-DGGML_LLAMAFILE=ON"]  # (llama.cpp turns it on; ggml alone does not)


def _run(command: list[str], cwd: Path, log: Path) -> None:
    with log.open("a") as out:
        done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise AssertionError(f"`{' '.join(command)}` failed; end of {log}:\n"
                             f"{log.read_text(errors='replace')[-2000:]}")


def _avx2_ggml() -> Path:
    """A patched ggml built for AVX2 alone: its build dir (cached per patch set)."""
    for tool in ("cmake", "c++", "patch", "objdump"):
        if shutil.which(tool) is None:
            raise BuildToolsMissing(f"`{tool}` is not installed")
    patches = sorted(PATCHES.glob("llama.cpp-*.patch"))
    key = hashlib.sha256(b"".join(p.read_bytes() for p in patches)
                         + " ".join(AVX2_ONLY).encode()).hexdigest()[:12]
    root = build_root() / f"ggml-avx2-{key}"
    stamp = root / "built"
    if stamp.exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    source = unpacked_sdist(build_root(), sys.stderr)
    tree, log = root / "llama.cpp", root / "build.log"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(source / "ggml", tree / "ggml")
    for patch in patches:  # (they touch ggml/ alone)
        _run(["patch", "-s", "-p1", "-i", str(patch)], tree, log)
    # ggml built on its own writes a pkg-config file from this template, which the sdist
    # leaves out (llama.cpp's own build never asks for it)
    (tree / "ggml" / "ggml.pc.in").touch()
    _run(["cmake", "-S", "ggml", "-B", "build", *AVX2_ONLY], tree, log)
    _run(["cmake", "--build", "build", "--target", "ggml-cpu", "ggml", "-j", "2"], tree, log)
    check = root / "q4_1_gemm"
    libraries = [next((tree / "build").rglob(f"lib{name}.a"))
                 for name in ("ggml", "ggml-cpu", "ggml-base")]
    _run(["c++", "-O2", "-mavx2", "-mfma", "-mf16c", "-std=c++17", f"-I{tree / 'ggml/include'}",
          str(PATCHES / "checks" / "q4_1_gemm.cpp"), "-o", str(check), "-Wl,--start-group",
          *map(str, libraries), "-Wl,--end-group", "-fopenmp", "-lpthread", "-lm"], root, log)
    stamp.write_text(key)
    return root


@pytest.fixture(scope="module")
def avx2_build() -> Path:
    try:
        return _avx2_ggml()
    except BuildToolsMissing as exc:
        pytest.skip(str(exc))
    except PeerUnavailable as exc:  # the sdist could not be fetched: a real failure
        raise AssertionError(str(exc)) from exc


def test_the_avx2_build_holds_no_avx512_instruction(avx2_build):
    library = next((avx2_build / "llama.cpp" / "build").rglob("libggml-cpu.a"))
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(library)],
                             capture_output=True, text=True, check=True).stdout
    assert "%zmm" not in listing  # no 512-bit register anywhere: AVX2 alone
    assert "tinyBLAS_Q4_1" in listing  # the patch's kernel is in it


def test_the_q4_1_gemm_is_bit_identical_on_the_avx2_path(avx2_build):
    done = subprocess.run([str(avx2_build / "q4_1_gemm"), "2"], capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "bit-identical in every case" in done.stdout

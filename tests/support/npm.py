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
    return npm_package(package, version) / "node_modules" / ".bin" / command


def npm_package(package: str, version: str) -> Path:
    """The directory `package@version` is installed in (its `node_modules` beneath;
    scripts run there import it by name), installing it if needed."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm is not installed, so {package} cannot be; install Node.js to run this")
    prefix = CACHE / f"{package.replace('/', '+')}@{version}"
    if not (prefix / "node_modules" / package / "package.json").exists():
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                        f"{package}@{version}"], check=True, capture_output=True, timeout=600)
    return prefix

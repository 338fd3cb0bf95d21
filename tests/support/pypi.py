"""Real Python clients from PyPI, each in a virtualenv of its own in the clients cache
(`tests.support.npm.CACHE`): their dependency pins never meet the test environment's.

A test runs the client as a subprocess (its command-line program, or a script from
`tests/clients/scripts/` run by that venv's python). It skips only where no Python
interpreter the client supports exists; an install that fails is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.npm import CACHE

INSTALL_TIMEOUT = 1800  # seconds: aider's dependencies on a busy machine


def python_at_least(minor: int) -> str | None:
    """An interpreter of Python 3.`minor` or newer: this one, one on PATH, or pyenv's."""
    if sys.version_info >= (3, minor):
        return sys.executable
    for version in range(minor, 16):
        found = shutil.which(f"python3.{version}")
        if found and _runs(found):  # (a pyenv shim of a version not selected fails)
            return found
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    for candidate in sorted(pyenv.glob("3.*/bin/python")):
        parts = candidate.parent.parent.name.split(".")
        if len(parts) > 1 and parts[1].isdigit() and int(parts[1]) >= minor:
            return str(candidate)
    return None


def _runs(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", "pass"], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def pypi_venv(name: str, version: str, requirement: str, *, min_minor: int = 10) -> Path:
    """The venv `requirement` (pinned to `version`) is installed in, installing it if
    needed: `<cache>/py-<name>@<version>`. Its `bin/` holds the python and the client's
    programs."""
    python = python_at_least(min_minor)
    if python is None:
        pytest.skip(f"{name} needs Python 3.{min_minor} or newer, and none is installed")
    venv = CACHE / f"py-{name}@{version}"
    stamp = venv / ".installed"
    if not stamp.exists():
        shutil.rmtree(venv, ignore_errors=True)  # a half-made venv from an interrupted run
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True,
                       timeout=300)
        install = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", requirement],
            capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
        assert install.returncode == 0, install.stderr[-3000:]
        stamp.touch()
    return venv / "bin"

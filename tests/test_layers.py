"""The layer contracts of `make check` (import-linter, configured in pyproject.toml)
hold on the tree, and each one breaks on a deliberately wrong import: a copy of
the package gets one bad module and the linter must name the broken contract."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(),
                                reason="import-linter is not installed (make install)")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """Run the linter with the project's contracts over the `parlance` package in `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120)


def test_the_tree_keeps_every_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


DOWN = "imports point downwards"
NEUTRAL = "dialects speak only in core's neutral values"
FLOORS = "the server's floors"


@pytest.mark.parametrize(("module", "bad_import", "contract"), [
    ("core/bad.py", "import parlance.dialects.base", DOWN),
    ("store/bad.py", "from parlance.server import app", DOWN),
    ("server/bad.py", "import parlance.config", DOWN),
    ("engines/parsing/bad.py", "import parlance.dialects.openai.chat", DOWN),
    ("net/bad.py", "from parlance.integrations import toolbox", DOWN),
    ("models/bad.py", "from parlance.store import responses", DOWN),
    ("dialects/bad.py", "from parlance.models import gguf", DOWN),
    ("dialects/bad.py", "from parlance.engines.llamacpp import engine", NEUTRAL),
    ("dialects/bad.py", "from parlance.engines.parsing import syntax", NEUTRAL),
    ("dialects/anthropic/bad.py", "from parlance.dialects.openai import tools",
     "no dialect imports another"),
    ("dialects/gemini/bad.py", "from parlance.dialects.anthropic import errors",
     "no dialect imports another"),  # (a package the contract does not list by name)
    ("server/bad.py", "from parlance.engines.upstream import Fleet",
     "the server never imports an engine's implementation"),
    ("console/bad.py", "import parlance.config", DOWN),
    ("console/bad.py", "from parlance.server import create_app",
     "the console is a client of the HTTP API"),
    ("server/http/bad.py", "from parlance.server.routes import error_renderer", FLOORS),
    ("server/openapi/bad.py", "from parlance.server.calls import framing", FLOORS),
    ("server/calls/bad.py", "from parlance.server.generation import handler", FLOORS),
    ("server/endpoints/bad.py", "from parlance.server.generation import handler", FLOORS),
])
def test_a_wrong_import_breaks_its_contract(tmp_path, module, bad_import, contract):
    shutil.copytree(ROOT / "src" / "parlance", tmp_path / "src" / "parlance",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "src" / "parlance" / module).write_text(f'"""Wrong on purpose."""\n{bad_import}\n')
    result = lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout
    assert f"{contract} BROKEN" in result.stdout, result.stdout
    assert f"parlance.{module.removesuffix('.py').replace('/', '.')}" in result.stdout


def test_a_circle_breaks_the_acyclic_contract(tmp_path):
    """Two modules that import each other (the prompt cache's file format reaching back
    into the directory store that uses it) are named."""
    shutil.copytree(ROOT / "src" / "parlance", tmp_path / "src" / "parlance",
                    ignore=shutil.ignore_patterns("__pycache__"))
    module = tmp_path / "src" / "parlance" / "engines" / "llamacpp" / "prompt_cache_file.py"
    module.write_text(module.read_text() + "\nfrom parlance.engines.llamacpp import "
                      "prompt_cache_disk  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout
    assert "no circle anywhere: every package's modules import one way BROKEN" in result.stdout
    assert "prompt_cache_file" in result.stdout and "prompt_cache_disk" in result.stdout

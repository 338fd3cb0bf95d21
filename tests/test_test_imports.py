"""Test modules import their helpers from `tests.support`, never from a conftest or from
another test module: a helper two modules need belongs in the support package, a fixture
in a conftest or in the fixtures plugin (pytest imports both itself)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).parent


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names an import statement reaches (a relative one starts with dots)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = "." * node.level + (node.module or "")
    joiner = "" if base.endswith(".") or not base else "."
    return [base, *(base + joiner + alias.name for alias in node.names)]


def forbidden_imports(source: str) -> list[str]:
    """What `source` imports that no module may: a conftest, or a `test_*` module of ours."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for name in _imported(node):
            parts = name.lstrip(".").split(".")
            ours = name.startswith(".") or parts[0] in ("tests", "conftest")
            if ours and any(p == "conftest" or p.startswith("test_") for p in parts):
                found.append(name)
    return sorted(set(found))


def test_no_module_imports_a_conftest_or_a_test_module():
    offenders = {str(path.relative_to(TESTS)): names for path in sorted(TESTS.rglob("*.py"))
                 if (names := forbidden_imports(path.read_text()))}
    assert offenders == {}


@pytest.mark.parametrize("source", [
    "from tests.conftest import make_app",
    "import tests.conftest",
    "from tests.models.test_gguf import write_gguf",
    "from tests.models import test_gguf",
    "import tests.engines.llamacpp.test_plan as plan",
    "from .conftest import FAKE_SPEC",
    "from . import test_plan",
    "from ..server.test_streaming import asgi_stream",
    "import conftest",
    "def helper():\n    from tests.conftest import make_app\n    return make_app",
])
def test_the_check_finds_every_kind_of_forbidden_import(source):
    assert forbidden_imports(source)


@pytest.mark.parametrize("source", [
    "from tests.support.fake_app import make_app",
    "from tests.support import mcp_server",
    "import pytest\nfrom parlance.core.events import TextDelta",
    "from tests.support.real_engine import PATIENCE",
])
def test_the_check_lets_support_imports_through(source):
    assert forbidden_imports(source) == []

"""The docs site builds strictly (no broken link or anchor, every generated page made,
every route explained by a page), the README and DEVELOPERS.md (outside the site) link
only to what exists, and the README stays an overview."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_LIMIT = 10_000  # characters: the README is an overview; the rest is under docs/
LINE_LIMIT = 300  # characters: a longer line is prose (or a table) a reader cannot follow
_LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as `make check` builds it (strict: any warning fails)."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"),
                                                       os.environ.get("PYTHONPATH")]))}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    return out


def test_the_site_builds_strictly_with_its_generated_pages(site: Path):
    endpoints = (site / "reference" / "endpoints" / "index.html").read_text()
    assert "/v1/chat/completions" in endpoints and "generated:" not in endpoints
    flags = (site / "reference" / "flags" / "index.html").read_text()
    assert "--ctx-size" in flags and "PARLANCE_CTX_SIZE" in flags


@pytest.mark.parametrize("page", ["README.md", "DEVELOPERS.md"])
def test_pages_outside_the_site_link_to_what_exists(site: Path, page: str):
    broken = []
    for target in _LINK.findall((ROOT / page).read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        if not (ROOT / path).exists():
            broken.append(target)
        elif anchor and path.startswith("docs/") and path.endswith(".md"):
            name = path.removeprefix("docs/").removesuffix(".md")  # agents, apis/index
            html = (site / name.removesuffix("index") / "index.html").read_text()
            if f'id="{anchor}"' not in html:
                broken.append(target)
    assert not broken, f"{page} links to what does not exist: {broken}"


def test_the_readme_is_an_overview():
    assert len((ROOT / "README.md").read_text()) < README_LIMIT


def test_no_page_has_lines_too_long_to_read():
    pages = [ROOT / "README.md", ROOT / "DEVELOPERS.md", *sorted((ROOT / "docs").rglob("*.md"))]
    long = [f"{page.relative_to(ROOT)}:{n}" for page in pages
            for n, line in enumerate(page.read_text().splitlines(), 1) if len(line) > LINE_LIMIT]
    assert not long, f"lines over {LINE_LIMIT} characters: {long}"


def test_the_files_the_pages_name_exist():
    """A module the docs name (`server/calls/drain.py`, `bench/speculative.py`) is there:
    a move or a rename that leaves a page behind fails here."""
    known = {str(path.relative_to(ROOT)) for folder in ("src", "tests", "bench", "examples", "docs")
             for path in (ROOT / folder).rglob("*.py")}
    missing = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for name in re.findall(r"`([\w./-]+/[\w-]+\.py)(?:::[\w.]+)?[`\s]", page.read_text()):
            if not any(path == name or path.endswith("/" + name) for path in known):
                missing.add(f"{page.relative_to(ROOT)}: {name}")
    assert not missing, sorted(missing)

"""The docs site builds strictly (no broken link or anchor, every generated page made,
every route explained by a page), and the README stays an overview."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_LIMIT = 10_000  # characters: the README is an overview; the rest is under docs/
LINE_LIMIT = 300  # characters: a longer line is prose (or a table) a reader cannot follow


def test_the_site_builds_strictly(tmp_path: Path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"),
                                                       os.environ.get("PYTHONPATH")]))}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    # the generated pages were filled in: a route and a flag from the code are there
    endpoints = (tmp_path / "reference" / "endpoints" / "index.html").read_text()
    assert "/v1/chat/completions" in endpoints and "generated:" not in endpoints
    flags = (tmp_path / "reference" / "flags" / "index.html").read_text()
    assert "--ctx-size" in flags and "PARLANCE_CTX_SIZE" in flags


def test_the_readme_is_an_overview():
    assert len((ROOT / "README.md").read_text()) < README_LIMIT


def test_no_page_has_lines_too_long_to_read():
    pages = [ROOT / "README.md", ROOT / "DEVELOPERS.md", *sorted((ROOT / "docs").rglob("*.md"))]
    long = [f"{page.relative_to(ROOT)}:{n}" for page in pages
            for n, line in enumerate(page.read_text().splitlines(), 1) if len(line) > LINE_LIMIT]
    assert not long, f"lines over {LINE_LIMIT} characters: {long}"

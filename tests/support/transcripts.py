"""Golden transcripts: byte-exact stream bodies kept in tests/transcripts/.

Run with PARLANCE_REGEN_TRANSCRIPTS=1 to rewrite them, then review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1] / "transcripts"


def assert_transcript(name: str, body: str) -> None:
    path = ROOT / name
    if os.environ.get("PARLANCE_REGEN_TRANSCRIPTS"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        return
    if not path.exists():
        pytest.fail(f"missing transcript {path}; run with PARLANCE_REGEN_TRANSCRIPTS=1")
    assert body == path.read_text()

"""Golden transcripts: byte-exact stream bodies kept in tests/transcripts/.

Run with PARLANCE_REGEN_TRANSCRIPTS=1 to rewrite them, then review the diff.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).parent / "transcripts"


def assert_transcript(name: str, body: str) -> None:
    path = ROOT / name
    if os.environ.get("PARLANCE_REGEN_TRANSCRIPTS"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        return
    if not path.exists():
        pytest.fail(f"missing transcript {path}; run with PARLANCE_REGEN_TRANSCRIPTS=1")
    assert body == path.read_text()


@pytest.fixture
def fixed_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ids and timestamps stable so transcripts compare byte for byte."""
    for module in ("parlance.dialects.openai.chat", "parlance.dialects.openai.completions",
                   "parlance.dialects.openai.responses"):
        monkeypatch.setattr(f"{module}.new_id", lambda prefix: f"{prefix}test")
        monkeypatch.setattr(f"{module}.now", lambda: 1700000000)
    for module in ("parlance.dialects.openai.responses.output",
                   "parlance.dialects.openai.responses.request"):
        monkeypatch.setattr(f"{module}.new_id", lambda prefix: f"{prefix}test")
    monkeypatch.setattr("parlance.dialects.openai.responses.result.now", lambda: 1700000000)
    monkeypatch.setattr("parlance.engines.parsing.calls.new_call_id", lambda: "call_test")
    monkeypatch.setattr("parlance.dialects.lmstudio.new_response_id", lambda: "resp_" + "0" * 48)
    monkeypatch.setattr("parlance.dialects.anthropic.result.new_message_id", lambda: "msg_test")
    monkeypatch.setattr("parlance.dialects.ollama.result.timestamp",
                        lambda: "2023-08-04T19:22:45.499127Z")
    ticks = itertools.count(0, 250_000_000)  # each reading of the clock a quarter second on
    monkeypatch.setattr("parlance.dialects.ollama.result.clock_ns", lambda: next(ticks))
    # the wait for a loaded model: 2 ms (Ollama's load_duration)
    readings = itertools.count(0.0, 0.002)
    monkeypatch.setattr("parlance.models.lease.perf_counter",
                        lambda: next(readings))

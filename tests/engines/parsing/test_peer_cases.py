"""The peers' own parser cases, carried over as data (cases/*.json, each case naming
its source): model text in, the message (content, reasoning, calls) out. Each is
parsed whole, a character at a time and in seeded random chunks, with the same
result (a `partial` case is a snapshot mid-stream: what was streamed so far). Content
and reasoning are compared without their surrounding whitespace
(llama.cpp's tests compare them so too for these formats). A case's own `tools`
(name: JSON Schema) replace its file's, where a peer's test gives one tool its own
schema."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from parlance.core.events import ReasoningDelta, TextDelta
from parlance.engines.parsing.formats import format_named
from parlance.engines.parsing.output import OutputParser
from parlance.engines.parsing.syntax import THINK
from tests.support.parsed_calls import call_texts

CASES = Path(__file__).parent / "cases"


def _load() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    out = []
    for path in sorted(CASES.glob("*.json")):
        data = json.loads(path.read_text())
        for i, case in enumerate(data["cases"]):
            tools = case.get("tools", data["tools"])  # a case may bring its own
            out.append((f"{path.stem}-{case['format']}-{i}", case, tools))
    return out


ALL = _load()


def _parse(case: dict[str, Any], tools: dict[str, Any], pieces: list[str]) -> dict[str, Any]:
    fmt = format_named(case["format"])
    parser = OutputParser(0, syntax=fmt.syntax, reasoning=fmt.reasoning_markers(THINK),
                          markup=fmt.markup, header_close=fmt.header_close,
                          tool_names=frozenset(tools), schemas=tools,
                          start_in_reasoning=case.get("start_in_reasoning", False))
    events = [e for piece in pieces for e in parser.push(piece)]
    if not case.get("partial"):  # a partial case is the message so far, mid-stream
        events += parser.finish()
    calls = [list(call) for call in call_texts(events)]
    return {"content": "".join(e.text for e in events if isinstance(e, TextDelta)).strip(),
            "reasoning": "".join(e.text for e in events
                                 if isinstance(e, ReasoningDelta)).strip(),
            "calls": calls}


def _expected(case: dict[str, Any]) -> dict[str, Any]:
    want = case["expected"]
    calls = [[name, args if isinstance(args, str) else json.loads(json.dumps(args))]
             for name, args in want["calls"]]
    return {"content": want["content"].strip(), "reasoning": want["reasoning"].strip(),
            "calls": calls}


def _comparable(got: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    """Complete arguments compared as JSON values; a cut call's as the text written."""
    calls = []
    for (name, args), (_, want) in zip(got["calls"], case["expected"]["calls"], strict=False):
        calls.append([name, args if isinstance(want, str) else json.loads(args)])
    calls += got["calls"][len(calls):]
    return {**got, "calls": calls}


def _chunks(text: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        n = rng.randint(1, 12)
        out.append(text[i:i + n])
        i += n
    return out


@pytest.mark.parametrize(("case", "tools"), [(c, t) for _, c, t in ALL],
                         ids=[name for name, _, _ in ALL])
def test_case_whole_streamed_and_chunked(case, tools):
    want = _expected(case)
    text = case["text"]
    assert _comparable(_parse(case, tools, [text]), case) == want
    assert _comparable(_parse(case, tools, list(text)), case) == want
    for seed in range(3):
        assert _comparable(_parse(case, tools, _chunks(text, seed)), case) == want


def test_every_case_names_its_source_and_exclusions_say_why():
    for path in CASES.glob("*.json"):
        data = json.loads(path.read_text())
        assert all(c["source"] for c in data["cases"])
        assert all(e["why"] and e["count"] > 0 for e in data.get("excluded", ()))

"""The translators of call layouts that are not JSON (translate.py, pythonic.py,
gemma4.py) beyond the peers' cases: what they do with text that is no call, and the
variants the families' templates write (Gemma 4's quoted keys, Apertus' usual layout)."""

from __future__ import annotations

import json

import pytest

from parlance.core.events import TextDelta
from parlance.engines.parsing.output import OutputParser
from parlance.engines.parsing.syntax import SYNTAXES
from tests.support.parsed_calls import call_texts


def run(name: str, text: str, pieces: int = 1) -> tuple[str, list[tuple[str, object]]]:
    parser = OutputParser(0, syntax=SYNTAXES[name])
    chunks = [text] if pieces == 1 else list(text)
    events = [e for c in chunks for e in parser.push(c)] + parser.finish()
    calls = call_texts(events)
    content = "".join(e.text for e in events if isinstance(e, TextDelta))
    return content, [(n, json.loads(a)) for n, a in calls]


@pytest.mark.parametrize("pieces", [1, 0])
@pytest.mark.parametrize(("name", "text"), [
    ("lfm2", "<|tool_call_start|>no call here<|tool_call_end|>"),
    ("apertus", "<|tools_prefix|>plain words<|tools_suffix|>"),
    ("gemma4", "<|tool_call>just text<tool_call|>"),
])
def test_a_region_that_is_no_call_comes_back_as_written(name, text, pieces):
    assert run(name, "Before. " + text, pieces) == ("Before. " + text, [])


@pytest.mark.parametrize("pieces", [1, 0])
def test_gemma4_keys_in_string_marks_are_keys(pieces):
    text = '<|tool_call>call:f{<|"|>city<|"|>:<|"|>Paris<|"|>,n:2}<tool_call|>'
    assert run("gemma4", text, pieces) == ("", [("f", {"city": "Paris", "n": 2})])


@pytest.mark.parametrize("pieces", [1, 0])
def test_apertus_takes_the_usual_json_layout_too(pieces):
    text = '<|tools_prefix|>[{"name": "f", "arguments": {"a": 1}}]<|tools_suffix|>'
    assert run("apertus", text, pieces) == ("", [("f", {"a": 1})])


@pytest.mark.parametrize("pieces", [1, 0])
def test_lfm2_python_strings_in_single_quotes_and_tuples(pieces):
    text = "<|tool_call_start|>[f(s='it\\'s', t=(1, 2))]<|tool_call_end|>"
    assert run("lfm2", text, pieces) == ("", [("f", {"s": "it's", "t": [1, 2]})])

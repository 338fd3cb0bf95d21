"""`tests/support/json_prefix.py`, which the real-engine tests trust to judge an answer
that max_tokens cut: every cut of a JSON text is a prefix, and text that no JSON starts
with is not."""

from __future__ import annotations

import json

import pytest

from tests.support.json_prefix import json_prefix

DOCUMENTS = [
    {"name": "Ada \"the first\" \\ Lovelace", "born": 1815, "ratio": -1.5e-3,
     "tags": ["math", "", "é🐱"], "alive": False, "spouse": None, "nested": {"a": [{}, []]}},
    [1, True, "x,y:z]}", [[]], {"k": "v"}],
]


@pytest.mark.parametrize("document", DOCUMENTS)
@pytest.mark.parametrize("layout", [{"ensure_ascii": False}, {"ensure_ascii": True},
                                    {"indent": 2}, {"separators": (",", ":")}])
def test_every_cut_of_a_json_text_is_a_prefix(document, layout):
    text = json.dumps(document, **layout)
    assert all(json_prefix(text[:end]) for end in range(len(text) + 1))


@pytest.mark.parametrize("text", [
    "```json\n{", "Sure! {", '{"a" 1', "{a: 1}", '{"a": 1}}', '{"a": 1]', '{"a": tru}',
    '["x",, 1', '{"a": 1} trailing', "nul!",
])
def test_text_no_json_starts_with_is_not(text):
    assert not json_prefix(text)

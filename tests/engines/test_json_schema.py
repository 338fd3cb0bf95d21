"""The linear-time schema check: a catastrophic pattern answers at once, a pattern the
linear matcher cannot run and a `$ref` to a URL are unreadable (never fetched), and a
breach names the keyword and the place, not the value."""

from __future__ import annotations

import re

import pytest

from parlance.engines.json_schema import SchemaCheck, SchemaUnreadable


def test_a_catastrophic_pattern_is_matched_without_backtracking(monkeypatch):
    def backtracking(*args: object, **kwargs: object) -> None:
        raise AssertionError("Python's backtracking `re` was used")

    check = SchemaCheck({"type": "string", "pattern": "^(a+)+$"})
    for name in ("compile", "search", "match", "fullmatch"):
        monkeypatch.setattr(re, name, backtracking)
    assert check.problem("a" * 34 + "!") == "pattern at /"
    assert check.problem("a" * 34) is None


@pytest.mark.parametrize("schema", [
    {"type": "string", "pattern": "^(?=a)a$"},  # lookaround
    {"type": "string", "pattern": "^(a)\\1$"},  # backreference
    {"$ref": "https://example.com/schema.json"},  # never fetched
    {"type": "strin"},
])
def test_what_the_check_cannot_read_is_unreadable(schema):
    with pytest.raises(SchemaUnreadable):
        SchemaCheck(schema)


def test_a_breach_names_the_keyword_and_the_place_not_the_value():
    check = SchemaCheck({"type": "object", "properties": {"xs": {
        "type": "array", "items": {"type": "string"}, "uniqueItems": True}}})
    breach = check.breach({"xs": ["secret", "secret"]})
    assert breach is not None and (breach.keyword, breach.where) == ("uniqueItems", "/xs")
    assert "secret" not in (check.problem({"xs": ["secret", "secret"]}) or "")

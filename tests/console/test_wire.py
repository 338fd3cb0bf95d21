"""`console.wire`: what a server sent, read with its shape checked: a wrong one is a
one-line `ServerError` naming it."""

from __future__ import annotations

import pytest

from parlance.console.errors import ServerError
from parlance.console.wire import decoded, field, objects, text


def test_an_event_that_is_not_a_json_object_is_said():
    with pytest.raises(ServerError, match="not JSON: {not json"):
        decoded("{not json", "an event")
    with pytest.raises(ServerError, match=r"not a JSON object: \[1, 2\]"):
        decoded("[1,2]", "an event")
    with pytest.raises(ServerError, match="characters"):  # (a long one quoted in part)
        decoded("x" * 10_000, "an event")
    assert decoded('{"a": 1}', "an event") == {"a": 1}


def test_a_field_of_the_wrong_type_is_said():
    with pytest.raises(ServerError, match="'delta' is a number, not text"):
        text({"delta": 5}, "delta", "response.output_text.delta event")
    with pytest.raises(ServerError, match="not a number"):
        field({"n": True}, "n", int, "x")
    assert field({"n": 2}, "n", float, "x") == 2.0
    assert field({"n": None}, "n", int, "x") is None and text({}, "t", "x") == ""
    with pytest.raises(ServerError, match="an item of its 'models' is a number"):
        objects({"models": [1]}, "models", "answer")

"""Long lists are validated a slice at a time (the GIL is let go between slices):
the result and the refusals are those of validating the body whole."""

from __future__ import annotations

import pytest

from parlance.core.errors import InvalidRequest
from parlance.dialects.openai.chat import ChatRequest
from parlance.dialects.openai.completions import CompletionRequest
from parlance.dialects.shared.wire import LIST_SLICE, parse_body

COUNT = 2 * LIST_SLICE + 345


def messages(count: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"m{i}"} for i in range(count)]


def test_a_long_list_is_validated_whole_and_in_order():
    body = parse_body(ChatRequest, {"model": "m", "messages": messages(COUNT),
                                    "tools": [{"type": "function",
                                               "function": {"name": f"t{i}"}}
                                              for i in range(LIST_SLICE + 1)]})
    assert [m.content for m in body.messages] == [f"m{i}" for i in range(COUNT)]
    assert [t.function.name for t in body.tools] == [f"t{i}" for i in range(LIST_SLICE + 1)]


def test_a_bad_item_late_in_a_long_list_is_named_by_its_index():
    bad = messages(COUNT)
    bad[COUNT - 3] = {"role": "nobody", "content": "x"}
    with pytest.raises(InvalidRequest) as info:
        parse_body(ChatRequest, {"model": "m", "messages": bad})
    assert info.value.param == f"messages[{COUNT - 3}].role"


def test_constraints_on_a_long_list_still_hold():
    with pytest.raises(InvalidRequest) as info:  # stop: at most 4
        parse_body(ChatRequest, {"model": "m", "messages": messages(1),
                                 "stop": ["x"] * COUNT})
    assert info.value.param == "stop"


def test_a_union_with_a_long_list():
    ids = list(range(COUNT))
    assert parse_body(CompletionRequest, {"model": "m", "prompt": ids}).prompt == ids
    texts = [str(i) for i in ids]
    assert parse_body(CompletionRequest, {"model": "m", "prompt": texts}).prompt == texts

"""Freeform tools (raw text input) in the output parser: the name-alone layout with
the input on the lines after it, and JSON arguments written for such a tool anyway,
with the text split at every point."""

from __future__ import annotations

import json

import pytest

from parlance.core.accumulate import accumulate
from parlance.core.events import ToolCallArgs
from parlance.engines.parsing.output import OutputParser
from parlance.engines.parsing.syntax import HERMES, LLAMA3_JSON

PATCH = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
FREEFORM = frozenset({"apply_patch"})


def run(text: str, cuts: list[int], **config) -> tuple[str, list[tuple[str, str]], list]:
    parser = OutputParser(syntax=HERMES, freeform=FREEFORM, **config)
    events = []
    bounds = [0, *cuts, len(text)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        events += parser.push(text[a:b])
    events += parser.finish()
    choice = accumulate(events).choice(0)
    return choice.text, [(c.name, c.arguments) for c in choice.tool_calls], events


def every_split(text: str) -> list[list[int]]:
    return [[], list(range(1, len(text))), *([i] for i in range(1, len(text)))]


@pytest.mark.parametrize(("text", "expected"), [
    # the layout Parlance teaches: the name alone, the input on the next lines
    ('Sure. <tool_call>\n{"name": "apply_patch"}\n' + PATCH + "\n</tool_call>",
     ("Sure. ", [("apply_patch", PATCH)])),
    # no line break before the close marker: the input keeps its own last line
    ('<tool_call>{"name": "apply_patch"}\n' + PATCH.rstrip("\n") + "</tool_call>",
     ("", [("apply_patch", PATCH.rstrip("\n"))])),
    # JSON arguments written for it anyway: the string they hold is the input
    ('<tool_call>\n{"name": "apply_patch", "arguments": {"input": ' + json.dumps(PATCH)
     + "}}\n</tool_call>", ("", [("apply_patch", PATCH)])),
    # a function call before it keeps its JSON arguments
    ('<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>\n'
     '<tool_call>\n{"name": "apply_patch"}\nraw\n</tool_call>',
     ("", [("get_time", '{"tz": "UTC"}'), ("apply_patch", "raw")])),
])
def test_freeform_calls_survive_any_split(text, expected):
    for cuts in every_split(text):
        content, calls, _ = run(text, cuts)
        assert (content, calls) == expected, cuts


def test_raw_input_streams_before_the_region_ends():
    text = '<tool_call>\n{"name": "apply_patch"}\n*** Begin Patch\n*** Add File: a'
    parser = OutputParser(syntax=HERMES, freeform=FREEFORM)
    events = parser.push(text)
    streamed = "".join(e.fragment for e in events if isinstance(e, ToolCallArgs))
    assert streamed == "*** Begin Patch\n*** Add File: a"


def test_a_function_named_alone_is_not_a_freeform_call():
    text = '<tool_call>\n{"name": "get_time"}\nraw\n</tool_call>'
    content, calls, _ = run(text, [])
    assert calls == [] and content == text


def test_input_runs_to_the_end_of_the_output_without_a_close_marker():
    parser = OutputParser(syntax=LLAMA3_JSON, freeform=FREEFORM,
                          tool_names=frozenset({"apply_patch"}))
    events = parser.push('<|python_tag|>{"name": "apply_patch"}\n' + PATCH) + parser.finish()
    [call] = accumulate(events).choice(0).tool_calls
    assert (call.name, call.arguments) == ("apply_patch", PATCH.rstrip("\n"))

"""The call readers of the families whose calls are neither JSON objects nor tags:
Llama 4's pythonic lists (pythonic.py), what follows Llama 3's `<|python_tag|>`
(python_tag.py) and Functionary v3.2's recipients (recipient.py). Calls start as soon
as their name is complete; text that is no call stays content; markup never is."""

from __future__ import annotations

import json

from parlance.core.events import Event, TextDelta, ToolCallArgs, ToolCallEnd, ToolCallStart
from parlance.engines.parsing.formats import format_named
from parlance.engines.parsing.output import OutputParser
from parlance.engines.parsing.syntax import THINK

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}
CODE = {"type": "object", "properties": {"code": {"type": "string"}}}


def parser(fmt: str, *tools: str) -> OutputParser:
    entry = format_named(fmt)
    return OutputParser(0, syntax=entry.syntax, reasoning=entry.reasoning or THINK,
                        markup=entry.markup, tool_names=frozenset(tools),
                        schemas={t: CODE if t in ("python", "code_interpreter") else WEATHER
                                 for t in tools})


def run(p: OutputParser, *pieces: str) -> list[Event]:
    return [e for piece in pieces for e in p.push(piece)] + p.finish()


def content(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def calls(events: list[Event]) -> list[tuple[str, object]]:
    out: list[list[str]] = []
    for e in events:
        if isinstance(e, ToolCallStart):
            out.append([e.name, ""])
        elif isinstance(e, ToolCallArgs):
            out[-1][1] += e.fragment
    return [(name, json.loads(args)) for name, args in out]


def test_a_pythonic_call_starts_with_its_name_and_streams_each_argument():
    p = parser("llama4_pythonic", "get_weather")
    started = p.push("[get_weather(")
    assert [e.name for e in started if isinstance(e, ToolCallStart)] == ["get_weather"]
    assert not [e for e in p.push("city='Par") if isinstance(e, ToolCallArgs)]
    args = [e.fragment for e in p.push("is', ") if isinstance(e, ToolCallArgs)]
    assert args == ['{"city": "Paris"']
    rest = p.push("days=3)]") + p.finish()
    assert any(isinstance(e, ToolCallEnd) for e in rest)


def test_a_list_that_is_no_call_is_content():
    for text in ("[1, 2, 3] are the first numbers.", "[citation needed]",
                 "[unknown_tool(a=1)]"):
        p = parser("llama4_pythonic", "get_weather")
        events = run(p, *text)
        assert content(events) == text and not calls(events)


def test_pythonic_text_after_the_start_stays_content():
    events = run(parser("llama4_pythonic", "get_weather"), "See [1] and [get_weather()]")
    assert content(events) == "See [1] and [get_weather()]"


def test_a_llama3_builtin_call_after_the_python_tag():
    p = parser("llama3_json", "brave_search")
    started = p.push('<|python_tag|>brave_search.call(query="')
    assert [e.name for e in started if isinstance(e, ToolCallStart)] == ["brave_search"]
    events = started + run(p, 'weather in \\"Paris\\", today")')
    assert calls(events) == [("brave_search", {"query": 'weather in "Paris", today'})]
    assert content(events) == ""


def test_raw_code_after_the_python_tag_is_a_call_of_the_code_tool_streamed():
    p = parser("llama3_json", "code_interpreter")
    events = p.push("<|python_tag|>import math\n")
    assert [e.name for e in events if isinstance(e, ToolCallStart)] == ["code_interpreter"]
    events += run(p, "print(math.pi)")
    assert calls(events) == [("code_interpreter", {"code": "import math\nprint(math.pi)"})]


def test_json_after_the_python_tag_is_still_read_as_json_calls():
    events = run(parser("llama3_json", "get_weather"),
                 '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}')
    assert calls(events) == [("get_weather", {"city": "Oslo"})]


def test_functionary_v32_text_streams_before_the_next_recipient():
    p = parser("functionary_v3_2", "get_weather")
    assert content(p.push("all\nIt is")) == "It is"
    events = run(p, ' sunny.>>>get_weather\n{"city": "Oslo"}>>>all\nDone.')
    assert content(events) == " sunny.Done."
    assert calls(events) == [("get_weather", {"city": "Oslo"})]


def test_functionary_v32_without_tools_answers_in_plain_text():
    events = run(parser("functionary_v3_2"), *"all\nHello there")
    assert content(events) == "Hello there" and not calls(events)


def test_command_r7b_numbered_calls_stream_from_their_parameters():
    p = parser("command_r7b", "get_weather")
    head = p.push('<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", ')
    assert not [e for e in head if isinstance(e, ToolCallStart)]
    started = p.push('"parameters": {"ci')
    assert [e.name for e in started if isinstance(e, ToolCallStart)] == ["get_weather"]
    events = head + started + run(p, 'ty": "Oslo"}}]<|END_ACTION|>')
    assert calls(events) == [("get_weather", {"city": "Oslo"})]
    assert content(events) == ""


def test_command_r7b_and_granite_answer_wrappers_are_never_content():
    events = run(parser("command_r7b"), "<|START_THINKING|>hm<|END_THINKING|>"
                 "<|START_RESPONSE|>Hi!<|END_RESPONSE|>")
    assert content(events).strip() == "Hi!"
    events = run(parser("granite"), *"<think>hm</think><response>Hi!</response>")
    assert content(events).strip() == "Hi!"


def test_functionary_v31_python_tag_is_code_and_function_tags_are_calls():
    p = parser("functionary_v3_1", "get_weather", "python")
    events = run(p, *'<function=get_weather>{"city": "Oslo"}</function>'
                 "<|python_tag|>print('hey')\nprint(1)")
    assert calls(events) == [("get_weather", {"city": "Oslo"}),
                             ("python", {"code": "print('hey')\nprint(1)"})]
    assert content(events) == ""


def test_a_list_that_is_no_call_streams_as_content_at_once():
    p = parser("llama4_pythonic", "get_weather")
    assert content(p.push("[1]")) == "[1]"
    assert content(p.push(" and more")) == " and more"
    link = parser("llama4_pythonic", "get_weather")
    assert content(link.push("[the docs](https://x.y) say")) == "[the docs](https://x.y) say"


def test_functionary_v32_structured_output_has_no_recipient_line_and_is_content():
    for pieces in (['{"city": "Oslo"}'], list('{"city": "Oslo"}')):
        events = run(parser("functionary_v3_2", "get_weather"), *pieces)
        assert content(events) == '{"city": "Oslo"}' and not calls(events)
    assert content(run(parser("functionary_v3_2"), "Hi")) == "Hi"

"""The output parser on every syntax, with text split at every possible point."""

from __future__ import annotations

import json
import random

import pytest

from parlance.core.accumulate import accumulate
from parlance.core.events import (
    Event,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
)
from parlance.engines.parsing.output import Mode, OutputParser
from parlance.engines.parsing.syntax import (
    HERMES,
    LLAMA3_JSON,
    MISTRAL,
    THINK,
    reasoning_for_template,
    syntax_for_template,
)

TOOLS = frozenset({"get_weather", "get_time"})


def parse(text: str, pieces: list[int] | None = None, **config) -> tuple[list[Event], OutputParser]:
    parser = OutputParser(**config)
    events: list[Event] = []
    cuts = [0, *(pieces or range(1, len(text))), len(text)]
    for a, b in zip(cuts, cuts[1:], strict=False):
        events += parser.push(text[a:b])
    return events + parser.finish(), parser


def splits(text: str, seed: int) -> list[int]:
    rng = random.Random(seed)
    return sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(1, 12))))


def summary(events: list[Event]) -> tuple[str, str, list[tuple[str, dict]]]:
    choice = accumulate(events).choice(0)
    calls = [(c.name, json.loads(c.arguments)) for c in choice.tool_calls]
    return choice.text, choice.reasoning, calls


HERMES_TEXT = ('Let me check. <tool_call>\n{"name": "get_weather", "arguments": '
               '{"city": "Paris", "days": [1, {"x": "}"}]}}\n</tool_call>\n'
               '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
HERMES_CALLS = [("get_weather", {"city": "Paris", "days": [1, {"x": "}"}]}), ("get_time", {})]


@pytest.mark.parametrize("seed", range(30))
def test_hermes_calls_survive_any_token_split(seed):
    events, parser = parse(HERMES_TEXT, splits(HERMES_TEXT, seed), syntax=HERMES)
    assert summary(events) == ("Let me check. ", "", HERMES_CALLS)
    assert parser.calls == 2


def test_hermes_one_character_at_a_time_streams_arguments_in_order():
    events, _ = parse(HERMES_TEXT, syntax=HERMES)
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [s.call_index for s in starts] == [0, 1]
    assert len({s.call_id for s in starts}) == 2 and all(
        s.call_id.startswith("call_") for s in starts)
    first = [e.fragment for e in events if isinstance(e, ToolCallArgs) and e.call_index == 0]
    assert len(first) > 10  # streamed as generated, not in one piece at the end
    assert "".join(first) == '{"city": "Paris", "days": [1, {"x": "}"}]}'
    # start, args..., end per call, never interleaved
    kinds = [type(e).__name__ for e in events if not isinstance(e, TextDelta)]
    assert kinds[0] == "ToolCallStart" and kinds.count("ToolCallEnd") == 2
    assert kinds.index("ToolCallEnd") < kinds.index("ToolCallStart", 1)


def test_hermes_text_after_calls_stays_content_and_arguments_key_order_is_free():
    text = ('<tool_call>{"arguments": {"city": "Rome"}, "name": "get_weather"}</tool_call>'
            " Done.")
    events, _ = parse(text, syntax=HERMES)
    assert summary(events) == ("Done.", "", [("get_weather", {"city": "Rome"})])


def test_not_a_call_inside_markers_is_given_back_as_text():
    text = "<tool_call>I cannot call that</tool_call> sorry"
    events, parser = parse(text, syntax=HERMES)
    assert summary(events)[0] == text
    assert not parser.called


@pytest.mark.parametrize("seed", range(10))
def test_mistral_array_and_name_args_forms(seed):
    text = ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}, '
            '{"name": "get_time", "arguments": {"tz": "CET"}}]')
    events, _ = parse(text, splits(text, seed), syntax=MISTRAL)
    assert summary(events) == ("", "", [("get_weather", {"city": "Oslo"}),
                                        ("get_time", {"tz": "CET"})])
    text = '[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}'
    events, _ = parse(text, splits(text, seed), syntax=MISTRAL)
    assert summary(events) == ("", "", [("get_weather", {"city": "Oslo"})])


@pytest.mark.parametrize("seed", range(10))
def test_llama3_bare_json_and_python_tag(seed):
    text = (' {"name": "get_weather", "parameters": {"city": "Lima"}}; '
            '{"name": "get_time", "parameters": {}}')
    events, _ = parse(text, splits(text, seed), syntax=LLAMA3_JSON, tool_names=TOOLS)
    assert summary(events) == ("", "", [("get_weather", {"city": "Lima"}), ("get_time", {})])
    text = '<|python_tag|>{"name": "get_time", "parameters": {"tz": "UTC"}}'
    events, _ = parse(text, splits(text, seed), syntax=LLAMA3_JSON, tool_names=TOOLS)
    assert summary(events) == ("", "", [("get_time", {"tz": "UTC"})])


def test_llama3_json_answer_that_names_no_tool_is_content():
    text = '{"name": "Ada", "parameters": {"born": 1815}}'
    events, parser = parse(text, syntax=LLAMA3_JSON, tool_names=TOOLS)
    assert summary(events) == (text, "", [])
    assert not parser.called
    events, _ = parse("The answer is {1}.", syntax=LLAMA3_JSON, tool_names=TOOLS)
    assert summary(events)[0] == "The answer is {1}."


@pytest.mark.parametrize("seed", range(20))
def test_reasoning_markers_split_anywhere(seed):
    text = "<think>\nThe user greets me. </thi is not a close.\n</think>\n\nHello!"
    events, parser = parse(text, splits(text, seed), reasoning=THINK)
    assert summary(events) == ("Hello!", "The user greets me. </thi is not a close.\n", [])
    assert parser.mode is Mode.CONTENT
    assert not any(isinstance(e, TextDelta) and "think" in e.text for e in events)


def test_reasoning_opened_by_the_prompt():
    events, _ = parse("Let me see...</think>Yes.", reasoning=THINK, start_in_reasoning=True)
    assert summary(events) == ("Yes.", "Let me see...", [])


def test_reasoning_then_tool_call():
    text = ('<think>Need weather.</think>'
            '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>')
    events, parser = parse(text, reasoning=THINK, syntax=HERMES)
    assert summary(events) == ("", "Need weather.", [("get_weather", {})])
    assert isinstance(events[0], ReasoningDelta)


def test_unterminated_reasoning_at_length_stays_reasoning():
    events, parser = parse("<think>still thinking abo", reasoning=THINK)
    assert summary(events) == ("", "still thinking abo", [])
    assert parser.mode is Mode.REASONING


def test_unterminated_call_at_length_ends_with_the_arguments_it_has():
    events, parser = parse('<tool_call>{"name": "get_weather", "arguments": {"city": "Par',
                           syntax=HERMES)
    assert isinstance(events[-1], ToolCallEnd)
    choice = accumulate(events).choice(0)
    assert [(c.name, c.arguments) for c in choice.tool_calls] == [
        ("get_weather", '{"city": "Par')]
    assert parser.called


def test_unterminated_call_without_a_name_is_dropped_never_text():
    events, parser = parse('Sure <tool_call>{"na', syntax=HERMES)
    assert summary(events) == ("Sure ", "", [])
    assert not parser.called


# -- the token cap cutting a call ------------------------------------

WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
MARKUP = ("<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>", '{"name"')


def assert_no_markup(events: list[Event]) -> None:
    for event in events:
        if isinstance(event, TextDelta):
            assert not any(m in event.text for m in MARKUP), event


@pytest.mark.parametrize("cut", ["<tool_call>", "<tool_call>\n", '<tool_call>\n{"name": "get_',
                                 '<tool_call>\n{"name": "get_weather"',
                                 '<tool_call>\n{"name": "get_weather", "argu',
                                 '<tool_call>\n{"function": {"name": "get_weather", "arg'])
@pytest.mark.parametrize("seed", range(6))
def test_a_call_cut_before_its_name_leaves_no_markup_in_content(cut, seed):
    text = "Checking. " + WEATHER + "\n" + cut  # the cap hit while the second call began
    events, parser = parse(text, splits(text, seed), syntax=HERMES, tool_names=TOOLS)
    assert_no_markup(events)
    assert summary(events) == ("Checking. ", "", [("get_weather", {"city": "Paris"})])
    kinds = [type(e).__name__ for e in events if not isinstance(e, TextDelta)]
    assert kinds == ["ToolCallStart", *["ToolCallArgs"] * (len(kinds) - 2), "ToolCallEnd"]
    assert parser.finish_reason(FinishReason.LENGTH) is FinishReason.LENGTH


@pytest.mark.parametrize(("syntax", "cut"), [
    (MISTRAL, '[TOOL_CALLS][{"name": "get_wea'), (MISTRAL, "[TOOL_CALLS]get_wea"),
    (LLAMA3_JSON, '{"name": "get_wea'), (LLAMA3_JSON, '<|python_tag|>{"na'),
])
def test_other_syntaxes_cut_before_the_name_drop_the_call_too(syntax, cut):
    events, parser = parse(cut, syntax=syntax, tool_names=TOOLS)
    assert events == [] and not parser.called


def test_text_that_never_was_a_call_stays_text_when_the_output_ends_in_it():
    for text, syntax in (("<tool_call>I cannot call th", HERMES),
                         ("[TOOL_CALLS]I think not", MISTRAL),
                         ('{"answer": 4', LLAMA3_JSON)):
        events, _ = parse(text, syntax=syntax, tool_names=TOOLS)
        assert summary(events)[0] == text


# -- a call repeated word for word ends the output -----------------------------------------

@pytest.mark.parametrize("seed", range(10))
def test_an_identical_repeated_call_is_dropped_and_ends_the_output(seed):
    text = WEATHER + "\n" + WEATHER + "\n" + WEATHER.replace("Paris", "Rome") + " more"
    events, parser = parse(text, splits(text, seed), syntax=HERMES, tool_names=TOOLS)
    assert summary(events) == ("", "", [("get_weather", {"city": "Paris"})])
    assert parser.ended and parser.calls == 1
    # whatever cut the output afterwards, it stopped at the repeat, for its calls
    assert parser.finish_reason(FinishReason.LENGTH) is FinishReason.TOOL_CALLS
    assert parser.push("anything") == [] and parser.finish() == []


@pytest.mark.parametrize("seed", range(10))
def test_a_second_call_to_the_same_tool_with_other_arguments_is_a_call(seed):
    paris = WEATHER.replace('"Paris"}', '"Paris", "days": 2}')
    text = paris + "\n" + WEATHER + "\n" + WEATHER.replace("get_weather", "get_time")
    events, parser = parse(text, splits(text, seed), syntax=HERMES, tool_names=TOOLS)
    assert summary(events)[2] == [("get_weather", {"city": "Paris", "days": 2}),
                                  ("get_weather", {"city": "Paris"}),
                                  ("get_time", {"city": "Paris"})]
    assert [e.call_index for e in events if isinstance(e, ToolCallStart)] == [0, 1, 2]
    assert not parser.ended and parser.finish_reason(FinishReason.STOP) is FinishReason.TOOL_CALLS


def test_a_repeat_cut_by_the_cap_is_dropped_and_the_finish_stays_length():
    text = WEATHER + "\n" + WEATHER[:-30]  # the repeat cut in its arguments
    events, parser = parse(text, syntax=HERMES, tool_names=TOOLS)
    assert summary(events) == ("", "", [("get_weather", {"city": "Paris"})])
    assert not parser.ended
    assert parser.finish_reason(FinishReason.LENGTH) is FinishReason.LENGTH


def test_calls_after_a_dropped_repeat_are_numbered_without_a_gap():
    cut = WEATHER.replace("}}\n</tool_call>", "</tool_call>")  # a repeat closed too early
    text = WEATHER + cut + WEATHER.replace("get_weather", "get_time")
    events, parser = parse(text, syntax=HERMES, tool_names=TOOLS)
    assert [(e.name, e.call_index) for e in events if isinstance(e, ToolCallStart)] == [
        ("get_weather", 0), ("get_time", 1)]
    assert {e.call_index for e in events if isinstance(e, ToolCallArgs)} == {0, 1}
    assert summary(events)[2] == [("get_weather", {"city": "Paris"}),
                                  ("get_time", {"city": "Paris"})]


def test_mistral_list_with_a_repeat_keeps_the_calls_before_it():
    text = ('[TOOL_CALLS][{"name": "get_time", "arguments": {}}, '
            '{"name": "get_time", "arguments": {}}, {"name": "get_weather", "arguments": {}}]')
    for seed in range(5):
        events, parser = parse(text, splits(text, seed), syntax=MISTRAL)
        assert summary(events)[2] == [("get_time", {})] and parser.ended


def test_partial_marker_at_the_end_is_released_as_text():
    events, _ = parse("a < b and c <tool", syntax=HERMES, reasoning=THINK)
    assert summary(events)[0] == "a < b and c <tool"


def test_without_syntax_markers_are_plain_text():
    text = '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'
    events, _ = parse(text)
    assert summary(events) == (text, "", [])


def test_syntax_and_markers_detected_from_templates():
    assert syntax_for_template("{{ '<tool_call>' }} {{ tools }}") is HERMES
    assert syntax_for_template("[TOOL_CALLS] {{ tools }}") is MISTRAL
    assert syntax_for_template("<|python_tag|>{{ tools }}") is LLAMA3_JSON
    assert syntax_for_template("{{ messages }}") is HERMES  # the built-in format
    assert reasoning_for_template("{{ '<think>' }}") is THINK
    assert reasoning_for_template("{{ messages }}") is None

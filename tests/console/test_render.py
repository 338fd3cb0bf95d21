"""`console.render.Answer`: the Responses events of one answer (as the server's own
encoder makes them from core events) into what the terminal shows and what the
conversation keeps."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from parlance.console.errors import ServerError
from parlance.console.render import SHOWN_OUTPUT, Answer, stream_error
from parlance.core.errors import EngineFailure, ParlanceError
from parlance.core.events import (
    Event,
    Finish,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    ToolRefused,
    ToolResult,
    ToolsListed,
    Usage,
)
from parlance.core.tools import ToolProvider, ToolSpec
from parlance.dialects.base import DONE, CallFacts, Incoming
from parlance.dialects.openai.responses import OpenAIResponses
from tests.support.encoding import encoded

CALC = ToolProvider("plugin", "calc")
ADD = ToolSpec("add", "Adds two numbers", {"type": "object"})


def events(core: list[Event], failure: ParlanceError | None = None,
           **fields: Any) -> list[dict[str, Any]]:
    """The stream's events for these core events, as the server sends them."""
    dialect = OpenAIResponses()
    call = dialect.parse(Incoming({"model": "m", "input": "hi", "stream": True, **fields}))
    return [frame.data for frame in encoded(dialect.encoder(call, CallFacts("m", ())), core,
                                            failure) if frame.data != DONE]


def fed(core: list[Event], failure: ParlanceError | None = None, **fields: Any) -> Answer:
    answer = Answer()
    for event in events(core, failure, **fields):
        answer.feed(event)
    return answer


def shown(answer: Answer) -> str:
    console = Console(width=80, record=True, force_terminal=False)
    console.print(answer)
    return console.export_text()


def test_reasoning_content_and_calls_in_order():
    answer = fed([ReasoningDelta("think "), ReasoningDelta("hard"), TextDelta("# Title\n\n"),
                  TextDelta("some `code`"), ToolCallStart("c", "f"), ToolCallArgs('{"a"'),
                  ToolCallArgs(": 1}"), ToolCallEnd(), Finish(FinishReason.TOOL_CALLS),
                  Usage(3, 7)],
                 tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}}])
    text = shown(answer)
    assert text.index("think hard") < text.index("Title") < text.index('f({"a": 1})')
    assert "#" not in text and "`" not in text  # Markdown, rendered
    assert answer.kept() == [{"role": "assistant", "content": "# Title\n\nsome `code`"}]
    assert answer.model == "m"
    figures = answer.figures(2.0, stopped=False).plain
    assert "7 tokens" in figures and "3.5 tokens/s" in figures and "function_call" in figures


def test_an_answer_with_nothing_said_is_not_kept():
    answer = Answer()
    for event in events([ReasoningDelta("hmm")])[:-1]:  # (stopped before its end)
        answer.feed(event)
    assert answer.kept() == []
    assert "stopped" in answer.figures(0.5, stopped=True).plain


def test_arguments_still_streaming_are_shown_as_they_are():
    answer = Answer()
    for event in events([ToolCallStart("c", "g"), ToolCallArgs('{"x')])[:-1]:
        if event["type"] != "response.output_item.done":  # (still streaming)
            answer.feed(event)
    assert 'g({"x)' in shown(answer)


def test_the_cap_is_said():
    answer = fed([TextDelta("Once upon"), Finish(FinishReason.LENGTH), Usage(3, 16)],
                 max_output_tokens=16)
    assert "ended: max_output_tokens" in answer.figures(1.0, stopped=False).plain


def test_an_mcp_call_shows_its_result_and_is_kept_with_it():
    answer = fed([ToolsListed(CALC, (ADD,)), ToolCallStart("c", "add", provider=CALC),
                  ToolCallArgs('{"a": 2, "b": 3}'), ToolCallEnd(),
                  ToolResult('[{"type":"text","text":"5"}]'), TextDelta("The sum is 5."),
                  Finish(FinishReason.STOP), Usage(30, 5)],
                 tools=[{"type": "mcp", "server_label": "calc", "require_approval": "never"}])
    text = shown(answer)
    assert text.index('add({"a": 2, "b": 3}) on calc') < text.index(
        '→ [{"type":"text","text":"5"}]') < text.index("The sum is 5.")
    kept = answer.kept()
    assert [item.get("type", "message") for item in kept] == ["mcp_call", "message"]
    assert kept[0]["output"] == '[{"type":"text","text":"5"}]' and kept[0]["name"] == "add"
    assert answer.tools == {"calc": ["add"]}
    assert "ended" not in answer.figures(1.0, stopped=False).plain


def test_an_mcp_call_that_failed_shows_why():
    for outcome, why in ((ToolResult("division by zero", is_error=True), "division by zero"),
                         (ToolRefused("invalid_name", "No tool named 'div'."), "No tool")):
        answer = fed([ToolsListed(CALC, (ADD,)), ToolCallStart("c", "div", provider=CALC),
                      ToolCallArgs("{}"), ToolCallEnd(), outcome, TextDelta("Sorry."),
                      Finish(FinishReason.STOP), Usage(30, 2)],
                     tools=[{"type": "mcp", "server_label": "calc",
                             "require_approval": "never"}])
        assert f"✗ {why}" in shown(answer)
        assert answer.kept()[0]["error"] is not None


def test_a_long_result_is_cut_on_the_screen_only():
    result = "x" * (SHOWN_OUTPUT + 10)
    answer = fed([ToolsListed(CALC, (ADD,)), ToolCallStart("c", "add", provider=CALC),
                  ToolCallArgs("{}"), ToolCallEnd(), ToolResult(result),
                  Finish(FinishReason.STOP), Usage(3, 1)],
                 tools=[{"type": "mcp", "server_label": "calc", "require_approval": "never"}])
    assert "(10 more characters)" in shown(answer)
    assert answer.kept()[0]["output"] == result


def test_a_failed_stream_says_why():
    said = [stream_error(e) for e in events([TextDelta("partial")], EngineFailure("it broke"))]
    assert said[-1] == "it broke" and not any(said[:-1])
    assert stream_error({"type": "error", "code": "x", "message": "bad"}) == "bad"


def test_the_live_view_draws_a_screenful_of_the_end_of_a_huge_answer():
    answer = Answer()
    answer.feed({"type": "response.output_text.delta", "output_index": 0,
                 "delta": "line\n" * 2_000_000 + "THE END"})
    console = Console(width=80, height=24, record=True, force_terminal=False)
    console.print(answer.live)
    live = console.export_text()
    assert live.rstrip().endswith("THE END") and live.count("\n") <= 23
    console.print(answer)
    assert "more characters not shown" in console.export_text()


def test_an_event_of_the_wrong_shape_is_a_server_error():
    answer = Answer()
    for event in ({"type": "response.output_text.delta", "delta": 5},
                  {"type": "response.output_item.added", "item": [1]},
                  {"type": "response.completed", "response": {"usage": {"output_tokens": "7"}}},
                  {"type": "response.output_text.delta", "output_index": "0", "delta": "x"}):
        with pytest.raises(ServerError, match="malformed"):
            answer.feed(event)

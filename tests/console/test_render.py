"""`console.render.Answer`: Chat Completions chunks into what the terminal shows and
what the conversation keeps."""

from __future__ import annotations

from rich.console import Console

from parlance.console.render import Answer


def chunk(delta: dict | None = None, finish: str | None = None, **extra) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"model": "m", "choices": choices, **extra}


def shown(answer: Answer) -> str:
    console = Console(width=80, record=True, force_terminal=False)
    console.print(answer)
    return console.export_text()


def test_reasoning_content_and_calls_in_order():
    answer = Answer()
    for part in (chunk({"role": "assistant"}), chunk({"reasoning_content": "think "}),
                 chunk({"reasoning_content": "hard"}), chunk({"content": "# Title\n\n"}),
                 chunk({"content": "some `code`"}),
                 chunk({"tool_calls": [{"index": 0, "id": "c", "type": "function",
                                        "function": {"name": "f", "arguments": "{\"a\""}}]}),
                 chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
                 chunk({}, "tool_calls"),
                 chunk(usage={"prompt_tokens": 3, "completion_tokens": 7})):
        answer.feed(part)
    text = shown(answer)
    assert text.index("think hard") < text.index("Title") < text.index('f({"a": 1})')
    assert "#" not in text and "`" not in text  # Markdown, rendered
    assert answer.message() == {"role": "assistant", "content": "# Title\n\nsome `code`"}
    figures = answer.figures(2.0, stopped=False).plain
    assert "7 tokens" in figures and "3.5 tokens/s" in figures and "tool_calls" in figures


def test_an_answer_with_nothing_said_is_not_kept():
    answer = Answer()
    answer.feed(chunk({"reasoning_content": "hmm"}))
    assert answer.message() is None
    assert "stopped" in answer.figures(0.5, stopped=True).plain


def test_arguments_still_streaming_are_shown_as_they_are():
    answer = Answer()
    answer.feed(chunk({"tool_calls": [{"index": 0, "function": {"name": "g",
                                                                "arguments": "{\"x"}}]}))
    assert 'g({"x)' in shown(answer)


def test_other_choices_are_ignored():
    answer = Answer()
    answer.feed({"choices": [{"index": 1, "delta": {"content": "other"}}]})
    assert answer.content == ""

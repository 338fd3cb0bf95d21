"""Tagged calls stream as they are written: the call starts once its name is whole,
and its arguments grow with the text (a string parameter's value before its close
tag arrives), so a client sees a long argument being written."""

from __future__ import annotations

from parlance.core.events import ToolCallArgs, ToolCallEnd, ToolCallStart
from parlance.engines.parsing.formats import format_named
from parlance.engines.parsing.output import OutputParser

SCHEMAS = {"write": {"type": "object", "properties": {"path": {"type": "string"},
                                                      "body": {"type": "string"},
                                                      "n": {"type": "integer"}}}}


def _parser(name: str) -> OutputParser:
    fmt = format_named(name)
    return OutputParser(0, syntax=fmt.syntax, reasoning=fmt.reasoning, markup=fmt.markup,
                        tool_names=frozenset(SCHEMAS), schemas=SCHEMAS)


def test_a_qwen3_coder_call_starts_at_its_name_and_its_value_streams():
    parser = _parser("qwen3_coder")
    assert parser.push("<tool_call>\n<function=wri") == []
    (start,) = parser.push("te>\n")
    assert isinstance(start, ToolCallStart) and start.name == "write"
    parser.push("<parameter=body>\nline one\n")
    streamed = parser.push("line two")
    assert "".join(e.fragment for e in streamed if isinstance(e, ToolCallArgs))
    rest = parser.push("\n</parameter>\n<parameter=n>\n3\n</parameter>\n</function>\n"
                       "</tool_call>") + parser.finish()
    assert isinstance(rest[-1], ToolCallEnd)


def test_harmony_arguments_stream_before_the_call_ends():
    parser = _parser("harmony")
    events = parser.push("<|channel|>analysis<|message|>think<|end|><|start|>assistant"
                         "<|channel|>commentary to=functions.write <|constrain|>json"
                         '<|message|>{"path": "a.txt", "bo')
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "ReasoningDelta" and "ToolCallStart" in kinds
    assert kinds[-1] == "ToolCallArgs" and "ToolCallEnd" not in kinds
    end = parser.push('dy": "x"}') + parser.finish()  # <|call|> ends the output
    assert isinstance(end[-1], ToolCallEnd)


def test_text_that_only_looks_like_a_call_start_stays_content():
    parser = _parser("glm45")
    events = parser.push("<tool_call>nosuchtool\n<arg_key>a</arg_key></tool_call>")
    events += parser.finish()
    assert not any(isinstance(e, ToolCallStart) for e in events)

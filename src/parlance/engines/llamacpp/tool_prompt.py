"""Tools for models whose chat template knows none: Parlance's built-in prompt.

The tools are described in the system message and the model is asked to answer
in the Hermes format (`<tool_call>{…}</tool_call>`), which the output parser and
the call grammar understand. Earlier calls and their results are spelled the
same way, as plain assistant and user text, so any template can render them.

A freeform tool (raw text input) is shown as a function of one string, `input`,
whose description says how it is called: its name alone, then the raw input on
the lines after it (the layout `engines/grammar.py` enforces).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from parlance.core.messages import Message
from parlance.core.tools import ToolSpec
from parlance.engines.parsing.spelling import spell_calls
from parlance.engines.parsing.syntax import ToolSyntax

PREAMBLE = (
    "You can call functions. Their signatures, as JSON Schema, are inside <tools></tools>:\n"
    "<tools>\n{tools}\n</tools>\n"
    "To call a function, answer with one <tool_call></tool_call> block per call, each "
    "holding a JSON object with the function's name and arguments:\n"
    '<tool_call>\n{{"name": "<function-name>", "arguments": <arguments-object>}}\n</tool_call>'
)
FREEFORM_PREAMBLE = (
    "\nA function whose description says it takes raw text is called with its name "
    "alone, its input written as is on the lines after it:\n"
    '<tool_call>\n{"name": "<function-name>"}\n<raw input>\n</tool_call>'
)


def tool_schemas(tools: Sequence[ToolSpec]) -> list[dict]:
    """Tools as chat templates (and the OpenAI API) spell them."""
    return [{"type": "function",
             "function": {"name": t.name, "description": _description(t),
                          "parameters": INPUT_PARAMETERS if t.freeform else t.parameters}}
            for t in tools]


INPUT_PARAMETERS = {"type": "object", "properties": {"input": {"type": "string"}},
                    "required": ["input"]}


def _description(tool: ToolSpec) -> str:
    if not tool.freeform:
        return tool.description
    how = (f"This tool takes raw text, not JSON: call it with its name alone, "
           f'{{"name": "{tool.name}"}}, and write its input as is on the lines after that.')
    if tool.grammar is not None:
        how += (f" The input must match this {tool.grammar.syntax} grammar:\n"
                f"{tool.grammar.definition}")
    return f"{tool.description}\n\n{how}" if tool.description else how


def describe_tools(tools: Sequence[ToolSpec]) -> str:
    lines = "\n".join(json.dumps(s, ensure_ascii=False) for s in tool_schemas(tools))
    prompt = PREAMBLE.format(tools=lines)
    return prompt + FREEFORM_PREAMBLE if any(t.freeform for t in tools) else prompt


def _spell_call(name: str, arguments: str, freeform: bool = False) -> str:
    if freeform:
        header = json.dumps({"name": name}, ensure_ascii=False)
        return f"<tool_call>\n{header}\n{arguments}\n</tool_call>"
    try:
        args = json.loads(arguments)
    except json.JSONDecodeError:
        args = arguments
    body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def _spelled(message: Message) -> Message:
    if message.role == "tool":
        return Message("user", f"<tool_response>\n{message.content}\n</tool_response>")
    if message.tool_calls:
        calls = "\n".join(_spell_call(c.name, c.arguments, c.freeform)
                          for c in message.tool_calls)
        content = f"{message.content}\n{calls}" if message.content else calls
        return replace(message, content=content, tool_calls=())
    return message


def with_builtin_tools(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[Message]:
    """The conversation with tools described and calls spelled as text. Results of
    calls made together go in one user turn, as Hermes' own templates group them:
    templates that demand alternating roles (Gemma's) refuse two user turns in a row."""
    out: list[Message] = []
    for before, message in zip((None, *messages), messages, strict=False):
        spelled = _spelled(message)
        if message.role == "tool" and before is not None and before.role == "tool":
            out[-1] = replace(out[-1], content=f"{out[-1].content}\n{spelled.content}")
        else:
            out.append(spelled)
    if not tools:
        return out
    prompt = describe_tools(tools)
    if out and out[0].role in ("system", "developer"):
        out[0] = replace(out[0], content=f"{out[0].content}\n\n{prompt}")
    else:
        out.insert(0, Message("system", prompt))
    return out


NATIVE_PREAMBLE = (
    "You can call functions. Their signatures, as JSON Schema, are inside <tools></tools>:\n"
    "<tools>\n{tools}\n</tools>\n"
    "To call functions, answer with their names and arguments in this format:\n{example}"
)


def with_tools_described(messages: Sequence[Message], tools: Sequence[ToolSpec],
                         syntax: ToolSyntax) -> list[Message]:
    """For a template that writes calls and results in its family's markup but takes no
    tool definitions (DeepSeek R1's and V3's): the tools described in the system message,
    the call format shown in that same markup; the turns go to the template as they are."""
    out = list(messages)
    if not tools:
        return out
    lines = "\n".join(json.dumps(s, ensure_ascii=False) for s in tool_schemas(tools))
    example = spell_calls(syntax, [("function_name", {"argument": "value"})])
    prompt = NATIVE_PREAMBLE.format(tools=lines, example=example)
    if out and out[0].role in ("system", "developer"):
        out[0] = replace(out[0], content=f"{out[0].content}\n\n{prompt}")
    else:
        out.insert(0, Message("system", prompt))
    return out


def with_system_word(messages: Sequence[Message], word: str) -> tuple[Message, ...]:
    """The conversation with `word` ending its system message (one made when there is
    none): how Nemotron's template is told to think or not."""
    out = list(messages)
    if out and out[0].role in ("system", "developer"):
        out[0] = replace(out[0], content=f"{out[0].content}\n{word}".lstrip("\n"))
    else:
        out.insert(0, Message("system", word))
    return tuple(out)

"""The tool-call and reasoning syntaxes models are trained on.

A syntax says how a call region is marked in the generated text (what the
parser looks for) and how calls are laid out (what a grammar forces):

- Hermes/Qwen: `<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`, one
  call per block, blocks one after another. Also Parlance's built-in format for
  templates that know no tools.
- Mistral: `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]` to the end of the
  output (and the newer `[TOOL_CALLS]name[ARGS]{…}`).
- Llama 3 JSON: the whole output is `{"name": …, "parameters": {…}}`, optionally
  after `<|python_tag|>`; several calls are separated by `;`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ToolSyntax:
    name: str
    open: str  # marker that opens a call region
    close: str | None  # marker that closes it; None: the region runs to the end
    args_key: str  # the key forced calls carry their arguments under
    bare_json: bool = False  # a region also opens at a '{' that starts the output
    item_open: str = ""  # forced layout: list_open item (list_sep item)* list_close
    item_close: str = ""
    list_open: str = ""
    list_sep: str = ""
    list_close: str = ""


HERMES = ToolSyntax("hermes", "<tool_call>", "</tool_call>", "arguments",
                    item_open="<tool_call>\n", item_close="\n</tool_call>", list_sep="\n")
MISTRAL = ToolSyntax("mistral", "[TOOL_CALLS]", None, "arguments",
                     list_open="[TOOL_CALLS][", list_sep=", ", list_close="]")
LLAMA3_JSON = ToolSyntax("llama3_json", "<|python_tag|>", None, "parameters",
                         bare_json=True, list_sep="; ")

SYNTAXES = {s.name: s for s in (HERMES, MISTRAL, LLAMA3_JSON)}


@dataclass(frozen=True, slots=True)
class ReasoningMarkers:
    open: str
    close: str


THINK = ReasoningMarkers("<think>", "</think>")


def syntax_for_template(source: str) -> ToolSyntax:
    """The syntax a chat template teaches its model; Hermes when it teaches none."""
    if "[TOOL_CALLS]" in source:
        return MISTRAL
    if "<|python_tag|>" in source or ('"parameters"' in source and "<tool_call>" not in source
                                      and "tools" in source):
        return LLAMA3_JSON
    return HERMES


def reasoning_for_template(source: str) -> ReasoningMarkers | None:
    return THINK if THINK.open in source else None

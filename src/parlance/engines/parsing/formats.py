"""The chat formats of the model families: one `ChatFormat` entry per family.

An entry says how to recognise the family's chat template (every string of
`detect` appears in it, as llama.cpp's common/chat.cpp sniffs templates), how its
model marks reasoning and tool calls (syntax.py), what the model writes around
its answer that is markup, never content (harmony's headers), the tokens it ends
a turn on, and the switch its template takes to turn thinking on or off.

Adding a family is adding one entry to `FORMATS` (first match wins, so a more
specific entry goes before a more general one). Look one up with
`format_for_template(source)` (detection) or `format_named(name)` (an override).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from parlance.engines.parsing.syntax import (
    APERTUS,
    APERTUS_INNER,
    COMMAND_R7B,
    COMMAND_R7B_MARKUP,
    COMMAND_R7B_THINK,
    DEEPSEEK_R1,
    DEEPSEEK_V31,
    DEEPSEEK_V32,
    FIREFUNCTION_V2,
    FUNCTIONARY_V31,
    FUNCTIONARY_V32,
    GEMMA4,
    GEMMA4_THOUGHT,
    GLM45,
    GRANITE,
    GRANITE_MARKUP,
    HARMONY,
    HARMONY_ANALYSIS,
    HARMONY_MARKUP,
    HERMES,
    KIMI_K2,
    LFM2,
    LLAMA3_JSON,
    LLAMA4_PYTHONIC,
    MINIMAX_M2,
    MISTRAL,
    MISTRAL_THINK,
    NEMOTRON_V2,
    PHI4,
    QWEN3_CODER,
    SEED_OSS,
    SEED_THINK,
    THINK,
    ReasoningMarkers,
    ToolSyntax,
)

log = logging.getLogger("parlance.engine")


@dataclass(frozen=True, slots=True)
class ChatFormat:
    name: str
    title: str  # the families it covers, for people
    detect: tuple[str, ...]  # all of these in a template: this format
    syntax: ToolSyntax  # how calls are written (and forced)
    reasoning: ReasoningMarkers | None = None  # None: from the template (`<think>` if named)
    markup: tuple[str, ...] = ()  # dropped from content
    # with markup: the marker that ends a message's header, which runs from any other
    # markup marker (harmony's `<|channel|>final <|constrain|>json<|message|>`): dropped
    header_close: str = ""
    stops: tuple[str, ...] = ()  # the turn ends on these
    thinking_switch: str | None = None  # None: from the template (enable_thinking / effort)
    native_tools: bool = True  # False: the template knows no tools; the built-in prompt
    # history: the template writes one call a message (harmony), so a turn with several
    # goes to it as one message per call
    call_per_message: bool = False
    # history: the template renders no `tool_calls` (LFM2), so earlier calls are written
    # into the assistant's content in the family's markup, as llama.cpp's handler does
    calls_in_content: bool = False
    # thinking turned on / off by a word in the system message (Nemotron's `/think`,
    # `/no_think`), not by a template variable
    thinking_flags: tuple[str, str] | None = None
    # a call (the syntax's open marker) ends unclosed reasoning (Qwen3, Qwen3.5)
    call_ends_reasoning: bool = False

    def reasoning_markers(self, found: ReasoningMarkers | None) -> ReasoningMarkers | None:
        """The entry's reasoning markers, else those `found` in its template."""
        markers = self.reasoning or found
        if markers and self.call_ends_reasoning:
            return replace(markers, call_ends=True)
        return markers


# DeepSeek ends a turn at `<｜end▁of▁sentence｜>`; a turn header it writes (a random or
# confused model) ends it too, rather than reaching the answer.
_DEEPSEEK_STOPS = ("<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>")

# Gemma 4, Phi-4-mini, LFM2, Nemotron Nano v2, Apertus, DeepSeek V3.2 (issue 38).
_FAMILIES_2: tuple[ChatFormat, ...] = (
    ChatFormat("deepseek_v3_2", "DeepSeek V3.2 (DSML)", ("｜DSML｜",), DEEPSEEK_V32,
               reasoning=THINK, stops=_DEEPSEEK_STOPS),
    ChatFormat("gemma4", "Gemma 4", ("<|tool_call>",), GEMMA4, reasoning=GEMMA4_THOUGHT,
               markup=("<|channel>", "<channel|>"), stops=("<turn|>", "<|tool_response>")),
    ChatFormat("phi4", "Phi-4-mini", ("<|/tool_call|>",), PHI4, stops=("<|end|>",)),
    # LFM2.5-8B-A1B thinks in `<think>` (its template names it); LFM2 does not
    ChatFormat("lfm2", "LFM2 (Python calls)", ("<|tool_list_start|>",), LFM2,
               stops=("<|im_end|>",), calls_in_content=True),
    ChatFormat("nemotron_v2", "Nemotron Nano v2", ("<TOOLCALL>",), NEMOTRON_V2,
               reasoning=THINK, stops=("<SPECIAL_12>",), thinking_flags=("/think", "/no_think")),
    ChatFormat("apertus", "Apertus", ("<|tools_prefix|>",), APERTUS, reasoning=APERTUS_INNER,
               stops=("<|assistant_end|>", "<|tools_suffix|>")),
)
# Gemma 3 (and 2) teach no tool syntax: the built-in prompt, said so by name.
GEMMA3 = ChatFormat("gemma3", "Gemma 2, Gemma 3 (no native tools)", ("<start_of_turn>",),
                    HERMES, stops=("<end_of_turn>",), native_tools=False)

FORMATS: tuple[ChatFormat, ...] = (
    *_FAMILIES_2,
    ChatFormat("harmony", "gpt-oss (harmony)", ("<|channel|>",), HARMONY,
               reasoning=HARMONY_ANALYSIS, markup=HARMONY_MARKUP, header_close="<|message|>",
               stops=("<|call|>", "<|return|>"), thinking_switch="reasoning_effort",
               call_per_message=True),
    ChatFormat("seed_oss", "Seed-OSS", ("<seed:tool_call>",), SEED_OSS, reasoning=SEED_THINK,
               stops=("<seed:eos>",)),
    ChatFormat("minimax_m2", "MiniMax-M2", ("<minimax:tool_call>",), MINIMAX_M2,
               reasoning=THINK),
    ChatFormat("kimi_k2", "Kimi K2", ("<|tool_calls_section_begin|>",), KIMI_K2,
               stops=("<|im_end|>",)),
    ChatFormat("deepseek_r1", "DeepSeek R1 (and its distills), V3",
               ("<｜tool▁sep｜>' + tool['function']['name']",), DEEPSEEK_R1, reasoning=THINK,
               stops=_DEEPSEEK_STOPS),
    ChatFormat("deepseek_v3_1", "DeepSeek V3.1", ("<｜tool▁sep｜>",), DEEPSEEK_V31,
               reasoning=THINK, stops=_DEEPSEEK_STOPS, thinking_switch="thinking"),
    ChatFormat("glm45", "GLM-4.5, 4.6, 4.7", ("<arg_key>",), GLM45, reasoning=THINK,
               stops=("<|user|>", "<|observation|>")),
    ChatFormat("qwen3_coder", "Qwen3-Coder, Qwen3.5 (XML calls)", ("<function=", "<parameter="),
               QWEN3_CODER, stops=("<|im_end|>",), call_ends_reasoning=True),
    ChatFormat("magistral", "Magistral, Ministral reasoning ([THINK])",
               ("[THINK]", "[TOOL_CALLS]"), MISTRAL, reasoning=MISTRAL_THINK),
    ChatFormat("mistral_nemo", "Mistral Nemo, Small, Devstral", ("[TOOL_CALLS]",), MISTRAL),
    # -- Llama 4 pythonic, FireFunction v2, Functionary v3.1, Command R7B, Granite --
    ChatFormat("functionary_v3_1", "Functionary v3.1 (Llama 3.1)", ("<function=", "ipython"),
               FUNCTIONARY_V31, stops=("<|eom_id|>", "<|eot_id|>")),
    ChatFormat("functionary_v3_2", "Functionary v3.2", (">>>all",), FUNCTIONARY_V32,
               stops=("<|eom_id|>", "<|eot_id|>")),
    ChatFormat("firefunction_v2", "FireFunction v2", (" functools[",), FIREFUNCTION_V2,
               stops=("<|eot_id|>",)),
    ChatFormat("llama4_pythonic", "Llama 4 (pythonic calls)", ("<|header_start|>", "[func_name1("),
               LLAMA4_PYTHONIC, stops=("<|eot|>", "<|eom|>")),
    ChatFormat("command_r7b", "Command R7B", ("<|START_ACTION|>",), COMMAND_R7B,
               reasoning=COMMAND_R7B_THINK, markup=COMMAND_R7B_MARKUP,
               stops=("<|END_OF_TURN_TOKEN|>",)),
    ChatFormat("granite", "Granite 3.x", ("<|start_of_role|>", "<|tool_call|>"), GRANITE,
               reasoning=THINK, markup=GRANITE_MARKUP, stops=("<|end_of_text|>",),
               thinking_switch="thinking", calls_in_content=True),
    ChatFormat("granite_4", "Granite 4.0", ("<|start_of_role|>", "<tool_call>"), HERMES,
               stops=("<|end_of_text|>",)),
    ChatFormat("hermes", "Hermes 2 Pro, Qwen 2.5, Qwen3, QwQ", ("<tool_call>",), HERMES,
               stops=("<|im_end|>",), call_ends_reasoning=True),
    ChatFormat("llama3_json", "Llama 3.1, 3.2, 3.3 (JSON calls, builtin tools)",
               ("<|python_tag|>",),
               LLAMA3_JSON, stops=("<|eom_id|>", "<|eot_id|>")),
    GEMMA3,
)
# A template that teaches no call syntax of its own (Gemma 3, SmolLM2): Parlance's
# built-in tool prompt in Hermes markup.
GENERIC = ChatFormat("generic", "any other template (built-in tool prompt)", (), HERMES,
                     native_tools=False)
_BY_NAME = {f.name: f for f in (*FORMATS, GENERIC)}
_warned: set[str] = set()


def format_names() -> tuple[str, ...]:
    return tuple(_BY_NAME)


def format_named(name: str) -> ChatFormat:
    """An entry by name (`--chat-format`, a preset's `chat_format`); KeyError names the
    known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown chat format {name!r}; known: {', '.join(_BY_NAME)}") from None


def _llama3_like(source: str) -> bool:
    return ('"parameters"' in source and "<tool_call>" not in source and "tools" in source)


def format_for_template(source: str) -> ChatFormat:
    """The format a chat template teaches its model."""
    for entry in FORMATS:
        if all(marker in source for marker in entry.detect):
            return entry
    if _llama3_like(source):
        return _BY_NAME["llama3_json"]
    if "tools" in source:
        digest = str(hash(source))
        if digest not in _warned:
            _warned.add(digest)
            log.warning("the chat template mentions tools in no format Parlance knows; "
                        "assuming %s (override with --chat-format)", GENERIC.syntax.name)
    return GENERIC


def family_table() -> list[dict[str, str]]:
    """The docs' table of families, one row a format, from the registry itself."""
    rows = []
    for entry in (*FORMATS, GENERIC):
        reasoning = entry.reasoning
        rows.append({
            "format": entry.name,
            "families": entry.title,
            "reasoning": (f"`{reasoning.open}` … `{reasoning.close}`" if reasoning
                          else "`<think>` when the template has it"),
            "tools": (f"`{entry.syntax.open}`" if entry.native_tools
                      else "built-in prompt (Hermes markup)"),
            "forced calls": "in its own markup" if entry.native_tools else "Hermes markup",
            "thinking switch": (f"`{entry.thinking_flags[0]}` / `{entry.thinking_flags[1]}` "
                                "in the system message" if entry.thinking_flags
                                else entry.thinking_switch or "from the template"),
        })
    return rows


def family_table_markdown() -> str:
    """`family_table()` as a Markdown table (the docs' generated `families` section)."""
    rows = family_table()
    heads = list(rows[0])
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    lines += ["| " + " | ".join(row[h].replace("|", "\\|") for h in heads) + " |"
              for row in rows]
    return "\n".join(lines)

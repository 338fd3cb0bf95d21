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

The other families mark a call's name and arguments with tags of their own
(`Tagged`): a call opens with `call_open`, its name runs to one of `name_end`, then
either JSON arguments (from the first `{`) or key/value parameters
(`<parameter=K>v</parameter>`, `<arg_key>k</arg_key><arg_value>v</arg_value>`), and the
call ends at `call_close` (or with its region). `tagged.py` parses them.
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
    tagged: Tagged | None = None  # the call's own tags (tagged.py), instead of JSON
    # how one call is written inside the region (translate.py): "json" `{"name": …,
    # "arguments": …}`; "keyed" `{"NAME": {…}}` (Apertus); "pythonic" `NAME(k=v, …)`
    # (LFM2); "gemma4" `call:NAME{k:v,…}` with `<|"|>` strings (Gemma 4)
    layout: str = "json"
    marks: tuple[str, ...] = ()  # special tokens inside a call's arguments (Gemma 4's)
    # the region's own reader instead of JSON calls: "pythonic" (`[f(a=1), g()]`,
    # pythonic.py; a region also opens at a '[' that starts the output), "python_tag"
    # (after Llama 3's `<|python_tag|>`: JSON, a builtin `name.call(k=v)` or raw code) or
    # "recipient" (Functionary v3.2: the whole output, recipient.py)
    region: str = ""
    code_open: str = ""  # also opens a region to the end, read as after `<|python_tag|>`
    name_key: str = "name"  # the key a JSON call names its tool under (forced layout)
    id_key: str = ""  # a key a JSON call numbers itself under first (Command R7B)


@dataclass(frozen=True, slots=True)
class Params:
    """Key/value parameters: key_open KEY key_close value_open VALUE value_close."""

    key_open: str
    key_close: str
    value_open: str
    value_close: str
    pad: str = ""  # forced layout: around a value (Qwen3-Coder's line breaks)
    # attributes between key_close and value_open (DSML's ` string="true"`), skipped when
    # parsed; forced layout: (for a string value, for any other)
    attrs: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Tagged:
    call_open: str  # "" : the call starts where the region does (one call a region)
    name_end: tuple[str, ...]  # the first of these ends the name (not consumed)
    call_close: str  # "" : the call ends with its region
    params: Params | None = None  # None: JSON arguments from the first '{'
    name_prefix: str = ""  # dropped from a name (Kimi's `functions.`)
    name_suffix_sep: str = ""  # the name ends before it (Kimi's `:0` index)
    # forced layout: item = before_name NAME after_name ARGS after_args
    before_name: str = ""
    after_name: str = ""
    after_args: str = ""


HERMES = ToolSyntax("hermes", "<tool_call>", "</tool_call>", "arguments",
                    item_open="<tool_call>\n", item_close="\n</tool_call>", list_sep="\n")
MISTRAL = ToolSyntax("mistral", "[TOOL_CALLS]", None, "arguments",
                     list_open="[TOOL_CALLS][", list_sep=", ", list_close="]")
LLAMA3_JSON = ToolSyntax("llama3_json", "<|python_tag|>", None, "parameters",
                         bare_json=True, list_sep="; ", region="python_tag")

_XML_PARAMS = Params("<parameter=", ">", "", "</parameter>", pad="\n")
QWEN3_CODER = ToolSyntax(
    "qwen3_coder", "<tool_call>", "</tool_call>", "arguments",
    tagged=Tagged("<function=", (">",), "</function>", _XML_PARAMS,
                  before_name="<tool_call>\n<function=", after_name=">\n",
                  after_args="</function>\n</tool_call>"), list_sep="\n")
SEED_OSS = ToolSyntax(
    "seed_oss", "<seed:tool_call>", "</seed:tool_call>", "arguments",
    tagged=Tagged("<function=", (">",), "</function>", _XML_PARAMS,
                  before_name="<seed:tool_call>\n<function=", after_name=">\n",
                  after_args="</function>\n</seed:tool_call>"), list_sep="\n")
MINIMAX_M2 = ToolSyntax(
    "minimax_m2", "<minimax:tool_call>", "</minimax:tool_call>", "arguments",
    tagged=Tagged('<invoke name="', ('">',), "</invoke>",
                  Params('<parameter name="', '">', "", "</parameter>"),
                  before_name='<minimax:tool_call>\n<invoke name="', after_name='">\n',
                  after_args="</invoke>\n</minimax:tool_call>"), list_sep="\n")
GLM45 = ToolSyntax(
    "glm45", "<tool_call>", "</tool_call>", "arguments",
    tagged=Tagged("", ("\n", "<arg_key>"), "",
                  Params("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
                  before_name="<tool_call>", after_name="\n", after_args="</tool_call>"),
    list_sep="\n")
DEEPSEEK_R1 = ToolSyntax(
    "deepseek_r1", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "arguments",
    tagged=Tagged("<｜tool▁call▁begin｜>", ("\n",), "<｜tool▁call▁end｜>",
                  name_prefix="function<｜tool▁sep｜>",
                  before_name="<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>",
                  after_name="\n```json\n",
                  after_args="\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"))
DEEPSEEK_V31 = ToolSyntax(
    "deepseek_v3_1", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "arguments",
    tagged=Tagged("<｜tool▁call▁begin｜>", ("<｜tool▁sep｜>",), "<｜tool▁call▁end｜>",
                  before_name="<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>",
                  after_name="<｜tool▁sep｜>",
                  after_args="<｜tool▁call▁end｜><｜tool▁calls▁end｜>"))
KIMI_K2 = ToolSyntax(
    "kimi_k2", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "arguments",
    tagged=Tagged("<|tool_call_begin|>", ("<|tool_call_argument_begin|>",), "<|tool_call_end|>",
                  name_prefix="functions.", name_suffix_sep=":",
                  before_name="<|tool_calls_section_begin|><|tool_call_begin|>functions.",
                  after_name=":0<|tool_call_argument_begin|>",
                  after_args="<|tool_call_end|><|tool_calls_section_end|>"))
# gpt-oss: `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>`
# (`to=` may also come before the channel); `<|call|>` ends the output.
HARMONY = ToolSyntax(
    "harmony", "to=functions.", "<|call|>", "arguments",
    tagged=Tagged("", (" ", "<|channel|>", "<|constrain|>", "<|message|>"), "",
                  before_name="<|channel|>commentary to=functions.",
                  after_name=" <|constrain|>json<|message|>", after_args="<|call|>"))

# -- Gemma 4, Phi-4-mini, LFM2, Nemotron Nano v2, Apertus, DeepSeek V3.2 -------------
GEMMA4_STRING = '<|"|>'  # Gemma 4's string delimiter, one special token
# Gemma 4: `<|tool_call>call:NAME{key:value,…}<tool_call|>`, one call a block, strings
# between `<|"|>` marks (gemma4.py).
GEMMA4 = ToolSyntax("gemma4", "<|tool_call>", "<tool_call|>", "arguments", layout="gemma4",
                    marks=(GEMMA4_STRING,), item_open="<|tool_call>", item_close="<tool_call|>")
# Phi-4-mini: `<|tool_call|>{"name": …, "arguments": {…}}<|/tool_call|>`, one call a block.
PHI4 = ToolSyntax("phi4", "<|tool_call|>", "<|/tool_call|>", "arguments",
                  item_open="<|tool_call|>", item_close="<|/tool_call|>")
# LFM2: `<|tool_call_start|>[NAME(key=value, …), …]<|tool_call_end|>` (Python call syntax,
# pythonic.py; a JSON list of `{"name": …, "arguments": …}` objects is taken too).
LFM2 = ToolSyntax("lfm2", "<|tool_call_start|>", "<|tool_call_end|>", "arguments",
                  layout="pythonic", list_open="<|tool_call_start|>[", list_sep=", ",
                  list_close="]<|tool_call_end|>")
# Nemotron Nano v2: `<TOOLCALL>[{"name": …, "arguments": {…}}, …]</TOOLCALL>`.
NEMOTRON_V2 = ToolSyntax("nemotron_v2", "<TOOLCALL>", "</TOOLCALL>", "arguments",
                         list_open="<TOOLCALL>[", list_sep=", ", list_close="]</TOOLCALL>")
# Apertus: `<|tools_prefix|>[{"NAME": {…}}, …]<|tools_suffix|>` (the name is the key).
APERTUS = ToolSyntax("apertus", "<|tools_prefix|>", "<|tools_suffix|>", "arguments",
                     layout="keyed", list_open="<|tools_prefix|>[", list_sep=", ",
                     list_close="]<|tools_suffix|>")
# DeepSeek V3.2's DSML: `<｜DSML｜function_calls>` blocks of `<｜DSML｜invoke name="…">`
# with `<｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>`.
_DSML = "｜DSML｜"
DEEPSEEK_V32 = ToolSyntax(
    "deepseek_v3_2", f"<{_DSML}function_calls>", f"</{_DSML}function_calls>", "arguments",
    tagged=Tagged(f'<{_DSML}invoke name="', ('">',), f"</{_DSML}invoke>",
                  Params(f'<{_DSML}parameter name="', '"', ">", f"</{_DSML}parameter>",
                         attrs=(' string="true"', ' string="false"')),
                  before_name=f'<{_DSML}function_calls>\n<{_DSML}invoke name="',
                  after_name='">\n',
                  after_args=f"</{_DSML}invoke>\n</{_DSML}function_calls>"), list_sep="\n")

# -- Llama 4 pythonic, FireFunction v2, Functionary v3.1, Command R7B, Granite 3.3 --
# Llama 4 (vLLM's pythonic template): `[get_weather(city="Paris"), get_time()]`, also
# inside `<|python_start|>` … `<|python_end|>`.
LLAMA4_PYTHONIC = ToolSyntax("llama4_pythonic", "<|python_start|>", "<|python_end|>",
                             "arguments", list_open="[", list_sep=", ", list_close="]",
                             region="pythonic")
# FireFunction v2: ` functools[{"name": …, "arguments": {…}}, …]` to the end.
FIREFUNCTION_V2 = ToolSyntax("firefunction_v2", "functools[", None, "arguments",
                             list_open=" functools[", list_sep=", ", list_close="]")
# Functionary v3.1 (Llama 3.1 based): `<function=NAME>{…}</function>`, one call a tag.
# `<|python_tag|>` then raw code calls the python tool, as in Llama 3.1.
FUNCTIONARY_V31 = ToolSyntax(
    "functionary_v3_1", "<function=", "</function>", "arguments",
    tagged=Tagged("", (">",), "", before_name="<function=", after_name=">",
                  after_args="</function>"), code_open="<|python_tag|>")
# Command R7B: `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": …, "parameters": …}]
# <|END_ACTION|>`.
COMMAND_R7B = ToolSyntax("command_r7b", "<|START_ACTION|>", "<|END_ACTION|>", "parameters",
                         list_open="<|START_ACTION|>[", list_sep=", ",
                         list_close="]<|END_ACTION|>", name_key="tool_name",
                         id_key="tool_call_id")
# Granite 3.3: `<|tool_call|>[{"name": …, "arguments": {…}}, …]` to the end.
GRANITE = ToolSyntax("granite", "<|tool_call|>", None, "arguments",
                     list_open="<|tool_call|>[", list_sep=", ", list_close="]")

# Functionary v3.2: `>>>NAME\n{…}` one after another; `>>>all\n` is text for the user.
# The generation prompt ends with the first `>>>` (recipient.py).
FUNCTIONARY_V32 = ToolSyntax(
    "functionary_v3_2", ">>>", None, "arguments", list_sep=">>>", region="recipient",
    tagged=Tagged("", ("\n",), "", after_name="\n"))

# Markers that are one special token in their family's vocabulary (a grammar spells them
# by token id, and the engine spells them in the text it parses).
SPECIAL_MARKERS = ("<|channel|>", "<|constrain|>", "<|message|>", "<|call|>", "<|start|>",
                   "<|end|>", "<|return|>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
                   "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
                   "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                   "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
                   "<seed:tool_call>", "</seed:tool_call>", "<seed:think>", "</seed:think>",
                   "[THINK]", "[/THINK]",
                   "<|tool_call>", "<tool_call|>", GEMMA4_STRING, "<|channel>", "<channel|>",
                   "<|tool_call|>", "<|/tool_call|>", "<|tool_call_start|>",
                   "<|tool_call_end|>", "<|tools_prefix|>", "<|tools_suffix|>",
                   "<|inner_prefix|>", "<|inner_suffix|>",
                   "<|python_start|>", "<|python_end|>", "<|START_ACTION|>", "<|END_ACTION|>",
                   "<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>",
                   "<|END_RESPONSE|>")

SYNTAXES = {s.name: s for s in (HERMES, MISTRAL, LLAMA3_JSON, QWEN3_CODER, SEED_OSS, MINIMAX_M2,
                                GLM45, DEEPSEEK_R1, DEEPSEEK_V31, KIMI_K2, HARMONY,
                                GEMMA4, PHI4, LFM2, NEMOTRON_V2, APERTUS, DEEPSEEK_V32,
                                LLAMA4_PYTHONIC, FIREFUNCTION_V2, FUNCTIONARY_V31, COMMAND_R7B,
                                GRANITE, FUNCTIONARY_V32)}


@dataclass(frozen=True, slots=True)
class ReasoningMarkers:
    open: str
    close: str
    # the call syntax's open marker also ends the reasoning (Qwen3.5 writes a call inside
    # a thinking it never closes, as vLLM's qwen3 reasoning parser reads it); off where a
    # call written inside thinking is thinking (Seed-OSS)
    call_ends: bool = False


THINK = ReasoningMarkers("<think>", "</think>")
MISTRAL_THINK = ReasoningMarkers("[THINK]", "[/THINK]")
SEED_THINK = ReasoningMarkers("<seed:think>", "</seed:think>")
GEMMA4_THOUGHT = ReasoningMarkers("<|channel>thought", "<channel|>")
APERTUS_INNER = ReasoningMarkers("<|inner_prefix|>", "<|inner_suffix|>")
COMMAND_R7B_THINK = ReasoningMarkers("<|START_THINKING|>", "<|END_THINKING|>")
# Command R7B's answer wrapper, and Granite's when thinking: markup, never content.
COMMAND_R7B_MARKUP = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")
GRANITE_MARKUP = ("<response>", "</response>")
HARMONY_ANALYSIS = ReasoningMarkers("<|channel|>analysis<|message|>", "<|end|>")
# Harmony's headers around the final answer and preambles: markup, never content.
HARMONY_MARKUP = ("<|start|>assistant", "<|channel|>final", "<|channel|>commentary",
                  "<|channel|>analysis",
                  "<|message|>", "<|end|>", "<|return|>", "<|call|>")


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

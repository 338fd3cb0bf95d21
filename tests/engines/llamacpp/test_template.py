"""The real chat templates of the families people run (tests/data/templates, from
llama.cpp and the makers' tokenizer configs), rendered through Parlance's template path
(`plan.render_chat`: tools, the built-in prompt where a template has none) for every
message shape a conversation with tools has. Each rendering must carry the family's own
markup for the call and its result, never raise anything but a clear refusal, and keep
what the conversation said."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from parlance.core.errors import InvalidRequest
from parlance.core.messages import Message, ToolCall
from parlance.core.request import ChatInput, GenerationRequest
from parlance.core.tools import ReasoningEffort, ReasoningRequest, ToolSpec
from parlance.engines.llamacpp.plan import render_chat
from parlance.engines.llamacpp.template import ChatTemplate

TEMPLATES = Path(__file__).parents[2] / "data" / "templates"
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = (ToolSpec("get_weather", "Weather of a city", CITY),
         ToolSpec("get_time", "Time in a city", CITY))
WEATHER = ToolCall("call_1", "get_weather", '{"city": "Paris"}')
TIME = ToolCall("call_2", "get_time", '{"city": "Tokyo"}')
THOUGHT = "I need the weather tool."


@dataclass(frozen=True)
class Family:
    """What a family's template writes: the markup before a call's name, before a
    call's result, and before the reasoning of the turn in progress (None: the template
    drops it, or the family does not reason)."""

    call: str
    result: str | None = None
    reasoning: str | None = None
    parallel: bool = True  # False: the template refuses two calls in one turn


DSV3_CALL = "<｜tool▁call▁begin｜>"
FAMILIES: dict[str, Family] = {
    "openai-gpt-oss-120b": Family("<|start|>assistant to=functions.", "<|start|>functions.",
                                  "<|channel|>analysis<|message|>"),
    "Qwen3-Coder": Family("<tool_call>\n<function=", "<tool_response>"),
    "Qwen3.5-4B": Family("<tool_call>\n<function=", "<tool_response>", "<think>\n"),
    "Qwen-Qwen3-0.6B": Family('<tool_call>\n{"name": "', "<tool_response>", "<think>\n"),
    "Qwen-Qwen2.5-7B-Instruct": Family('<tool_call>\n{"name": "', "<tool_response>"),
    "Qwen-QwQ-32B": Family('<tool_call>\n{"name": "', "<tool_response>"),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": Family('<tool_call>\n{"name": "',
                                                            "<tool_response>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": Family(DSV3_CALL, "<｜tool▁output▁begin｜>"),
    "lenml-deepseek_v3": Family(DSV3_CALL, "<｜tool▁output▁begin｜>"),
    "deepseek-ai-DeepSeek-V3.1": Family(DSV3_CALL, "<｜tool▁output▁begin｜>"),
    "deepseek-ai-DeepSeek-V3.2": Family('<｜DSML｜invoke name="', "<result>"),
    "GLM-4.6": Family("<tool_call>", "<tool_response>", "<think>"),
    "GLM-4.7-Flash": Family("<tool_call>", "<tool_response>", "<think>"),
    "Kimi-K2-Instruct": Family("<|tool_call_begin|>functions.", "## Return of functions."),
    "Kimi-K2-Thinking": Family("<|tool_call_begin|>functions.", "## Return of functions.",
                               "<think>"),
    "MiniMax-M2": Family('<minimax:tool_call>\n<invoke name="', "<response>", "<think>\n"),
    "mistralai-Mistral-Nemo-Instruct-2407": Family('[TOOL_CALLS][{"name": "', "[TOOL_RESULTS]"),
    "Mistral-Small-3.2-24B-Instruct-2506": Family("[TOOL_CALLS]", "[TOOL_CONTENT]"),
    "unsloth-mistral-Devstral-Small-2507": Family("[TOOL_CALLS]", "[TOOL_RESULTS]"),
    "mistralai-Ministral-3-14B-Reasoning-2512": Family("[TOOL_CALLS]", "[TOOL_RESULTS]",
                                                       "[THINK]"),
    "meta-llama-Llama-3.1-8B-Instruct": Family('{"name": "', "<|start_header_id|>ipython",
                                               parallel=False),
    "meta-llama-Llama-3.3-70B-Instruct": Family('{"name": "', "<|start_header_id|>ipython",
                                                parallel=False),
    "lenml-gemma3": Family('<tool_call>\n{"name": "', "<tool_response>"),  # no native tools
    "google-gemma-4-31B-it": Family("<|tool_call>call:", "<|tool_response>",
                                    "<|channel>thought\n"),
    "ibm-granite-granite-3.3-2B-Instruct": Family("<|tool_call|>", "<|start_of_role|>tool"),
    "ibm-granite-granite-4.0": Family('<tool_call>\n{"name": "', "<tool_response>"),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": Family(
        "<|START_ACTION|>", "<|START_TOOL_RESULT|>", "<|START_THINKING|>"),
    "llama-cpp-microsoft-Phi-4-mini-instruct": Family('<|tool_call|>{"name": "',
                                                      "<|tool_response|>"),
    "LFM2-8B-A1B": Family("<|tool_call_start|>", "<|tool_response_start|>"),
    "ByteDance-Seed-OSS": Family("<seed:tool_call>\n<function=", "<seed:bos>tool",
                                 "<seed:think>"),
    "NVIDIA-Nemotron-Nano-v2": Family('<TOOLCALL>[{"name": "', "<TOOL_RESPONSE>"),
    "Apertus-8B-Instruct": Family('<|tools_prefix|>[{"', "<|tools_suffix|>"),
    "fireworks-ai-llama-3-firefunction-v2": Family(' functools[{"name": "'),
    "meetkai-functionary-medium-v3.1": Family("<function=", "<|start_header_id|>ipython"),
    "meetkai-functionary-medium-v3.2": Family(">>>", "<|start_header_id|>tool"),
    "vllm-llama4-pythonic": Family("[get_weather(", "<|header_start|>ipython"),
}

# Where Parlance's rendering falls short of the family's rules today (issue 38): each an
# honest failure, strict so that the fix shows.
GAPS: dict[tuple[str, str], str] = {}


@cache
def template_of(name: str) -> ChatTemplate:
    return ChatTemplate((TEMPLATES / f"{name}.jinja").read_text(),
                        bos_token="<s>", eos_token="</s>")


def render(name: str, messages: list[Message]) -> str:
    template = template_of(name)
    request = GenerationRequest(model="m", prompts=(ChatInput(tuple(messages)),), tools=TOOLS)
    return render_chat(template, request, tuple(messages))


def after(text: str, marker: str, what: str) -> None:
    """`what` comes after `marker` somewhere in the text."""
    start = text.find(marker)
    assert start >= 0, f"no {marker!r} in {text[-600:]!r}"
    assert what in text[start:], f"no {what!r} after {marker!r} in {text[start:][:600]!r}"


def cases(shape: str) -> list:
    out = []
    for name in FAMILIES:
        reason = GAPS.get((name, shape))
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        out.append(pytest.param(name, id=name, marks=marks))
    return out


def test_every_stored_template_has_a_family_row():
    assert {p.stem for p in TEMPLATES.glob("*.jinja")} == set(FAMILIES)


@pytest.mark.parametrize("name", cases("system"))
def test_system_and_user(name):
    text = render(name, [Message("system", "You answer tersely."),
                         Message("user", "Hello there")])
    assert "You answer tersely." in text
    assert "Hello there" in text


@pytest.mark.parametrize("name", cases("multi_turn"))
def test_multi_turn_with_earlier_reasoning(name):
    text = render(name, [Message("user", "Hi"),
                         Message("assistant", "Hello, how can I help?",
                                 reasoning="The user greets me."),
                         Message("user", "Tell me a joke")])
    assert "Hello, how can I help?" in text
    assert text.index("Hi") < text.index("Hello, how can I help?") < text.index("Tell me a joke")


@pytest.mark.parametrize("name", cases("one_call"))
def test_one_call_and_its_result(name):
    family = FAMILIES[name]
    text = render(name, [Message("user", "Weather in Paris?"),
                         Message("assistant", "", tool_calls=(WEATHER,)),
                         Message("tool", '{"temp": 21}', tool_call_id="call_1")])
    asked = text.index("Weather in Paris?")
    after(text[asked:], family.call, "get_weather")
    after(text[asked:], "get_weather", "Paris")
    if family.result is not None:
        after(text[asked:], family.result, "21")


@pytest.mark.parametrize("name", cases("two_calls"))
def test_two_calls_and_their_results(name):
    family = FAMILIES[name]
    messages = [Message("user", "Paris weather and Tokyo time?"),
                Message("assistant", "", tool_calls=(WEATHER, TIME)),
                Message("tool", '{"temp": 21}', tool_call_id="call_1"),
                Message("tool", '{"time": "09:00"}', tool_call_id="call_2")]
    if not family.parallel:
        with pytest.raises(InvalidRequest, match="single tool-call") as refused:
            render(name, messages)
        assert refused.value.param == "messages"
        return
    text = render(name, messages)
    asked = text.index("Paris weather and Tokyo time?")
    after(text[asked:], family.call, "get_weather")
    after(text[asked:], "get_weather", "get_time")
    after(text[asked:], "get_time", "Tokyo")
    after(text[asked:], "21", "09:00")


@pytest.mark.parametrize("name", cases("after_call"))
def test_turns_after_a_call(name):
    family = FAMILIES[name]
    text = render(name, [Message("user", "Weather in Paris?"),
                         Message("assistant", "", tool_calls=(WEATHER,)),
                         Message("tool", '{"temp": 21}', tool_call_id="call_1"),
                         Message("assistant", "It is 21 degrees."),
                         Message("user", "Thanks! And Tokyo?")])
    asked = text.index("Weather in Paris?")
    after(text[asked:], family.call, "get_weather")
    after(text[asked:], "get_weather", "It is 21 degrees.")
    after(text[asked:], "It is 21 degrees.", "Thanks! And Tokyo?")


@pytest.mark.parametrize("name", cases("reasoning_before_call"))
def test_reasoning_before_a_call_in_the_turn_in_progress(name):
    """The turn in progress (after the last user message): families that interleave
    thinking with calls keep it, in their own markup; the others may drop it."""
    family = FAMILIES[name]
    text = render(name, [Message("user", "Weather in Paris?"),
                         Message("assistant", "", tool_calls=(WEATHER,), reasoning=THOUGHT),
                         Message("tool", '{"temp": 21}', tool_call_id="call_1")])
    asked = text.index("Weather in Paris?")
    after(text[asked:], family.call, "get_weather")
    if family.reasoning is not None:
        after(text[asked:], family.reasoning, THOUGHT)
        assert text.index(THOUGHT) < text.rindex("get_weather")


@pytest.mark.parametrize("name", ["openai-gpt-oss-120b", "Qwen3-Coder", "MiniMax-M2",
                                  "mistralai-Mistral-Nemo-Instruct-2407"])
def test_call_ids_and_arguments_as_each_template_wants_them(name):
    """Mistral's templates refuse ids that are not nine letters or digits; the renderer
    learns that at load and writes each id so, the same for the call and its result."""
    text = render(name, [Message("user", "Weather?"),
                         Message("assistant", "", tool_calls=(
                             ToolCall("call_9f8e7d6c5b4a", "get_weather", '{"city": "Oslo"}'),)),
                         Message("tool", "cold", tool_call_id="call_9f8e7d6c5b4a")])
    assert "Oslo" in text and "cold" in text


def test_a_template_that_raises_a_python_error_is_a_clear_refusal():
    template = ChatTemplate("{{ messages[0].content + 1 }}", bos_token="", eos_token="")
    with pytest.raises(InvalidRequest, match="could not render") as refused:
        template.render([Message("user", "hi")])
    assert refused.value.param == "messages"


def test_llama3_builtin_tools_are_announced_and_their_calls_written_in_their_own_form():
    """A request offering Llama 3.1's builtin tools by name passes them to the template
    as `builtin_tools` (as llama.cpp does): it announces them, and writes an earlier
    call of one back as `<|python_tag|>name.call(…)`, the form the model writes."""
    search = ToolSpec("brave_search", "Web search",
                      {"type": "object", "properties": {"query": {"type": "string"}}})
    messages = [Message("user", "News?"),
                Message("assistant", "", tool_calls=(
                    ToolCall("call_1", "brave_search", '{"query": "news today"}'),)),
                Message("tool", "Nothing new.", tool_call_id="call_1")]
    request = GenerationRequest(model="m", prompts=(ChatInput(tuple(messages)),),
                                tools=(search, *TOOLS))
    text = render_chat(template_of("meta-llama-Llama-3.1-8B-Instruct"), request,
                       tuple(messages))
    assert "Tools: brave_search" in text
    assert '<|python_tag|>brave_search.call(query="news today")' in text
    plain = render("meta-llama-Llama-3.1-8B-Instruct", [Message("user", "News?")])
    assert "Tools: " not in plain


def test_firefunction_v2_gets_its_functions_and_the_date():
    text = render("fireworks-ai-llama-3-firefunction-v2", [Message("user", "Hi")])
    assert '"name": "get_weather"' in text and '"name": "get_time"' in text
    assert "Today is " in text


def test_granite_writes_an_earlier_call_as_the_model_wrote_it():
    text = render("ibm-granite-granite-3.3-2B-Instruct",
                  [Message("user", "Weather in Paris?"),
                   Message("assistant", "", tool_calls=(WEATHER,)),
                   Message("tool", '{"temp": 21}', tool_call_id="call_1")])
    assert '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]' in text


@pytest.mark.parametrize(("name", "on", "off"), [
    ("ibm-granite-granite-3.3-2B-Instruct", "Write your thoughts between <think></think>", None),
    ("CohereForAI-c4ai-command-r7b-12-2024-tool_use", None,
     "<|START_THINKING|><|END_THINKING|>"),
])
def test_the_thinking_switch_reaches_granite_and_command_r7b(name, on, off):
    """Granite's template reads `thinking`, Command R7B's `enable_thinking`: a request's
    reasoning setting turns them on and off (the words each writes when it does)."""
    template = template_of(name)
    messages = (Message("user", "Hi"),)

    def rendered(effort: ReasoningEffort) -> str:
        request = GenerationRequest(model="m", prompts=(ChatInput(messages),),
                                    reasoning=ReasoningRequest(effort))
        return render_chat(template, request, messages)

    thinking, plain = rendered(ReasoningEffort.HIGH), rendered(ReasoningEffort.NONE)
    if on is not None:
        assert on in thinking and on not in plain
    if off is not None:
        assert plain.endswith(off) and not thinking.endswith(off)

"""How the templates of issue 38's second batch of families are driven: the syntax calls
are parsed and forced in (the family's own wherever the template writes calls its way),
tools described in that markup when the template takes none (DeepSeek R1 and V3), earlier
calls carried in LFM2's content so they read back as the same calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parlance.core.events import ToolCallArgs, ToolCallStart
from parlance.core.messages import Message, ToolCall
from parlance.core.request import ChatInput, GenerationRequest
from parlance.core.tools import ReasoningEffort, ReasoningRequest, ToolSpec
from parlance.engines.llamacpp.plan import render_chat
from parlance.engines.llamacpp.template import ChatTemplate
from parlance.engines.parsing.output import OutputParser

TEMPLATES = Path(__file__).parents[2] / "data" / "templates"
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = (ToolSpec("get_weather", "Weather of a city", CITY),)
CALL = ToolCall("call_1", "get_weather", '{"city": "Paris"}')


def template(name: str) -> ChatTemplate:
    return ChatTemplate((TEMPLATES / f"{name}.jinja").read_text(), bos_token="<s>",
                        eos_token="</s>")


def rendered(name: str, messages: list[Message]) -> str:
    request = GenerationRequest(model="m", prompts=(ChatInput(tuple(messages)),), tools=TOOLS)
    return render_chat(template(name), request, tuple(messages))


@pytest.mark.parametrize(("name", "syntax"), [
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek_r1"),
    ("lenml-deepseek_v3", "deepseek_r1"),
    ("deepseek-ai-DeepSeek-V3.1", "deepseek_v3_1"),
    ("deepseek-ai-DeepSeek-V3.2", "deepseek_v3_2"),
    ("google-gemma-4-31B-it", "gemma4"),
    ("LFM2-8B-A1B", "lfm2"),
    ("llama-cpp-microsoft-Phi-4-mini-instruct", "phi4"),
    ("NVIDIA-Nemotron-Nano-v2", "nemotron_v2"),
    ("Apertus-8B-Instruct", "apertus"),
    ("lenml-gemma3", "hermes"),  # no native tools: the built-in prompt's
])
def test_calls_are_parsed_and_forced_in_the_familys_syntax(name, syntax):
    assert template(name).call_syntax.name == syntax


@pytest.mark.parametrize(("name", "example"), [
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>function_name\n```json\n"),
    ("deepseek-ai-DeepSeek-V3.1",
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function_name<｜tool▁sep｜>{"),
])
def test_a_template_without_tools_gets_them_described_in_its_own_markup(name, example):
    text = rendered(name, [Message("user", "Weather in Paris?")])
    assert '"name": "get_weather"' in text and example in text
    assert "<tool_call>" not in text  # never Hermes on a family that has its own


def test_lfm2_history_reads_back_as_the_same_calls():
    text = rendered("LFM2-8B-A1B", [
        Message("user", "Weather in Paris?"),
        Message("assistant", "Let me look.", tool_calls=(CALL,)),
        Message("tool", '{"temp": 21}', tool_call_id="call_1")])
    turn = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    fmt = template("LFM2-8B-A1B").format
    parser = OutputParser(0, syntax=fmt.syntax, reasoning=fmt.reasoning,
                          tool_names=frozenset({"get_weather"}))
    events = parser.push(turn) + parser.finish()
    starts = [e.name for e in events if isinstance(e, ToolCallStart)]
    args = "".join(e.fragment for e in events if isinstance(e, ToolCallArgs))
    assert starts == ["get_weather"] and json.loads(args) == {"city": "Paris"}
    assert turn.startswith("Let me look.")


def test_ministral_keeps_the_reasoning_of_the_turn_in_progress_only():
    text = rendered("mistralai-Ministral-3-14B-Reasoning-2512", [
        Message("user", "Hi"), Message("assistant", "Hello!", reasoning="Earlier thought."),
        Message("user", "Weather in Paris?"),
        Message("assistant", "", tool_calls=(CALL,), reasoning="Need the tool."),
        Message("tool", '{"temp": 21}', tool_call_id="call_1")])
    assert "[THINK]Need the tool.[/THINK][TOOL_CALLS]get_weather" in text
    assert "Earlier thought." not in text


@pytest.mark.parametrize(("effort", "word", "prompt_end"), [
    (ReasoningEffort.NONE, "/no_think", "<think></think>"),
    (ReasoningEffort.HIGH, "/think", "<think>\n"),
])
def test_nemotron_is_told_to_think_or_not_in_its_system_message(effort, word, prompt_end):
    messages = (Message("system", "Be brief."), Message("user", "Hi"))
    request = GenerationRequest(model="m", prompts=(ChatInput(messages),),
                                reasoning=ReasoningRequest(effort))
    text = render_chat(template("NVIDIA-Nemotron-Nano-v2"), request, messages)
    assert text.endswith(prompt_end) and "Be brief." in text
    assert word not in text  # the template reads the word and leaves it out


def test_lfm2_that_never_thinks_takes_reasoning_off():
    """LFM2-8B-A1B's template has no `<think>`: asked not to reason, it already does not."""
    lfm2 = template("LFM2-8B-A1B")
    assert lfm2.reasoning is None
    messages = (Message("user", "Hi"),)
    request = GenerationRequest(model="m", prompts=(ChatInput(messages),),
                                reasoning=ReasoningRequest(ReasoningEffort.NONE))
    assert render_chat(lfm2, request, messages).endswith("<|im_start|>assistant\n")

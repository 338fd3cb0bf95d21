"""What a request's tools and reasoning settings make of the prompt and the plan,
for templates with and without tool support and reasoning switches."""

from __future__ import annotations

import pytest

from parlance.core.errors import InvalidRequest
from parlance.core.messages import Message, ToolCall
from parlance.core.request import ChatInput, GenerationRequest
from parlance.core.tools import ReasoningEffort, ReasoningRequest, ToolChoice, ToolSpec
from parlance.engines.llamacpp.plan import render_chat
from parlance.engines.llamacpp.template import CHATML, ChatTemplate
from parlance.engines.parsing.syntax import HERMES, MISTRAL, THINK
from tests.support.templates import THINKING

WEATHER = ToolSpec("get_weather", "Current weather", {"type": "object", "properties": {
    "city": {"type": "string"}}})
CONVERSATION = (
    Message("user", "Weather in Rome?"),
    Message("assistant", "", tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Rome"}'),)),
    Message("tool", "20 C", tool_call_id="call_1"),
)
def template(source: str) -> ChatTemplate:
    return ChatTemplate(source, bos_token="", eos_token="<|im_end|>")


def request(*, reasoning: ReasoningEffort | None = None, **kw) -> GenerationRequest:
    return GenerationRequest(
        model="m", prompts=(ChatInput(CONVERSATION),),
        reasoning=ReasoningRequest(reasoning) if reasoning else None, **kw)


def test_builtin_tool_prompt_for_a_template_without_tools():
    text = render_chat(template(CHATML), request(tools=(WEATHER,)), CONVERSATION)
    system, rest = text.split("<|im_end|>", 1)
    assert system.startswith("<|im_start|>system\n") and '"name": "get_weather"' in system
    call = '{"name": "get_weather", "arguments": {"city": "Rome"}}'
    assert f"<tool_call>\n{call}\n</tool_call>" in rest
    assert "<|im_start|>user\n<tool_response>\n20 C\n</tool_response>" in rest


def test_tool_turns_are_spelled_even_without_callable_tools():
    text = render_chat(template(CHATML), request(tools=(WEATHER,),
                                                 tool_choice=ToolChoice("none")), CONVERSATION)
    assert "<tools>" not in text and "<tool_response>" in text


def test_a_template_with_tools_renders_them_itself():
    tpl = template(THINKING)
    assert tpl.supports_tools and tpl.tool_syntax is HERMES
    assert tpl.reasoning is not None  # `<think>`, which a `<tool_call>` ends (Qwen3)
    assert (tpl.reasoning.open, tpl.reasoning.close, tpl.reasoning.call_ends) == (
        THINK.open, THINK.close, True)
    text = render_chat(tpl, request(tools=(WEATHER,)), CONVERSATION)
    assert text.startswith('<tools>{"type": "function", "function": {"name": "get_weather"')
    # arguments reach the template as an object, as HF templates expect
    assert '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}' in text
    assert "You can call functions" not in text


def test_mistral_templates_get_their_own_syntax():
    assert template("{{ tools }}[TOOL_CALLS]{{ messages }}").tool_syntax is MISTRAL


@pytest.mark.parametrize(("effort", "ending"), [
    (None, "<think>\n"),
    (ReasoningEffort.HIGH, "<think>\n"),
    (ReasoningEffort.NONE, "<think>\n\n</think>\n\n"),
])
def test_enable_thinking_switch(effort, ending):
    text = render_chat(template(THINKING), request(reasoning=effort), CONVERSATION)
    assert text.endswith(ending)


def test_reasoning_effort_a_model_cannot_honour_is_refused():
    tpl = template(CHATML)
    render_chat(tpl, request(reasoning=ReasoningEffort.NONE), CONVERSATION)  # already off
    with pytest.raises(InvalidRequest) as caught:
        render_chat(tpl, request(reasoning=ReasoningEffort.LOW), CONVERSATION)
    assert caught.value.param == "reasoning_effort"
    always_thinks = template(CHATML.replace("assistant\n", "assistant\n<think>"))
    assert always_thinks.reasoning is THINK and always_thinks.thinking_switch is None
    render_chat(always_thinks, request(reasoning=ReasoningEffort.HIGH), CONVERSATION)
    with pytest.raises(InvalidRequest, match="cannot turn its reasoning off"):
        render_chat(always_thinks, request(reasoning=ReasoningEffort.NONE), CONVERSATION)

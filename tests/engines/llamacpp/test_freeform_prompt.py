"""How freeform tools and earlier reasoning reach the prompt: the built-in tool
prompt and a template that renders tools itself."""

from __future__ import annotations

from parlance.core.messages import Message, ToolCall
from parlance.core.request import ChatInput, GenerationRequest
from parlance.core.tools import InputGrammar, ToolSpec
from parlance.engines.llamacpp.plan import render_chat
from parlance.engines.llamacpp.template import CHATML, ChatTemplate

PATCH = ToolSpec("apply_patch", "Edit files.", freeform=True,
                 grammar=InputGrammar("lark", 'start: "*** Begin Patch"'))
INPUT = "*** Begin Patch\n*** Delete File: a.txt\n*** End Patch"
CONVERSATION = (
    Message("user", "Delete a.txt"),
    Message("assistant", "", tool_calls=(ToolCall("call_1", "apply_patch", INPUT,
                                                  freeform=True),),
            reasoning="The user wants a.txt gone."),
    Message("tool", "Done.", tool_call_id="call_1"),
)
# Renders tools, calls and reasoning_content the way HF templates of tool-using
# reasoning models do.
NATIVE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}"
    "{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>"
    "{% endfor %}<|im_end|>\n{% endfor %}<|im_start|>assistant\n"
)


def render(source: str) -> str:
    template = ChatTemplate(source, bos_token="", eos_token="<|im_end|>")
    request = GenerationRequest(model="m", prompts=(ChatInput(CONVERSATION),), tools=(PATCH,))
    return render_chat(template, request, CONVERSATION)


def test_builtin_prompt_teaches_and_spells_the_name_alone_layout():
    text = render(CHATML)
    system = text.split("<|im_end|>", 1)[0]
    assert "takes raw text, not JSON" in system and 'start: \\"*** Begin Patch\\"' in system
    assert '<tool_call>\n{"name": "<function-name>"}\n<raw input>\n</tool_call>' in system
    assert f'<tool_call>\n{{"name": "apply_patch"}}\n{INPUT}\n</tool_call>' in text


def test_a_template_with_tools_gets_a_function_of_one_string_and_the_reasoning():
    text = render(NATIVE)
    assert '"parameters": {"type": "object", "properties": {"input": {"type": "string"}}' in text
    assert '<tool_call>{"name": "apply_patch", "arguments": {"input": "*** Begin Patch' in text
    assert "<think>The user wants a.txt gone.</think>" in text

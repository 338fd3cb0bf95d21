"""Messages as OpenAI-shaped dicts, for chat templates and for OpenAI-compatible
servers alike: one shape, the call arguments written as each consumer reads them."""

from __future__ import annotations

import json

from parlance.core.messages import Message, ToolCall
from parlance.engines.chat_messages import FREEFORM_FIELD, openai_message
from parlance.engines.upstream.wire import message_json

CALLS = (ToolCall("call_1", "get weather", '{"city": "Paris"}'),
         ToolCall("call_2", "patch", "*** Begin Patch", freeform=True))


def test_the_shape_both_consumers_read():
    def as_text(call: ToolCall) -> str:
        return call.arguments

    assert openai_message(Message("developer", "Be brief.", name="ops"), as_text) == {
        "role": "system", "content": "Be brief.", "name": "ops"}
    said = openai_message(Message("assistant", "", tool_calls=CALLS, reasoning="hm"),
                          as_text, name_of=lambda name: name.replace(" ", "_"))
    assert said == {"role": "assistant", "content": "", "reasoning_content": "hm",
                    "tool_calls": [
                        {"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                        {"id": "call_2", "type": "function",
                         "function": {"name": "patch", "arguments": "*** Begin Patch"}}]}
    assert openai_message(Message("tool", "18°C", tool_call_id="call_1"), as_text) == {
        "role": "tool", "content": "18°C", "tool_call_id": "call_1"}


def test_a_server_gets_json_text_and_null_content_beside_calls():
    sent = message_json(Message("assistant", "", tool_calls=CALLS))
    assert sent["content"] is None
    [plain, freeform] = [c["function"]["arguments"] for c in sent["tool_calls"]]
    assert plain == '{"city": "Paris"}'
    assert json.loads(freeform) == {FREEFORM_FIELD: "*** Begin Patch"}
    assert message_json(Message("assistant", "Sure.", tool_calls=CALLS))["content"] == "Sure."


def test_a_template_gets_objects():
    from parlance.engines.llamacpp.template import ChatTemplate

    template = ChatTemplate(
        "{% for m in messages %}{% for c in m.tool_calls or [] %}"
        "{{ c.function.name }}={{ c.function.arguments | tojson }};{% endfor %}{% endfor %}",
        bos_token="", eos_token="")
    rendered = template.render([Message("assistant", "", tool_calls=CALLS)])
    assert rendered == ('get weather={"city": "Paris"};'
                        'patch={"input": "*** Begin Patch"};')

"""The neutral request as upstream servers read it (`/v1/chat/completions`,
`/v1/completions`), one upstream request per choice."""

from __future__ import annotations

import re

import pytest

from parlance.core.errors import InvalidRequest
from parlance.core.messages import Message, ToolCall
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams, TextInput
from parlance.core.tools import (
    InputGrammar,
    ReasoningEffort,
    ReasoningRequest,
    ResponseFormat,
    ToolChoice,
    ToolSpec,
)
from parlance.engines.upstream.wire import request_body, safe_name, sub_requests, tool_names

CHAT = ChatInput((Message("developer", "Be brief."), Message("user", "Hi")))


def chat(**kw) -> GenerationRequest:
    return GenerationRequest(model="local-name", prompts=(CHAT,), **kw)


def test_chat_minimal_keeps_the_upstreams_sampling_defaults():
    path, body = request_body(chat(), CHAT, "upstream-name")
    assert path == "/v1/chat/completions"
    assert body == {"model": "upstream-name", "stream": True,
                    "stream_options": {"include_usage": True},
                    "messages": [{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "Hi"}]}


def test_chat_everything():
    tools = (ToolSpec("get", "Get it.", {"type": "object"}, strict=True),)
    request = chat(
        sampling=SamplingParams(temperature=0.0, top_p=0.9, top_k=40, min_p=0.05, seed=7,
                                repeat_penalty=1.1, logit_bias=((15, -100.0),)),
        sampling_set=frozenset({"temperature", "top_p", "top_k", "min_p", "repeat_penalty"}),
        max_tokens=64, stop=("END",), logprobs=2, tools=tools,
        tool_choice=ToolChoice("named", "get"), parallel_tool_calls=False,
        response_format=ResponseFormat("json_schema", {"type": "object"}, "answer", True),
        reasoning=ReasoningRequest(ReasoningEffort.HIGH))
    _, body = request_body(request, CHAT, "m")
    assert {k: v for k, v in body.items() if k not in ("messages", "model")} == {
        "stream": True, "stream_options": {"include_usage": True},
        "temperature": 0.0, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
        "repetition_penalty": 1.1, "repeat_penalty": 1.1, "seed": 7,
        "logit_bias": {"15": -100.0}, "max_tokens": 64, "stop": ["END"],
        "tools": [{"type": "function", "function": {
            "name": "get", "parameters": {"type": "object"}, "description": "Get it.",
            "strict": True}}],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "answer", "schema": {"type": "object"}, "strict": True}},
        "logprobs": True, "top_logprobs": 2,
        "chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": "high"}


def test_reasoning_off_turns_the_template_switch_off():
    _, body = request_body(chat(reasoning=ReasoningRequest(ReasoningEffort.NONE)), CHAT, "m")
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert "reasoning_effort" not in body


def test_preset_sampling_defaults_are_sent_too():
    """A value that differs from the neutral default came from the client or a preset."""
    _, body = request_body(chat(sampling=SamplingParams(temperature=0.6)), CHAT, "m")
    assert body["temperature"] == 0.6 and "top_p" not in body


def test_history_with_calls_results_and_reasoning():
    history = ChatInput((
        Message("user", "Weather?"),
        Message("assistant", "", tool_calls=(ToolCall("c1", "get", '{"city":"Oslo"}'),),
                reasoning="Look it up."),
        Message("tool", "Sunny", tool_call_id="c1"),
        Message("assistant", "", tool_calls=(ToolCall("c2", "patch", "*** x", freeform=True),)),
    ))
    _, body = request_body(GenerationRequest(model="m", prompts=(history,)), history, "m")
    assert body["messages"] == [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "reasoning_content": "Look it up.",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "get", "arguments": '{"city":"Oslo"}'}}]},
        {"role": "tool", "content": "Sunny", "tool_call_id": "c1"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c2", "type": "function",
             "function": {"name": "patch", "arguments": '{"input": "*** x"}'}}]}]


def test_freeform_tool_is_a_function_of_one_string():
    tool = ToolSpec("patch", "Apply a patch.", freeform=True,
                    grammar=InputGrammar("regex", "\\*\\*\\* .*"))
    _, body = request_body(chat(tools=(tool,)), CHAT, "m")
    function = body["tools"][0]["function"]
    assert function["parameters"]["required"] == ["input"]
    assert "regex grammar" in function["description"] and "\\*\\*\\* .*" in function["description"]


def test_text_prompts_go_to_completions():
    prompt = TextInput(text="def f(", suffix="\n    return x")
    request = GenerationRequest(model="m", prompts=(prompt,), echo=True, logprobs=3)
    path, body = request_body(request, prompt, "m")
    assert path == "/v1/completions"
    assert body["prompt"] == "def f(" and body["suffix"] == "\n    return x"
    assert body["echo"] is True and body["logprobs"] == 3
    ids = TextInput(token_ids=(1, 2, 3))
    assert request_body(GenerationRequest(model="m", prompts=(ids,)), ids, "m")[1]["prompt"] \
        == [1, 2, 3]


def test_several_prompts_and_n_fan_out_prompt_major():
    prompts = (TextInput(text="a"), TextInput(text="b"))
    request = GenerationRequest(model="m", prompts=prompts, n=2,
                                sampling=SamplingParams(seed=10))
    subs = sub_requests(request, "m")
    assert [(s.index, s.prompt, s.first_of_prompt, s.body["prompt"], s.body["seed"])
            for s in subs] == [(0, 0, True, "a", 10), (1, 0, False, "a", 11),
                               (2, 1, True, "b", 10), (3, 1, False, "b", 11)]


def test_context_tokens_cannot_be_sent_upstream():
    prompt = ChatInput((Message("user", "Hi"),), prefix_ids=(1, 2))
    with pytest.raises(InvalidRequest) as caught:
        request_body(GenerationRequest(model="m", prompts=(prompt,)), prompt, "m")
    assert caught.value.param == "context"


def test_a_reasoning_preference_sends_no_effort_a_server_could_refuse():
    request = chat(reasoning=ReasoningRequest(ReasoningEffort.HIGH, best_effort=True))
    _, body = request_body(request, CHAT, "m")
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert "reasoning_effort" not in body


def test_a_prefilled_answer_is_continued_upstream():
    _, body = request_body(chat(continue_final=True), CHAT, "m")
    assert (body["continue_final_message"], body["add_generation_prompt"]) == (True, False)
    assert "continue_final_message" not in request_body(chat(), CHAT, "m")[1]


def test_tool_names_outside_openais_pattern_are_respelled_and_mapped_back():
    tools = (ToolSpec("multi_agent_v1.spawn_agent"), ToolSpec("plain_name"))
    history = ChatInput((Message("user", "Go"), Message("assistant", "", tool_calls=(
        ToolCall("c1", "multi_agent_v1.spawn_agent", "{}"),))))
    request = GenerationRequest(model="m", prompts=(history,), tools=tools)
    _, body = request_body(request, history, "m")
    sent = body["tools"][0]["function"]["name"]
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", sent) and sent.startswith("multi_agent_v1_")
    assert body["tools"][1]["function"]["name"] == "plain_name"
    assert body["messages"][1]["tool_calls"][0]["function"]["name"] == sent
    assert tool_names(request) == {sent: "multi_agent_v1.spawn_agent",
                                   "plain_name": "plain_name"}
    long = "x" * 100
    assert len(safe_name(long)) <= 64 and safe_name(long) != safe_name("x" * 99 + "y")


def test_a_named_tool_is_required_from_that_tool_alone():
    """llama-server reads tool_choice as a string only (an object is "auto" to it), so a
    name goes upstream as "required" over the one tool; every other mode as itself."""
    tools = (ToolSpec("a", "", {"type": "object"}), ToolSpec("ns.b", "", {"type": "object"}))
    for choice, offered, sent in ((ToolChoice("named", "ns.b"), [safe_name("ns.b")], "required"),
                                  (ToolChoice("required"), ["a", safe_name("ns.b")], "required"),
                                  (ToolChoice("none"), ["a", safe_name("ns.b")], "none"),
                                  (ToolChoice("auto"), ["a", safe_name("ns.b")], None)):
        _, body = request_body(chat(tools=tools, tool_choice=choice), CHAT, "m")
        assert [t["function"]["name"] for t in body["tools"]] == offered
        assert body.get("tool_choice") == sent


def test_a_forced_call_asked_again_as_structured_output():
    from parlance.core.tools import ResponseFormat, ToolChoice, ToolSpec
    from parlance.engines.upstream.wire import structured_call, sub_requests

    city = {"type": "object", "properties": {"city": {"type": "string"}}}
    tools = (ToolSpec("get_weather", "The forecast", city), ToolSpec("ns.lookup"))
    messages = (Message("system", "Be brief."), Message("user", "Weather?"))
    request = GenerationRequest(model="m", prompts=(ChatInput(messages),), tools=tools,
                                tool_choice=ToolChoice("required"),
                                parallel_tool_calls=False)
    (sub,) = sub_requests(request, "up")
    retry = structured_call(sub)
    assert retry is not None and (retry.path, retry.index) == (sub.path, sub.index)
    body = retry.body
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(body)
    schema = body["response_format"]["json_schema"]["schema"]
    names = [b["properties"]["name"]["const"] for b in schema["anyOf"]]
    assert names == ["get_weather", sub.body["tools"][1]["function"]["name"]]  # as sent
    assert schema["anyOf"][0]["properties"]["arguments"] == city
    system, user = body["messages"]
    assert system["content"].startswith("Be brief.\n\nCall one of these tools")
    assert '"The forecast"' in system["content"] and user == sub.body["messages"][1]
    named = GenerationRequest(model="m", prompts=(ChatInput(messages[1:]),), tools=tools,
                              tool_choice=ToolChoice("named", "get_weather"))
    (one,) = sub_requests(named, "up")
    body = structured_call(one).body
    assert body["response_format"]["json_schema"]["schema"]["properties"]["name"] == {
        "const": "get_weather"}
    assert body["messages"][0]["role"] == "system"
    # nothing to ask so: a format of the request's own, or no chat prompt
    formatted = GenerationRequest(model="m", prompts=(ChatInput(messages),), tools=tools,
                                  tool_choice=ToolChoice("required"),
                                  response_format=ResponseFormat("json_object"))
    assert structured_call(sub_requests(formatted, "up")[0]) is None
    text = GenerationRequest(model="m", prompts=(TextInput(text="hi"),))
    assert structured_call(sub_requests(text, "up")[0]) is None

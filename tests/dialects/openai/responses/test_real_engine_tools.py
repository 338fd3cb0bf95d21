"""Codex's tool types on the REAL engine (SmolLM2-135M, greedy) through the official
openai SDK with strict validation: a custom tool forced with its Lark grammar (Codex's
apply_patch) writes input the grammar accepts, a regex one input the regex matches,
a namespaced function comes back with its namespace; Codex's warm-up request, and a
prompt too long for the context."""

from __future__ import annotations

import json
import re

import llguidance
import openai
import pytest

from tests.support.grammars import APPLY_PATCH_LARK
from tests.support.real_engine import (
    MODEL_ID,
    asgi_client,
    local_engine_only,
    make_app,
    never_ending,
)

pytestmark = pytest.mark.model


@pytest.fixture
def sdk(llama):
    return openai.AsyncOpenAI(base_url="http://parlance.test/v1", api_key="unused",
                              http_client=asgi_client(make_app(llama)),
                              _strict_response_validation=True, max_retries=0)


def accepted(llama, lark: str, text: str, *, whole: bool = True) -> bool:
    """Whether `text` is a whole sentence of the Lark grammar, or with `whole=False` the
    start of one (llguidance decides)."""
    matcher = llguidance.LLMatcher(llama.tokenizer, lark, log_level=0)
    tokens = llama.tokenizer.tokenize_str(text)
    return (matcher.validate_tokens(tokens) == len(tokens) and matcher.consume_tokens(tokens)
            and (matcher.is_accepting() or not whole))


@local_engine_only(
    "a freeform tool's grammar is enforced only by the local engine (an upstream gets "
    "it as a description)")
async def test_forced_custom_tool_writes_input_its_lark_grammar_accepts(sdk, llama):
    # (a 135M model loops inside the grammar unless it has an example to follow)
    example = "*** Begin Patch\n*** Add File: notes.txt\n+Buy milk.\n*** End Patch\n"
    tool = {"type": "custom", "name": "apply_patch",
            "description": f"Edit files with a patch, for example:\n{example}",
            "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_LARK}}
    async with sdk:
        response = await sdk.responses.create(
            model=MODEL_ID, input="Create the file hello.txt containing the line Hello.",
            tools=[tool], tool_choice={"type": "custom", "name": "apply_patch"},
            temperature=0, max_output_tokens=200)
        async with sdk.responses.stream(
                model=MODEL_ID, input="Create the file hello.txt containing the line Hello.",
                tools=[tool], tool_choice={"type": "custom", "name": "apply_patch"},
                temperature=0, max_output_tokens=200) as stream:
            deltas = [event.delta async for event in stream
                      if event.type == "response.custom_tool_call_input.delta"]
            streamed = await stream.get_final_response()
    # the patch ends where the model closes it, or max_output_tokens cuts it: a patch the
    # grammar accepts, or the start of one
    [call] = response.output
    assert call.type == "custom_tool_call" and call.name == "apply_patch"
    assert call.input.startswith("*** Begin Patch\n")
    complete = response.status == "completed"
    assert complete or response.status == "incomplete", response.status
    assert accepted(llama, APPLY_PATCH_LARK, call.input, whole=complete), call.input
    assert not accepted(llama, APPLY_PATCH_LARK, call.input.replace("***", "**", 1),
                        whole=False)
    # streamed: the deltas are the input (a cached prefix may change greedy picks a little)
    assert "".join(deltas) == streamed.output[0].input
    assert accepted(llama, APPLY_PATCH_LARK, streamed.output[0].input,
                    whole=streamed.status == "completed")


async def test_forced_custom_tool_with_a_regex(sdk):
    pattern = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    tool = {"type": "custom", "name": "set_date", "description": "Set the date.",
            "format": {"type": "grammar", "syntax": "regex", "definition": pattern}}
    async with sdk:
        response = await sdk.responses.create(
            model=MODEL_ID, input="Set the date to the first of May 2024.", tools=[tool],
            tool_choice={"type": "custom", "name": "set_date"}, temperature=0,
            max_output_tokens=60)
    [call] = response.output
    assert call.type == "custom_tool_call" and re.fullmatch(pattern, call.input), call.input


async def test_forced_namespaced_function_comes_back_with_its_namespace(sdk):
    namespace = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
                 "tools": [{"type": "function", "name": "spawn_agent", "parameters": {
                     "type": "object", "properties": {"task": {"type": "string",
                                                               "maxLength": 40}},
                     "required": ["task"]}}]}
    async with sdk:
        response = await sdk.responses.create(
            model=MODEL_ID, input="Start an agent that writes tests.", tools=[namespace],
            tool_choice={"type": "function", "name": "spawn_agent"},
            parallel_tool_calls=False, temperature=0, max_output_tokens=80)
    [call] = response.output
    assert (call.type, call.name, call.namespace) == (
        "function_call", "spawn_agent", "multi_agent_v1")
    assert isinstance(json.loads(call.arguments)["task"], str)


async def test_codex_warm_up_and_a_prompt_too_long(llama):
    async with asgi_client(make_app(llama)) as http:
        with never_ending(llama):
            warm = await http.post("/v1/responses", json={"input": "", "max_output_tokens": 1})
        assert warm.status_code == 200, warm.text
        assert warm.json()["usage"]["output_tokens"] == 1
        long = " ".join(["word"] * 5000)
        for stream in (False, True):
            refused = await http.post("/v1/responses", json={
                "model": MODEL_ID, "input": long, "stream": stream})
            assert refused.status_code == 400
            error = refused.json()["error"]
            assert (error["param"], error["code"]) == ("input", "context_length_exceeded")

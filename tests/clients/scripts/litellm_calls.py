"""Run by LiteLLM's own venv (tests/clients/test_litellm.py): LiteLLM as a client of
Parlance through its `openai/`, `anthropic/`, `ollama_chat/` and `lm_studio/` providers,
each making a text call, a streamed call and a call that offers a function tool with
`tool_choice` naming it. Prints one JSON object: what each call returned (the tool
calls' arguments as LiteLLM parsed them), or the exception it raised."""

import functools
import json
import os

import litellm
from _report import report

URL = os.environ["PARLANCE_URL"]
PROVIDERS = {
    "openai": ("openai/smollm2-135m-instruct", f"{URL}/v1"),
    "anthropic": ("anthropic/smollm2-135m-instruct", URL),
    "ollama_chat": ("ollama_chat/smollm2:135m", URL),
    "lm_studio": ("lm_studio/smollm2-135m-instruct", f"{URL}/v1"),
}
HELLO = [{"role": "user", "content": "Say hello in one short sentence."}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string",
                                                             "maxLength": 20}},
                   "required": ["city"], "additionalProperties": False}}}


def calls(model: str, base: str) -> dict:
    common = {"model": model, "api_base": base, "api_key": "unused", "temperature": 0.0}
    out: dict = {}
    text = litellm.completion(messages=HELLO, max_tokens=40, **common)
    out["text"] = text.choices[0].message.content
    out["usage"] = text.usage.total_tokens
    chunks = litellm.completion(messages=HELLO, max_tokens=40, stream=True, **common)
    out["stream"] = "".join(c.choices[0].delta.content or "" for c in chunks)
    called = litellm.completion(
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER], max_tokens=100,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, **common)
    message = called.choices[0].message
    out["tool_calls"] = [{"name": c.function.name, "arguments": json.loads(c.function.arguments)}
                         for c in message.tool_calls or ()]
    out["finish_reason"] = called.choices[0].finish_reason
    return out


report({name: functools.partial(calls, model, base)
        for name, (model, base) in PROVIDERS.items()})

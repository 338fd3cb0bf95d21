"""The neutral request as an OpenAI-compatible upstream reads it.

Chat prompts go to `/v1/chat/completions`, raw text (and token ids, and
fill-in-the-middle through `suffix`) to `/v1/completions`. Every upstream request
asks for one choice of one prompt: a request with several prompts or `n` > 1 is
fanned out (`sub_requests`), because llama-server and Ollama ignore `n` and
several prompts would otherwise be numbered differently by each server; the
replies are renumbered prompt-major as the core expects.

Sampling fields are sent only when the client (or a preset) chose them, so the
upstream keeps its own defaults otherwise. Non-OpenAI knobs (`top_k`, `min_p`,
repetition penalty) use the names vLLM, SGLang and llama-server read; servers
that do not know a field ignore it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from parlance.core.errors import InvalidRequest
from parlance.core.messages import Message, ToolCall
from parlance.core.request import ChatInput, GenerationRequest, PromptInput, SamplingParams
from parlance.core.tools import ReasoningEffort, ToolSpec
from parlance.engines.chat_messages import FREEFORM_FIELD, openai_message

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
EMBEDDINGS_PATH = "/v1/embeddings"
_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_DEFAULTS = SamplingParams()
_SAMPLING_FIELDS = tuple(f.name for f in fields(SamplingParams))


@dataclass(frozen=True, slots=True)
class SubRequest:
    """One upstream request: choice `index` of the generation (prompt-major), for
    prompt `prompt`; `first_of_prompt` carries the prompt's usage (its other choices'
    prompt tokens are the same prompt evaluated again)."""

    path: str
    body: dict[str, Any]
    index: int
    prompt: int
    first_of_prompt: bool


def sub_requests(request: GenerationRequest, model: str) -> list[SubRequest]:
    out = []
    for p, prompt in enumerate(request.prompts):
        for k in range(request.n):
            seed_offset = k  # choices of one request draw differently even with a seed
            path, body = request_body(request, prompt, model, seed_offset)
            out.append(SubRequest(path, body, p * request.n + k, p, k == 0))
    return out


def request_body(request: GenerationRequest, prompt: PromptInput, model: str,
                 seed_offset: int = 0) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) of one streamed upstream request for `prompt`."""
    body: dict[str, Any] = {"model": model, "stream": True,
                            "stream_options": {"include_usage": True}}
    body.update(_sampling(request, seed_offset))
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.stop:
        body["stop"] = list(request.stop)
    if isinstance(prompt, ChatInput):
        if prompt.prefix_ids:
            raise InvalidRequest("Continuing from context tokens is not possible for a model "
                                 "served by upstream servers; send the conversation instead.",
                                 param="context")
        body["messages"] = [message_json(m, safe_name) for m in prompt.messages]
        body.update(_chat_extras(request))
        return CHAT_PATH, body
    if prompt.token_ids is not None:
        body["prompt"] = list(prompt.token_ids)
    else:
        body["prompt"] = prompt.text or ""
    if prompt.suffix is not None:
        body["suffix"] = prompt.suffix
    if request.echo:
        body["echo"] = True
    if request.logprobs is not None:
        body["logprobs"] = request.logprobs
    return COMPLETIONS_PATH, body


def _sampling(request: GenerationRequest, seed_offset: int) -> dict[str, Any]:
    sampling = request.sampling
    chosen = {name for name in _SAMPLING_FIELDS
              if name in request.sampling_set
              or getattr(sampling, name) != getattr(_DEFAULTS, name)}
    out: dict[str, Any] = {}
    for name in ("temperature", "top_p", "top_k", "min_p", "presence_penalty",
                 "frequency_penalty"):
        if name in chosen:
            out[name] = getattr(sampling, name)
    if "repeat_last_n" in chosen:
        out["repeat_last_n"] = sampling.repeat_last_n  # llama-server
    if "repeat_penalty" in chosen:
        out["repetition_penalty"] = sampling.repeat_penalty  # vLLM, SGLang
        out["repeat_penalty"] = sampling.repeat_penalty  # llama-server
    if sampling.seed is not None:
        out["seed"] = sampling.seed + seed_offset
    if sampling.logit_bias:
        out["logit_bias"] = {str(token): bias for token, bias in sampling.logit_bias}
    return out


def _chat_extras(request: GenerationRequest) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if request.tools:
        choice = request.tool_choice
        # A named tool is asked for as "required" with that tool alone: llama-server
        # reads tool_choice only as a string (an object falls back to "auto"), and
        # "required" over one tool is what a name means to vLLM and OpenAI too.
        offered = request.callable_tools if choice.mode == "named" else request.tools
        out["tools"] = [tool_json(t, safe_name(t.name)) for t in offered]
        if choice.forced:
            out["tool_choice"] = "required"
        elif choice.mode != "auto":
            out["tool_choice"] = choice.mode
        if not request.parallel_tool_calls:
            out["parallel_tool_calls"] = False
    fmt = request.response_format
    if fmt is not None:
        if fmt.kind == "json_schema":
            schema: dict[str, Any] = {"name": fmt.name or "response",
                                      "schema": fmt.schema or {}}
            if fmt.strict:
                schema["strict"] = True
            out["response_format"] = {"type": "json_schema", "json_schema": schema}
        else:
            out["response_format"] = {"type": "json_object"}
    if request.logprobs is not None:
        out["logprobs"] = True
        if request.logprobs:
            out["top_logprobs"] = request.logprobs
    reasoning = request.reasoning
    if reasoning is not None:
        effort = reasoning.effort
        # The template switch vLLM, SGLang and llama-server pass to the chat template
        # (Qwen3's enable_thinking); the effort itself for models that grade it, unless
        # it is only a preference (a server may refuse an effort its model cannot honour).
        out["chat_template_kwargs"] = {"enable_thinking": effort is not ReasoningEffort.NONE}
        if effort not in (ReasoningEffort.NONE, ReasoningEffort.ON) and not reasoning.best_effort:
            out["reasoning_effort"] = effort.value
    if request.continue_final:
        # vLLM's and llama-server's prefill: the last assistant message is continued
        out["continue_final_message"] = True
        out["add_generation_prompt"] = False
    return out


_CALL_INSTRUCTION = (
    "Call one of these tools now. Answer with nothing but a JSON object "
    '{"name": <the tool\'s name>, "arguments": <its arguments>}.\n\nTools:\n')


def structured_call(sub: SubRequest) -> SubRequest | None:
    """`sub`'s forced call asked for as structured output instead: the tools described in
    a system message and the answer held by a JSON Schema, one branch per tool
    (`{"name": its name, "arguments": its parameters}`), which llama-server, vLLM and
    SGLang enforce with a grammar where they leave `tool_choice` to the model. None
    where there is nothing to ask so (no chat prompt, no tools) or the request already
    holds the answer to a format of its own."""
    body = sub.body
    tools = body.get("tools")
    if sub.path != CHAT_PATH or not tools or "response_format" in body:
        return None
    body = {k: v for k, v in body.items()
            if k not in ("tools", "tool_choice", "parallel_tool_calls")}
    branches = [{"type": "object",
                 "properties": {"name": {"const": t["function"]["name"]},
                                "arguments": t["function"]["parameters"]},
                 "required": ["name", "arguments"], "additionalProperties": False}
                for t in tools]
    schema = branches[0] if len(branches) == 1 else {"anyOf": branches}
    body["response_format"] = {"type": "json_schema", "json_schema": {
        "name": "tool_call", "schema": schema, "strict": True}}
    described = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools)
    instruction = _CALL_INSTRUCTION + described
    messages = list(body["messages"])
    if messages and messages[0].get("role") == "system" and isinstance(
            messages[0].get("content"), str):
        messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n{instruction}"}
    else:
        messages.insert(0, {"role": "system", "content": instruction})
    body["messages"] = messages
    return SubRequest(sub.path, body, sub.index, sub.prompt, sub.first_of_prompt)


def safe_name(name: str) -> str:
    """A tool name as OpenAI's pattern allows it (`^[a-zA-Z0-9_-]{1,64}$`, which vLLM and
    Parlance enforce): a Responses namespace's `ns.tool` and the like are respelled, a
    hash of the original keeping respelled names apart."""
    if _NAME.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{re.sub(r'[^a-zA-Z0-9_-]', '_', name)[:55]}_{digest}"


def tool_names(request: GenerationRequest) -> dict[str, str]:
    """The request's tool names as the upstream knows them → as the request has them."""
    return {safe_name(t.name): t.name for t in request.tools}


def tool_json(tool: ToolSpec, name: str | None = None) -> dict[str, Any]:
    """A function tool. A freeform tool (raw text input) becomes a function whose one
    string argument is that text; the engine hands the text back as the call's input."""
    if tool.freeform:
        description = tool.description
        if tool.grammar is not None:
            description += (f"\n\nThe `{FREEFORM_FIELD}` must match this "
                            f"{tool.grammar.syntax} grammar:\n{tool.grammar.definition}")
        parameters: dict[str, Any] = {
            "type": "object", "properties": {FREEFORM_FIELD: {"type": "string"}},
            "required": [FREEFORM_FIELD], "additionalProperties": False}
        return {"type": "function", "function": {"name": name or tool.name,
                                                 "description": description,
                                                 "parameters": parameters}}
    function: dict[str, Any] = {"name": name or tool.name, "parameters": tool.parameters}
    if tool.description:
        function["description"] = tool.description
    if tool.strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def message_json(message: Message, name_of: Callable[[str], str] = str) -> dict[str, Any]:
    """A chat message; an assistant's message of calls alone has `content: null`, as
    OpenAI writes it."""
    out = openai_message(message, _call_arguments, name_of)
    if message.tool_calls and not message.content:
        out["content"] = None
    return out


def _call_arguments(call: ToolCall) -> str:
    """The JSON text a server takes (a freeform tool's raw text inside its one field)."""
    if not call.freeform:
        return call.arguments
    return json.dumps({FREEFORM_FIELD: call.arguments}, ensure_ascii=False)

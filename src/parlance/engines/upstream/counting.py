"""Counting a prompt's tokens with the upstream's own tokenizer endpoint, where the
server has one: llama-server's `/v1/chat/completions/input_tokens` (the chat body as
it would be generated from) and `/tokenize`; vLLM's `/tokenize` (messages with the
generation prompt, or a raw prompt). None when the server has none (or it failed):
the engine then counts with a one-token generation, which every server answers."""

from __future__ import annotations

from typing import Any

import httpx2

from parlance.core.request import ChatInput, GenerationRequest, PromptInput
from parlance.engines.upstream.replica import Replica
from parlance.engines.upstream.wire import request_body


async def tokenizer_count(replica: Replica, model: str, request: GenerationRequest,
                          prompt: PromptInput) -> int | None:
    if not isinstance(prompt, ChatInput) and prompt.token_ids is not None:
        return len(prompt.token_ids)
    try:
        if replica.owned_by == "llamacpp":
            return await _llama_server(replica, model, request, prompt)
        if replica.owned_by == "vllm":
            return await _vllm(replica, model, request, prompt)
    except (httpx2.HTTPError, ValueError, TypeError, KeyError):
        return None
    return None


async def _post(replica: Replica, path: str, body: dict[str, Any]) -> Any:
    response = await replica.client.post(path, json=body, timeout=replica.health_timeout)
    return response.json() if response.status_code == 200 else None


async def _llama_server(replica: Replica, model: str, request: GenerationRequest,
                        prompt: PromptInput) -> int | None:
    if isinstance(prompt, ChatInput):
        _, body = request_body(request, prompt, model)
        for key in ("stream", "stream_options"):
            body.pop(key, None)
        answer = await _post(replica, "/v1/chat/completions/input_tokens", body)
        count = answer.get("input_tokens") if isinstance(answer, dict) else None
    else:
        if prompt.suffix is not None:
            return None  # infill adds its own markers
        answer = await _post(replica, "/tokenize", {"content": prompt.text or "",
                                                     "add_special": True})
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        count = len(tokens) if isinstance(tokens, list) else None
    return count if isinstance(count, int) else None


async def _vllm(replica: Replica, model: str, request: GenerationRequest,
                prompt: PromptInput) -> int | None:
    if isinstance(prompt, ChatInput):
        _, chat = request_body(request, prompt, model)
        body: dict[str, Any] = {"model": model, "messages": chat["messages"],
                                "add_generation_prompt": True}
        if "tools" in chat:
            body["tools"] = chat["tools"]
        if "chat_template_kwargs" in chat:
            body["chat_template_kwargs"] = chat["chat_template_kwargs"]
    else:
        if prompt.suffix is not None:
            return None
        body = {"model": model, "prompt": prompt.text or ""}
    answer = await _post(replica, "/tokenize", body)
    count = answer.get("count") if isinstance(answer, dict) else None
    return count if isinstance(count, int) else None

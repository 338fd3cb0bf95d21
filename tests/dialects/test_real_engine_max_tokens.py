"""`max_tokens` beyond the context on the REAL engine, in every dialect: Qwen Code's
`max_tokens: 32000` against a prompt that leaves only a few tokens of a small context
generates until the context is full and ends by the dialect's word for a cut answer;
a prompt that leaves no room is refused; `--strict-max-tokens` refuses the request
instead. A small context of its own (256 tokens) keeps the prompts short."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest, PromptInput, TextInput
from parlance.engines.llamacpp import LlamaCppEngine
from parlance.engines.llamacpp.model import ContextSettings
from parlance.models.registry import builtin_registry
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.real_engine import MODEL_ID, no_eog_bias

pytestmark = pytest.mark.model

N_CTX = 256
ROOM = 4  # what the prompts leave: too little for the model to end its story in
QWEN = 32000
ASK = "Write a very long story about a dragon who collects clocks."


@pytest.fixture(scope="module")
def small() -> Iterator[LlamaCppEngine]:
    try:
        path = builtin_registry()[MODEL_ID].locate()
    except FileNotFoundError as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"real-engine tests need the default model: {exc}")
    engine = LlamaCppEngine.load(path, ContextSettings(n_ctx=N_CTX, n_threads=2, parallel=1))
    yield engine
    asyncio.run(engine.aclose())


@pytest.fixture
async def client(small: LlamaCppEngine) -> AsyncIterator[httpx.AsyncClient]:
    spec = builtin_registry()[MODEL_ID]
    app = create_app(ServedModels([ServedModel(spec, small, int(time.time()))]),
                     ServerSettings(request_timeout=3600.0))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t", timeout=600.0) as http:
        yield http


async def _filled(engine: LlamaCppEngine, prompt: Callable[[str], PromptInput],
                  tokens: int) -> str:
    """ASK with filler words after it, `tokens` prompt tokens in all."""
    def count(text: str) -> Any:
        return engine.count_tokens(GenerationRequest(model=MODEL_ID, prompts=(prompt(text),)))

    filler = 0
    while True:
        text = ASK + " Once" + " upon" * filler
        have = await count(text)
        if have >= tokens:
            assert have == tokens, f"no filler makes {tokens} tokens exactly"
            return text
        filler += tokens - have


def _chat_prompt(text: str) -> PromptInput:
    return ChatInput((Message("user", text),))


def _text_prompt(text: str) -> PromptInput:
    return TextInput(text=text)


# path, body, (prompt tokens, output tokens, how it ended) from the answer, the word
# for a cut answer, the status of an overflow refusal
Reader = Callable[[dict[str, Any]], tuple[int, int, Any]]
DIALECTS: dict[str, tuple[str, Callable[[str, int, dict[str, float]], dict[str, Any]],
                          Reader, Any, int]] = {
    "chat": ("/v1/chat/completions", lambda text, limit, bias: {
        "messages": [{"role": "user", "content": text}], "max_tokens": limit,
        "logit_bias": bias}, lambda r: (r["usage"]["prompt_tokens"],
                                       r["usage"]["completion_tokens"],
                                       r["choices"][0]["finish_reason"]), "length", 403),
    "completions": ("/v1/completions", lambda text, limit, bias: {
        "prompt": text, "max_tokens": limit, "logit_bias": bias},
        lambda r: (r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"],
                   r["choices"][0]["finish_reason"]), "length", 403),
    "responses": ("/v1/responses", lambda text, limit, _: {
        "input": text, "max_output_tokens": limit},
        lambda r: (r["usage"]["input_tokens"], r["usage"]["output_tokens"],
                   (r["status"], r["incomplete_details"])),
        ("incomplete", {"reason": "max_output_tokens"}), 400),
    "anthropic": ("/v1/messages", lambda text, limit, _: {
        "messages": [{"role": "user", "content": text}], "max_tokens": limit},
        lambda r: (r["usage"]["input_tokens"] + r["usage"]["cache_read_input_tokens"],
                   r["usage"]["output_tokens"], r["stop_reason"]), "max_tokens", 400),
    "ollama_chat": ("/api/chat", lambda text, limit, _: {
        "messages": [{"role": "user", "content": text}], "options": {"num_predict": limit}},
        lambda r: (r["prompt_eval_count"], r["eval_count"], r["done_reason"]), "length", 400),
    "ollama_generate": ("/api/generate", lambda text, limit, _: {
        "prompt": text, "options": {"num_predict": limit}},
        lambda r: (r["prompt_eval_count"], r["eval_count"], r["done_reason"]), "length", 400),
    # LM Studio's chat names no stop reason: the answer ends where the context is full
    "lmstudio": ("/api/v1/chat", lambda text, limit, _: {
        "input": text, "max_output_tokens": limit},
        lambda r: (r["stats"]["input_tokens"], r["stats"]["total_output_tokens"], None),
        None, 400),
}


async def _ask(client: httpx.AsyncClient, name: str, text: str, limit: int,
               bias: dict[str, float]) -> httpx.Response:
    path, body, *_ = DIALECTS[name]
    return await client.post(path, json={"model": MODEL_ID, "stream": False,
                                         **body(text, limit, bias)})


async def test_qwen_codes_max_tokens_runs_to_the_end_of_the_context(client, small):
    bias = no_eog_bias(small)
    chat = await _filled(small, _chat_prompt, N_CTX - ROOM)
    text = await _filled(small, _text_prompt, N_CTX - ROOM)
    for name, (_, _, read, cut, _) in DIALECTS.items():
        response = await _ask(client, name, text if name == "completions" else chat, QWEN,
                              bias)
        assert response.status_code == 200, (name, response.text)
        prompt_tokens, output_tokens, ending = read(response.json())
        assert prompt_tokens + output_tokens == N_CTX, (name, response.json())
        assert 0 < output_tokens <= ROOM and ending == cut, (name, response.json())


async def test_a_prompt_that_fills_the_context_is_refused(client, small):
    chat = await _filled(small, _chat_prompt, N_CTX)
    text = await _filled(small, _text_prompt, N_CTX)
    for name, (*_, refused) in DIALECTS.items():
        response = await _ask(client, name, text if name == "completions" else chat, 8, {})
        assert response.status_code == refused, (name, response.text)


async def test_strict_max_tokens_refuses_what_does_not_fit(client, small):
    chat = await _filled(small, _chat_prompt, N_CTX - ROOM)
    small.strict_max_tokens = True
    try:
        for name, (*_, refused) in DIALECTS.items():
            if name == "completions":
                continue
            response = await _ask(client, name, chat, QWEN, {})
            assert response.status_code == refused, (name, response.text)
    finally:
        small.strict_max_tokens = False

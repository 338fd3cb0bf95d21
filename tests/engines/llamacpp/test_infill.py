"""Fill-in-the-middle on a model with a real FIM vocabulary (tests/support/fim_gguf.py:
Qwen2.5-Coder's special tokens, random weights): the prompt's layout token by token, a
model without FIM tokens refused, and /infill served over HTTP."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from parlance.core.errors import InvalidRequest
from parlance.core.request import ExtraFile, GenerationRequest, SamplingParams, TextInput
from parlance.engines.llamacpp import LlamaCppEngine
from parlance.engines.llamacpp.model import ContextSettings
from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.fim_gguf import fim_gguf, plain_gguf, special_id
from tests.support.real_engine import run

pytestmark = pytest.mark.model

GREEDY = SamplingParams(temperature=0.0)


def load(path) -> LlamaCppEngine:
    return LlamaCppEngine.load(path, ContextSettings(n_ctx=1024, n_threads=2, parallel=2,
                                                     n_batch=256))


@pytest.fixture(scope="module")
def fim():
    engine = load(fim_gguf())
    yield engine
    asyncio.run(engine.aclose())


def infill(**fields) -> GenerationRequest:
    prompt = TextInput(infill=True, **fields)
    return GenerationRequest("fim", (prompt,), sampling=GREEDY, max_tokens=4)


def text_tokens(engine: LlamaCppEngine, text: str) -> list[int]:
    return engine.model.tokenize(text, add_special=False, parse_special=False)


async def test_the_repo_level_layout(fim):
    generation = await fim.start(infill(
        text="def add(a, b):\n", cursor="    return ", suffix="\nprint(add(1, 2))\n",
        extra=(ExtraFile("import math\n", "util.py"),)))
    tokens = list(generation.prompts[0].token_ids)
    async for _ in generation:
        pass
    t = lambda s: text_tokens(fim, s)  # noqa: E731
    assert tokens == [
        special_id("<|repo_name|>"), *t("myproject\n"),
        special_id("<|file_sep|>"), *t("util.py\n"), *t("import math\n"),
        special_id("<|file_sep|>"), *t("filename\n"),
        special_id("<|fim_prefix|>"), *t("def add(a, b):\n"), *t("    return "),
        special_id("<|fim_suffix|>"), *t("\nprint(add(1, 2))\n"),
        special_id("<|fim_middle|>")]


async def test_a_long_prefix_keeps_its_end_and_a_long_suffix_its_start(fim):
    prefix, suffix = "a" * 400 + "END", "START" + "b" * 400
    generation = await fim.start(infill(text=prefix, suffix=suffix))
    tokens = list(generation.prompts[0].token_ids)
    async for _ in generation:
        pass
    pre, suf = tokens.index(special_id("<|fim_prefix|>")), tokens.index(
        special_id("<|fim_suffix|>"))
    assert tokens[suf - 3:suf] == text_tokens(fim, "END")
    assert suf - pre - 1 == 3 * 256 // 4  # the prefix's last three quarters of a batch
    assert tokens[suf + 1:suf + 6] == text_tokens(fim, "START")
    assert len(tokens) - suf - 2 == 256 // 4 - 2  # the suffix's first quarter, less 2


async def test_it_generates(fim):
    result = await run(fim, infill(text="x = ", suffix="\n"))
    assert result.usage.completion_tokens >= 1


async def test_a_model_without_fim_tokens_is_refused():
    engine = load(plain_gguf())
    try:
        with pytest.raises(InvalidRequest, match="no fill-in-the-middle tokens") as refused:
            await engine.start(infill(text="x = ", suffix="\n"))
        assert refused.value.param == "input_suffix"
        with pytest.raises(InvalidRequest) as suffix:
            await engine.start(GenerationRequest("m", (TextInput("x", suffix="y"),)))
        assert suffix.value.param == "suffix"
    finally:
        await engine.aclose()


async def test_infill_over_http(fim):
    spec = ModelSpec(id="fim-tiny", locate=fim_gguf)
    app = create_app(ServedModels([ServedModel(spec, fim, 1700000000)]), ServerSettings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        response = await client.post("/infill", json={
            "input_prefix": "def f():\n", "input_suffix": "\n", "prompt": "    ",
            "input_extra": [{"filename": "a.py", "text": "x = 1\n"}], "n_predict": 3,
            "temperature": 0})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["tokens_predicted"] <= 3 and body["stop"] is True
        assert body["tokens_evaluated"] == len(
            [special_id("<|repo_name|>"), *text_tokens(fim, "myproject\n"),
             special_id("<|file_sep|>"), *text_tokens(fim, "a.py\n"),
             *text_tokens(fim, "x = 1\n"), special_id("<|file_sep|>"),
             *text_tokens(fim, "filename\n"), special_id("<|fim_prefix|>"),
             *text_tokens(fim, "def f():\n"), *text_tokens(fim, "    "),
             special_id("<|fim_suffix|>"), *text_tokens(fim, "\n"),
             special_id("<|fim_middle|>")])


async def test_mistral_fim_over_http(fim):
    spec = ModelSpec(id="fim-tiny", locate=fim_gguf)
    app = create_app(ServedModels([ServedModel(spec, fim, 1700000000)]), ServerSettings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        body = {"model": "fim-tiny", "prompt": "def f():\n", "suffix": "\n", "max_tokens": 3,
                "temperature": 0}
        answer = (await client.post("/v1/fim/completions", json=body)).json()
        expected = len([special_id("<|fim_prefix|>"), *text_tokens(fim, "def f():\n"),
                        special_id("<|fim_suffix|>"), *text_tokens(fim, "\n"),
                        special_id("<|fim_middle|>")])
        assert answer["usage"]["prompt_tokens"] == expected
        streamed = await client.post("/v1/fim/completions", json={**body, "stream": True})
        lines = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
        assert lines[-1] == "[DONE]"
        chunks = [json.loads(line) for line in lines[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        assert text == answer["choices"][0]["message"]["content"]  # greedy: the same

"""The real engine refuses bad requests in `start()`, with typed errors, before any
work is queued (the `engine` fixture checks the worker is left idle)."""

from __future__ import annotations

import pytest

from parlance.core.errors import ContextOverflow, InvalidRequest
from parlance.core.request import SamplingParams
from tests.real_engine import N_CTX, TEXT_PROMPT, chat_request, run, text_request

pytestmark = pytest.mark.slow


async def test_prompt_plus_max_tokens_over_the_context(engine):
    with pytest.raises(ContextOverflow) as info:
        await engine.start(chat_request("Hello", max_tokens=N_CTX))
    assert info.value.param == "max_tokens"
    assert info.value.code == "context_length_exceeded"
    assert str(N_CTX) in info.value.message


async def test_prompt_alone_over_the_context(engine):
    with pytest.raises(ContextOverflow) as info:
        await engine.start(chat_request("word " * N_CTX))
    assert info.value.param == "messages"


async def test_exactly_filling_the_context_is_allowed(engine):
    prompt_tokens = (await run(engine, text_request(TEXT_PROMPT, max_tokens=1))).prompt_tokens
    generation = await engine.start(text_request(TEXT_PROMPT, max_tokens=N_CTX - prompt_tokens))
    generation.cancel()
    async for _ in generation:  # the cancelled job still ends its stream
        pass


@pytest.mark.parametrize("token", [-1, 49152, 10**6])
async def test_logit_bias_outside_the_vocabulary(engine, token):
    assert engine.model.n_vocab == 49152
    sampling = SamplingParams(temperature=0.0, logit_bias=((token, -100.0),))
    with pytest.raises(InvalidRequest) as info:
        await engine.start(text_request(TEXT_PROMPT, max_tokens=4, sampling=sampling))
    assert info.value.param == "logit_bias"


async def test_suffix_without_fill_in_the_middle_tokens(engine):
    assert engine.model.fim_tokens() is None  # SmolLM2 has none
    with pytest.raises(InvalidRequest) as info:
        await engine.start(text_request("def add(a, b):", suffix="return c", max_tokens=4))
    assert info.value.param == "suffix"


@pytest.mark.parametrize("ids", [[1, 49152], [10**6], [-5]])
async def test_prompt_token_outside_the_vocabulary(engine, ids):
    with pytest.raises(InvalidRequest) as info:
        await engine.start(text_request(token_ids=ids, max_tokens=4))
    assert info.value.param == "prompt"


async def test_empty_prompt(engine):
    with pytest.raises(InvalidRequest) as info:
        await engine.start(text_request("", max_tokens=4))
    assert info.value.param == "prompt"


async def test_a_refusal_leaves_the_engine_working(engine):
    reference = await run(engine, text_request(TEXT_PROMPT, max_tokens=8))
    with pytest.raises(InvalidRequest):
        await engine.start(text_request(token_ids=[10**6], max_tokens=4))
    with pytest.raises(ContextOverflow):
        await engine.start(text_request(TEXT_PROMPT, max_tokens=N_CTX))
    again = await run(engine, text_request(TEXT_PROMPT, max_tokens=8))
    assert again.text == reference.text

"""The real engine refuses bad requests in `start()`, with typed errors, before any
work is queued (the `engine` fixture checks the worker is left idle)."""

from __future__ import annotations

import pytest

from parlance.core.errors import ContextOverflow, InvalidRequest
from parlance.core.request import SamplingParams
from tests.support.real_engine import N_CTX, TEXT_PROMPT, chat_request, run, text_request

pytestmark = pytest.mark.model


async def test_max_tokens_beyond_the_context_is_cut_to_the_room_the_prompt_leaves(engine):
    generation = await engine.start(chat_request("Hello", max_tokens=32000))
    [group] = generation.job.groups
    assert group.max_tokens == N_CTX - len(group.tokens)
    generation.cancel()
    async for _ in generation:  # the cancelled job still ends its stream
        pass


@pytest.mark.parametrize("where", ["request", "engine"])
async def test_prompt_plus_max_tokens_over_the_context_when_strict(engine, where):
    request = chat_request("Hello", max_tokens=N_CTX, strict_max_tokens=where == "request")
    engine.strict_max_tokens = where == "engine"
    try:
        with pytest.raises(ContextOverflow) as info:
            await engine.start(request)
    finally:
        engine.strict_max_tokens = False
    assert info.value.param == "max_tokens"
    assert info.value.code == "context_length_exceeded"
    assert str(N_CTX) in info.value.message


async def test_prompt_alone_over_the_context(engine):
    with pytest.raises(ContextOverflow) as info:
        await engine.start(chat_request("word " * N_CTX))
    assert info.value.param == "messages"


@pytest.mark.parametrize("kind", ["chat", "text", "suffix"])
async def test_a_prompt_too_long_for_any_tokenization_is_refused_untokenized(engine,
                                                                             monkeypatch, kind):
    """No token of the vocabulary spells more than a few dozen bytes, so a prompt of
    100 bytes per context cell cannot fit, and tokenizing it would only burn CPU."""
    calls: list[int] = []
    tokenize = engine.model.tokenize

    def counted(text: str, **kw: bool) -> list[int]:
        calls.append(len(text))
        return tokenize(text, **kw)

    monkeypatch.setattr(engine.model, "tokenize", counted)
    huge = "word " * (20 * N_CTX)
    request = {"chat": chat_request(huge), "text": text_request(huge),
               "suffix": text_request("def f():", suffix=huge)}[kind]
    with pytest.raises(ContextOverflow) as info:
        await engine.start(request)
    assert "at least" in info.value.message
    assert not [n for n in calls if n >= len(huge)]


@pytest.mark.parametrize("text", [
    "Hello, world! " * 50, " " * 5000, "\n\n\t  " * 300, "🐱日本語" * 200,
    "<|im_start|>user\nHi<|im_end|>" * 100, "x" * 3000, "def f():\n    return 1\n" * 100,
])
def test_the_floor_on_tokens_holds(engine, text):
    tokens = engine.model.tokenize(text, add_special=True, parse_special=True)
    assert engine.model.fewest_tokens(len(text.encode())) <= len(tokens)


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
        await engine.start(text_request("word " * N_CTX, max_tokens=8))
    again = await run(engine, text_request(TEXT_PROMPT, max_tokens=8))
    assert again.text == reference.text

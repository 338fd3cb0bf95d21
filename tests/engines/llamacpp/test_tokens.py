"""The real tokenizer and template behind /tokenize, /detokenize, /apply-template."""

from __future__ import annotations

import pytest

from parlance.core.tokens import DetokenizeRequest, TokenizeRequest
from tests.support.real_engine import chat_request

pytestmark = pytest.mark.model


async def test_tokens_round_trip_with_special_tokens(engine):
    text = "<|im_start|>user\nHello, world! 日本<|im_end|>"
    tokens = await engine.tokenize(TokenizeRequest(None, (text,)))
    ids = [t.id for t in tokens]
    assert ids == engine.model.tokenize(text, add_special=False, parse_special=True)
    assert tokens[0].piece == b"<|im_start|>"  # one special token, spelled out
    assert await engine.detokenize(DetokenizeRequest(None, tuple(ids))) == text
    plain = await engine.tokenize(TokenizeRequest(None, (text,), parse_special=False))
    assert len(plain) > len(tokens)  # the markers as text


async def test_add_special_and_ids_in_the_content(engine):
    with_bos = await engine.tokenize(TokenizeRequest(None, ("Hi", 42, "there"),
                                                     add_special=True))
    without = await engine.tokenize(TokenizeRequest(None, ("Hi", 42, "there")))
    added = engine.model.tokenize("", add_special=True, parse_special=False)
    assert [t.id for t in with_bos] == added + [t.id for t in without]
    assert 42 in [t.id for t in without]


async def test_apply_template_is_the_prompt_a_generation_evaluates(engine):
    request = chat_request("What is the capital of France?")
    prompt = await engine.render_prompt(request)
    assert prompt.endswith("<|im_start|>assistant\n")
    tokens = engine.model.tokenize(prompt, add_special=True, parse_special=True)
    assert len(tokens) == await engine.count_tokens(request)

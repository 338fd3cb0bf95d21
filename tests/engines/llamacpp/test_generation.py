"""The real llama.cpp engine, driven directly (no HTTP): what it generates.

Greedy sampling (temperature 0) everywhere unless a test is about sampling, so
every expectation is exact. Expected texts are never hard-coded: each test
derives them from an unconstrained run of the same model first.
"""

from __future__ import annotations

import codecs
import math
from dataclasses import replace

import pytest

from parlance.core.events import Finish, TextDelta, Usage
from parlance.core.request import SamplingParams
from tests.support.real_engine import (
    CHAT_PROMPT,
    CJK_CHAT_PROMPT,
    EMOJI_PROMPT,
    LONG_CHAT_PROMPT,
    TEXT_PROMPT,
    TRANSLATE_PROMPT,
    boundary_stop,
    chat_request,
    endless,
    eog_tokens,
    first_multibyte,
    run,
    text_request,
    token_with_bytes,
)

pytestmark = pytest.mark.model

REPLACEMENT = "\ufffd"


def has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


# -- determinism ---------------------------------------------------------------------


async def test_greedy_chat_twice_is_identical(engine):
    first = await run(engine, chat_request(CHAT_PROMPT, max_tokens=32))
    second = await run(engine, chat_request(CHAT_PROMPT, max_tokens=32))
    assert first.text and first.text == second.text
    assert first.deltas == second.deltas
    assert first.finish == second.finish


async def test_greedy_text_twice_is_identical(engine):
    first = await run(engine, text_request(TEXT_PROMPT, max_tokens=24, sampling=endless(engine)))
    second = await run(engine, text_request(TEXT_PROMPT, max_tokens=24, sampling=endless(engine)))
    assert first.text and first.text == second.text
    assert first.usage.completion_tokens == second.usage.completion_tokens == 24


async def test_event_stream_shape(engine):
    """Text deltas, then exactly one Finish, then exactly one Usage, then the end."""
    result = await run(engine, chat_request(CHAT_PROMPT, max_tokens=32))
    kinds = [type(e) for e in result.events if type(e).__name__ != "PromptProgress"]
    assert kinds[-2:] == [Finish, Usage]
    assert set(kinds[:-2]) == {TextDelta}
    usage = result.usage
    assert usage.prompt_tokens == result.prompt_tokens > 0
    assert 0 < usage.completion_tokens <= 32
    assert usage.first_token_seconds is not None and usage.first_token_seconds > 0


async def test_an_end_of_generation_token_ends_the_choice_with_stop(engine):
    """An end-of-generation token ends the choice with `stop` before its budget and is no
    part of the text. Its logit is lifted so that the model picks it at once: when a model
    chooses to end by itself is the model's affair, not the engine's."""
    ending = SamplingParams(temperature=0.0,
                            logit_bias=tuple((t, 100.0) for t in eog_tokens(engine)))
    result = await run(engine, chat_request(CHAT_PROMPT, max_tokens=200, sampling=ending))
    assert result.finish == "stop"
    assert result.usage.completion_tokens == 0
    assert result.text == "" and not result.deltas


# -- stop strings --------------------------------------------------------------------


async def test_stop_string_split_across_tokens(engine):
    free = await run(engine, chat_request(LONG_CHAT_PROMPT, max_tokens=40, logprobs=0,
                                          sampling=endless(engine)))
    stop, at = boundary_stop([t.token for t in free.logprobs], free.text)

    stopped = await run(engine, chat_request(LONG_CHAT_PROMPT, max_tokens=40, stop=(stop,),
                                             sampling=endless(engine)))

    assert stopped.text == free.text[:at]
    assert stop not in stopped.text
    assert all(stop not in delta for delta in stopped.deltas)
    assert stopped.finish == "stop"
    assert stopped.usage.completion_tokens < free.usage.completion_tokens


async def test_stop_list_first_match_wins(engine):
    free = await run(engine, text_request(TEXT_PROMPT, max_tokens=30, logprobs=0,
                                          sampling=endless(engine)))
    stop, at = boundary_stop([t.token for t in free.logprobs], free.text)
    # another stop that also occurs, but only after the chosen one
    later = next(free.text[i:i + 4] for i in range(at + len(stop), len(free.text) - 4)
                 if free.text[i:i + 4].strip() and free.text.find(free.text[i:i + 4]) > at)

    stopped = await run(engine, text_request(
        TEXT_PROMPT, max_tokens=30, stop=("never appears in the output", later, stop),
        sampling=endless(engine)))

    assert stopped.text == free.text[:at]
    assert stopped.finish == "stop"


async def test_stop_on_a_multibyte_character(engine):
    free = await run(engine, chat_request(CJK_CHAT_PROMPT, max_tokens=24))
    stop = first_multibyte(free.text)

    stopped = await run(engine, chat_request(CJK_CHAT_PROMPT, max_tokens=24, stop=(stop,)))

    assert stopped.text == free.text[: free.text.index(stop)]
    assert REPLACEMENT not in stopped.text
    assert stopped.finish == "stop"


async def test_stop_string_absent_from_output_changes_nothing(engine):
    free = await run(engine, text_request(TEXT_PROMPT, max_tokens=16, sampling=endless(engine)))
    same = await run(engine, text_request(TEXT_PROMPT, max_tokens=16, stop=("@@@", "%%%"),
                                          sampling=endless(engine)))
    assert same.text == free.text
    assert same.finish == "length"


# -- length ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["chat", "text"])
async def test_max_tokens_three_finishes_with_length(engine, kind):
    sampling = endless(engine)
    request = (chat_request(LONG_CHAT_PROMPT, max_tokens=3, sampling=sampling) if kind == "chat"
               else text_request(TEXT_PROMPT, max_tokens=3, sampling=sampling))
    result = await run(engine, request)
    assert result.finish == "length"
    assert result.usage.completion_tokens == 3
    longer = await run(engine, replace(request, max_tokens=10))
    assert longer.text.startswith(result.text)


# -- logprobs ----------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", [CHAT_PROMPT, CJK_CHAT_PROMPT])
async def test_chat_logprobs_describe_the_emitted_text(engine, prompt):
    result = await run(engine, chat_request(prompt, max_tokens=24, logprobs=3))
    tokens = result.logprobs
    assert len(tokens) == result.usage.completion_tokens

    assert "".join(t.token for t in tokens) == result.text
    assert b"".join(bytes(t.bytes) for t in tokens) == result.text.encode()
    decoder = codecs.getincrementaldecoder("utf-8")()
    whole = 0
    for t in tokens:
        raw = bytes(t.bytes)
        assert raw  # a generated token always has its bytes
        starts_clean = decoder.getstate()[0] == b""
        decoder.decode(raw)
        if starts_clean and decoder.getstate()[0] == b"":
            assert t.token == raw.decode("utf-8")  # a complete token: text is its UTF-8
            whole += 1

        assert t.logprob is not None and t.logprob <= 0
        assert len(t.top) == 3
        assert [a.logprob for a in t.top] == sorted((a.logprob for a in t.top), reverse=True)
        assert bytes(t.top[0].bytes) == raw  # greedy picks the most likely token
        assert math.isclose(t.top[0].logprob, t.logprob, abs_tol=1e-9)
        assert all(math.isfinite(a.logprob) and a.logprob <= 0 for a in t.top)
    assert whole > 0


async def test_logprobs_do_not_change_the_text(engine):
    plain = await run(engine, chat_request(CJK_CHAT_PROMPT, max_tokens=24))
    with_lp = await run(engine, chat_request(CJK_CHAT_PROMPT, max_tokens=24, logprobs=2))
    assert with_lp.text == plain.text
    assert [d for d in with_lp.deltas if d] == [d for d in plain.deltas if d]


async def test_logprobs_zero_gives_sampled_token_only(engine):
    result = await run(engine, text_request(TEXT_PROMPT, max_tokens=8, logprobs=0,
                                            sampling=endless(engine)))
    assert len(result.logprobs) == 8
    assert all(t.top == () for t in result.logprobs)


async def test_echo_with_logprobs(engine):
    plain = await run(engine, text_request(TEXT_PROMPT, max_tokens=8))
    echoed = await run(engine, text_request(TEXT_PROMPT, max_tokens=8, echo=True, logprobs=2))

    assert echoed.text == TEXT_PROMPT + plain.text
    tokens = echoed.logprobs
    assert len(tokens) == echoed.prompt_tokens + 8
    assert tokens[0].logprob is None
    assert all(t.logprob is not None and t.logprob <= 0 for t in tokens[1:])
    assert "".join(t.token for t in tokens[: echoed.prompt_tokens]) == TEXT_PROMPT
    assert "".join(t.token for t in tokens) == echoed.text


async def test_echo_without_logprobs_reuses_and_matches(engine):
    plain = await run(engine, text_request(TEXT_PROMPT, max_tokens=8))
    echoed = await run(engine, text_request(TEXT_PROMPT, max_tokens=8, echo=True))
    assert echoed.text == TEXT_PROMPT + plain.text
    assert echoed.logprobs == []


# -- UTF-8 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", [CJK_CHAT_PROMPT, TRANSLATE_PROMPT])
async def test_multibyte_chat_deltas_are_whole_characters(engine, prompt):
    result = await run(engine, chat_request(prompt, max_tokens=32))
    assert any(ord(c) > 0x7F for c in result.text), result.text  # really multi-byte output
    assert "".join(result.deltas) == result.text
    for delta in result.deltas:
        assert not has_surrogate(delta)
        if REPLACEMENT not in result.text:
            assert REPLACEMENT not in delta, result.deltas


def split_characters(result) -> int:
    """Tokens of `result` whose bytes are not whole UTF-8 characters by themselves."""
    def whole(raw: bytes) -> bool:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    return sum(not whole(bytes(t.bytes)) for t in result.logprobs)


async def test_emoji_continuation_streams_whole_emoji(engine):
    """Each 🐶 is three byte-level tokens; no delta may carry a partial character."""
    result = await run(engine, text_request(EMOJI_PROMPT, max_tokens=18, logprobs=0,
                                            sampling=endless(engine)))
    assert result.usage.completion_tokens == 18
    assert split_characters(result), result.text  # the model did write characters in pieces
    assert "".join(result.deltas) == result.text
    # (only a character max_tokens cut may end the last delta, as one U+FFFD)
    for delta in [*result.deltas[:-1], result.deltas[-1].removesuffix(REPLACEMENT)]:
        assert REPLACEMENT not in delta and not has_surrogate(delta)
        delta.encode("utf-8")  # strict: would raise on a lone surrogate


async def test_character_cut_by_max_tokens_becomes_one_replacement_at_the_end(engine):
    """Ending mid-character (max_tokens) flushes the held bytes as a single U+FFFD."""
    free = await run(engine, text_request(EMOJI_PROMPT, max_tokens=18, logprobs=0,
                                          sampling=endless(engine)))
    pieces = [bytes(t.bytes) for t in free.logprobs]
    # the last count of tokens that ends inside a character, and the bytes it holds
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    cuts = {}
    for count, piece in enumerate(pieces, 1):
        decoder.decode(piece)
        if held := decoder.getstate()[0]:
            cuts[count] = held
    assert cuts, f"no character was cut in {free.text!r}"
    count = max(cuts)
    whole = b"".join(pieces[:count])[:-len(cuts[count])].decode("utf-8", "replace")

    cut = await run(engine, text_request(EMOJI_PROMPT, max_tokens=count,
                                         sampling=endless(engine)))
    assert cut.finish == "length"
    assert cut.text == whole + REPLACEMENT
    assert all(REPLACEMENT not in d for d in cut.deltas[:-1])


async def test_utf8_prompt_is_reported_as_sent(engine):
    result = await run(engine, text_request("日本語 🐱🐶", max_tokens=4))
    assert result.prompt_text == "日本語 🐱🐶"


# -- sampling --------------------------------------------------------------------------------


def _sampled(seed: int | None, temperature: float = 1.0) -> SamplingParams:
    return SamplingParams(temperature=temperature, seed=seed)


async def test_seed_makes_sampling_reproducible(engine):
    a = await run(engine, text_request(TEXT_PROMPT, max_tokens=16, sampling=_sampled(1234)))
    b = await run(engine, text_request(TEXT_PROMPT, max_tokens=16, sampling=_sampled(1234)))
    assert a.text == b.text


async def test_different_seeds_sample_different_texts(engine):
    texts = set()
    for seed in (1, 2, 3, 4):
        result = await run(engine, text_request(TEXT_PROMPT, max_tokens=16,
                                                sampling=_sampled(seed, temperature=1.5)))
        texts.add(result.text)
    assert len(texts) >= 2


async def test_negative_logit_bias_bans_the_greedy_first_token(engine):
    free = await run(engine, chat_request(CHAT_PROMPT, max_tokens=4, logprobs=0))
    first = token_with_bytes(engine, bytes(free.logprobs[0].bytes))

    banned = await run(engine, chat_request(
        CHAT_PROMPT, max_tokens=4, logprobs=0,
        sampling=SamplingParams(temperature=0.0, logit_bias=((first, -100.0),))))

    assert bytes(banned.logprobs[0].bytes) != bytes(free.logprobs[0].bytes)
    assert banned.text != free.text


async def test_positive_logit_bias_forces_a_token(engine):
    forced = token_with_bytes(engine, b" banana")
    result = await run(engine, text_request(
        TEXT_PROMPT, max_tokens=1,
        sampling=SamplingParams(temperature=0.0, logit_bias=((forced, 100.0),))))
    assert result.text == " banana"


async def test_penalties_are_applied_and_deterministic(engine):
    penalised = SamplingParams(temperature=0.0, repeat_penalty=1.5, presence_penalty=1.0,
                               frequency_penalty=1.0)
    free = await run(engine, chat_request(LONG_CHAT_PROMPT, max_tokens=40))
    a = await run(engine, chat_request(LONG_CHAT_PROMPT, max_tokens=40, sampling=penalised))
    b = await run(engine, chat_request(LONG_CHAT_PROMPT, max_tokens=40, sampling=penalised))
    assert a.text == b.text
    assert a.text != free.text  # the greedy answer repeats itself; penalties change it


# -- KV prefix reuse ----------------------------------------------------------------------------


async def test_identical_request_reusing_the_cache_is_identical(engine):
    first = await run(engine, chat_request(CJK_CHAT_PROMPT, max_tokens=24, logprobs=2))
    again = await run(engine, chat_request(CJK_CHAT_PROMPT, max_tokens=24, logprobs=2))
    assert again.text == first.text
    assert [t.token for t in again.logprobs] == [t.token for t in first.logprobs]
    for x, y in zip(again.logprobs, first.logprobs, strict=True):
        assert math.isclose(x.logprob, y.logprob, abs_tol=1e-3)


async def test_extended_prompt_warm_equals_cold(engine):
    base = await run(engine, text_request(TEXT_PROMPT, max_tokens=12))
    extended = text_request(TEXT_PROMPT + base.text + " Then", max_tokens=12)
    warm = await run(engine, extended)  # reuses the cached prompt + generated tokens

    await run(engine, text_request("Zebras graze quietly.", max_tokens=2))  # evict the prefix
    cold = await run(engine, extended)

    assert warm.text == cold.text
    assert warm.usage.completion_tokens == cold.usage.completion_tokens


async def test_shorter_prompt_after_longer_is_unaffected(engine):
    reference = await run(engine, text_request(TEXT_PROMPT, max_tokens=12))
    await run(engine, text_request(TEXT_PROMPT + " there was a dragon", max_tokens=12))
    again = await run(engine, text_request(TEXT_PROMPT, max_tokens=12))
    assert again.text == reference.text


async def test_token_id_prompt_matches_text_prompt(engine):
    ids = engine.model.tokenize(TEXT_PROMPT, add_special=True, parse_special=True)
    by_text = await run(engine, text_request(TEXT_PROMPT, max_tokens=12))
    by_ids = await run(engine, text_request(token_ids=ids, max_tokens=12))
    assert by_ids.text == by_text.text
    assert by_ids.prompt_text == TEXT_PROMPT


# -- regressions: echo-only scoring and stop-cut token bytes ------------------------------------


async def test_echo_with_zero_max_tokens_generates_nothing(engine):
    result = await run(engine, text_request(TEXT_PROMPT, max_tokens=0, echo=True, logprobs=1))
    assert result.finish == "length"
    assert result.usage.completion_tokens == 0
    assert result.text == TEXT_PROMPT


async def test_logprob_bytes_of_a_token_cut_by_a_stop(engine):
    free = await run(engine, chat_request(LONG_CHAT_PROMPT, max_tokens=40, logprobs=0,
                                          sampling=endless(engine)))
    stop, at = boundary_stop([t.token for t in free.logprobs], free.text)
    stopped = await run(engine, chat_request(LONG_CHAT_PROMPT, max_tokens=40, logprobs=0,
                                             stop=(stop,), sampling=endless(engine)))
    assert stopped.text == free.text[:at]
    assert "".join(t.token for t in stopped.logprobs) == stopped.text
    assert b"".join(bytes(t.bytes) for t in stopped.logprobs) == stopped.text.encode()


async def test_greedy_fast_path_picks_what_llama_cpp_greedy_picks(engine):
    """The argmax fast path against llama.cpp's own greedy chain, on real logits."""
    import llama_cpp

    from parlance.engines.llamacpp.sampler import SamplerChain, _samplers

    await run(engine, text_request(TEXT_PROMPT, max_tokens=2))  # leaves logits in the context
    model = engine.model
    top = SamplerChain(model.n_vocab, SamplingParams(temperature=0.0)).sample(model, -1)
    # plain; the top token banned (the runner-up must win); a far token lifted to the top
    for bias in ((), ((top, -100.0),), ((50, 40.0), (7, 5.0))):
        params = SamplingParams(temperature=0.0, logit_bias=bias)
        fast = SamplerChain(model.n_vocab, params)
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        for sampler in _samplers(model.n_vocab, params):
            llama_cpp.llama_sampler_chain_add(chain, sampler)
        try:
            assert fast.ptr is None  # no llama.cpp chain behind the fast path
            assert fast.sample(model, -1) == llama_cpp.llama_sampler_sample(chain, model.ctx, -1)
        finally:
            llama_cpp.llama_sampler_free(chain)

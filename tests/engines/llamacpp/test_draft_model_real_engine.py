"""Speculative decoding with a draft model, on the real engine. Only SmolLM2 ships, so
it drafts for itself: in the batch-invariant layout its greedy guesses are the model's
own tokens, so nearly every draft token is accepted, and the output must be the same
tokens as without drafts. That exercises the mechanism whole: the draft's KV streams
kept in step with each slot (prompt, accepted tokens, rejected cells removed), its
guesses batched across sequences, `n` choices, a cancelled stream's slot reused, a
failing draft context. A draft as costly as the model is priced as such, and never
pays; these engines price it as if it were 20 times smaller, so that it drafts."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace

import pytest

from parlance.core.errors import InvalidRequest
from parlance.engines.llamacpp import LlamaCppEngine
from parlance.engines.llamacpp.draft_model import DraftModel
from parlance.engines.llamacpp.model import ContextSettings, LlamaModel
from parlance.engines.llamacpp.prompt_cache import CacheSettings
from parlance.engines.llamacpp.speculation import SpeculativeSettings
from parlance.engines.llamacpp.template import ChatTemplate
from tests.support.real_engine import (
    PATIENCE,
    asgi_client,
    chat_request,
    endless,
    first_deltas,
    make_app,
    model_path,
    rest,
    stream_mismatches,
    text_request,
    wait_idle,
)
from tests.support.real_engine import run as run_for

pytestmark = pytest.mark.model

SETTINGS = ContextSettings(n_ctx=1024, n_threads=2, parallel=4)
CHEAP = SpeculativeSettings(mode="draft", draft_cost=0.05)
LIST_PROMPT = "Monday, Tuesday, Wednesday, Monday, Tuesday, Wednesday, Monday,"
PROSE_PROMPT = "Write a short story about a lighthouse keeper."
SLOW_PATIENCE = 4 * PATIENCE  # two models decode in turn, on a machine that may be busy


async def run(engine, request):
    return await run_for(engine, request, timeout=SLOW_PATIENCE)


@pytest.fixture(scope="module")
def engine():
    path = model_path()
    drafting = LlamaCppEngine.load(path, SETTINGS, speculative=CHEAP, draft=path)
    yield drafting
    asyncio.run(drafting.aclose())


def counters(engine) -> tuple[int, int]:
    m = engine.metrics
    return m.speculative_tokens_drafted, m.speculative_tokens_accepted


def draft_in_step(engine) -> tuple[int, list]:
    """The draft's failed decodes (llama.cpp refuses a batch whose positions do not
    follow a stream's cells), and its streams whose cells are not what it holds."""
    draft = engine.draft
    return draft.failures, stream_mismatches(
        draft.model.memory, [draft.held(slot) for slot in range(engine.slots)])


async def without_drafts(engine, request):
    return await run(engine, replace(request, speculative=False))


def same_tokens(a, b) -> bool:
    return ([c.token_ids for c in a.result.ordered_choices()]
            == [c.token_ids for c in b.result.ordered_choices()])


def test_the_engine_loads_the_draft_in_the_batch_invariant_layout(engine):
    assert engine.draft is not None
    assert engine.model.settings.batch_invariant
    assert engine.draft.model.settings == engine.model.settings


@pytest.mark.parametrize("request_", [
    text_request(LIST_PROMPT, max_tokens=40),
    chat_request(PROSE_PROMPT, max_tokens=40),
], ids=["list", "prose"])
async def test_greedy_output_is_the_same_with_the_draft_model_and_without(engine, request_):
    before = counters(engine)
    with_ = await run(engine, request_)
    drafted, accepted = (now - then for now, then in zip(counters(engine), before,
                                                          strict=True))
    without = await without_drafts(engine, request_)
    assert same_tokens(with_, without)
    assert with_.text == without.text and with_.finish == without.finish
    assert drafted >= with_.usage.completion_tokens // 2  # most tokens came from drafts
    # The same model guesses the model's own tokens: only a guess past the end is lost.
    assert accepted >= drafted - 1
    assert draft_in_step(engine) == (0, [])


async def test_streams_drafting_together_say_what_each_says_alone(engine):
    """Beside one that opted out of drafts."""
    requests = [text_request(LIST_PROMPT, max_tokens=32),
                chat_request(PROSE_PROMPT, max_tokens=32, speculative=False),
                text_request("Once upon a time", max_tokens=32),
                chat_request("Name three primary colours.", max_tokens=32)]
    alone = [await without_drafts(engine, r) for r in requests]
    drafted = counters(engine)[0]
    together = await asyncio.gather(*(run(engine, r) for r in requests))
    for solo, batched in zip(alone, together, strict=True):
        assert same_tokens(batched, solo)
    assert counters(engine)[0] > drafted
    assert draft_in_step(engine) == (0, [])


async def test_n_choices_each_draft_in_their_own_stream(engine):
    request = text_request(LIST_PROMPT, max_tokens=24, n=3)
    drafted = counters(engine)[0]
    with_ = await run(engine, request)
    assert counters(engine)[0] > drafted
    without = await without_drafts(engine, request)
    assert same_tokens(with_, without)
    texts = {c.text for c in with_.result.ordered_choices()}
    assert len(texts) == 1  # greedy choices are one answer
    assert draft_in_step(engine) == (0, [])


async def test_a_cancelled_stream_frees_its_slot_and_the_next_drafts_in_step(engine):
    generation = await engine.start(text_request("Once upon a time", max_tokens=900,
                                                 sampling=endless(engine)))
    await first_deltas(generation, 8)
    assert engine.metrics.slots_in_use == 1
    generation.cancel()
    await rest(generation)
    await wait_idle(engine, SLOW_PATIENCE)
    assert engine.metrics.slots_in_use == 0
    assert draft_in_step(engine) == (0, [])
    # The next sequence takes that slot; the draft's stream there catches up with it.
    request = text_request(LIST_PROMPT, max_tokens=24)
    before = counters(engine)
    with_ = await run(engine, request)
    drafted, accepted = (now - then for now, then in zip(counters(engine), before,
                                                          strict=True))
    assert drafted > 0 and accepted >= drafted - 1
    assert same_tokens(with_, await without_drafts(engine, request))


async def test_a_prefix_the_prompt_cache_restores_is_caught_up_by_the_draft():
    """One slot: the second prompt takes it (the first goes to the RAM tier), the first
    comes back restored from there, and the draft's stream, holding the second's
    tokens, catches up with what the slot now holds."""
    path = model_path()
    cached = LlamaCppEngine.load(path, replace(SETTINGS, parallel=1),
                                 prompt_cache=CacheSettings(ram_bytes=64 << 20),
                                 speculative=CHEAP, draft=path)
    first = text_request(" ".join([LIST_PROMPT] * 3), max_tokens=16)
    try:
        await run(cached, first)
        await run(cached, chat_request(PROSE_PROMPT, max_tokens=16))
        before = counters(cached)
        again = await run(cached, first)
        assert again.usage.cached_tokens > 0  # restored, not evaluated
        drafted, accepted = (now - then for now, then in zip(counters(cached), before,
                                                              strict=True))
        assert drafted > 0 and accepted >= drafted - 1
        assert draft_in_step(cached) == (0, [])
        assert same_tokens(again, await without_drafts(cached, first))
    finally:
        await cached.aclose()


async def test_metrics_count_the_drafted_and_accepted_tokens(engine):
    async with asgi_client(make_app(engine)) as client:
        def total(text: str, name: str) -> int:
            return sum(int(float(v)) for v in re.findall(
                rf"^parlance_{name}_total{{[^}}]*}} (\S+)$", text, re.M))

        before = (await client.get("/metrics")).text
        response = await client.post("/v1/completions", json={
            "prompt": LIST_PROMPT, "max_tokens": 24, "temperature": 0})
        assert response.status_code == 200
        after = (await client.get("/metrics")).text
    drafted = (total(after, "speculative_tokens_drafted")
               - total(before, "speculative_tokens_drafted"))
    accepted = (total(after, "speculative_tokens_accepted")
                - total(before, "speculative_tokens_accepted"))
    assert drafted > 0 and drafted - 1 <= accepted <= drafted


async def test_a_draft_as_costly_as_the_model_never_drafts():
    """Priced by its weights (the default), SmolLM2 drafting for itself costs a whole
    step per guess: the planner never finds it worth it."""
    path = model_path()
    priced = LlamaCppEngine.load(path, replace(SETTINGS, parallel=1),
                                 speculative=SpeculativeSettings(mode="draft"), draft=path)
    try:
        result = await run(priced, text_request(LIST_PROMPT, max_tokens=24))
        assert result.failed is None and result.usage.completion_tokens > 1
        assert counters(priced) == (0, 0)
    finally:
        await priced.aclose()


async def test_a_draft_whose_decodes_fail_leaves_the_answer_as_it_is():
    """A draft context too small for the prompt: every draft decode fails, the steps go
    on without drafts, and the stream ends by its contract with the same tokens."""
    path = model_path()
    settings = replace(SETTINGS, parallel=1, batch_invariant=True)
    model = LlamaModel(path, settings)
    draft = DraftModel.load(path, replace(settings, n_ctx=64), model)  # 256 cells
    template = ChatTemplate(model.chat_template, bos_token=model.special_text(model.bos),
                            eos_token=model.special_text(model.eos))
    failing = LlamaCppEngine(model, template, speculative=CHEAP, draft=draft)
    try:
        request = text_request(" ".join([LIST_PROMPT] * 20), max_tokens=16)
        with_ = await run(failing, request)
        assert with_.failed is None and with_.finish in ("stop", "length")
        assert draft.failures > 0
        assert counters(failing) == (0, 0)
        assert same_tokens(with_, await without_drafts(failing, request))
    finally:
        await failing.aclose()


def test_a_draft_of_another_vocabulary_is_refused():
    """A real second GGUF: the BERT embedding model the encoder tests convert (WordPiece,
    30522 tokens) cannot draft for SmolLM2 (BPE, 49152)."""
    from tests.support.bert_gguf import minilm_gguf

    with pytest.raises(InvalidRequest, match="vocabulary differs") as info:
        LlamaCppEngine.load(model_path(), replace(SETTINGS, parallel=1), speculative=CHEAP,
                            draft=minilm_gguf())
    assert info.value.param == "draft_model"
    assert "another kind" in info.value.message

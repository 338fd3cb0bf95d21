"""Speculative decoding on the real engine: it changes how many steps a sequence
takes, never what it says. Greedy text and tokens, logprobs, stop strings and
budgets are the same with drafts on and off (the per-request opt-out turns them
off), sampled outputs follow the same distribution, and a grammar still holds."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from parlance.core.request import GenerationRequest, SamplingParams
from parlance.core.tools import ResponseFormat
from parlance.engines.llamacpp.speculation import DEFAULT_SPECULATION
from tests.support.real_engine import PATIENCE, chat_request, load_engine, text_request
from tests.support.real_engine import run as run_for
from tests.support.statistics import critical_value, frequencies, homogeneity

pytestmark = pytest.mark.model

CODE = """def total_price(items, tax_rate):
    subtotal = 0
    for item in items:
        subtotal += item.price * item.quantity
    tax = subtotal * tax_rate
    return subtotal + tax
"""
# The first lines of bench/speculative.py's code-edit workload, which SmolLM2 copies
# back (other functions it rewrites in its own way).
LONG_CODE = """def summarize_orders(orders, tax_rate, discount_codes):
    subtotal = 0
    lines = []
    for order in orders:
        price = order["price"] * order["quantity"]
        if order.get("code") in discount_codes:
            price = price * (1 - discount_codes[order["code"]])
        subtotal += price
        lines.append(f"{order['name']}: {price:.2f}")
    tax = subtotal * tax_rate
    total = subtotal + tax
    return total
"""
# A prompt whose answer copies its input (what prompt lookup drafts well), one of free
# prose, and one the model continues by repeating itself.
COPY_PROMPT = (f"Here is a Python function:\n\n{CODE}\nThe same function with `subtotal` "
               f"renamed to `base`:\n\n")
PROSE_PROMPT = "Write a short story about a lighthouse keeper."
LIST_PROMPT = "Monday, Tuesday, Wednesday, Monday, Tuesday, Wednesday, Monday,"


# Each test runs its requests twice (with drafts and without), one after the other, on a
# machine that may be busy: a run may take several times the usual patience.
SLOW_PATIENCE = 4 * PATIENCE


async def run(engine, request: GenerationRequest):
    return await run_for(engine, request, timeout=SLOW_PATIENCE)


def on_and_off(request: GenerationRequest) -> tuple[GenerationRequest, GenerationRequest]:
    return replace(request, speculative=True), replace(request, speculative=False)


async def fresh(engine, request: GenerationRequest):
    await engine.clear_cache()
    return await run(engine, request)


@pytest.fixture(scope="module")
def engine():
    """An engine of its own that drafts (the shared one runs as `parlance serve` does)."""
    drafting = load_engine(DEFAULT_SPECULATION)
    yield drafting
    asyncio.run(drafting.aclose())


def counters(engine) -> tuple[int, int]:
    m = engine.metrics
    return m.speculative_tokens_drafted, m.speculative_tokens_accepted


def test_an_engine_that_drafts_keeps_the_batch_invariant_layout(engine):
    """Verifying drafts batches a sequence's tokens; only this layout keeps their logits
    those of one-token steps (see INVARIANT_KV)."""
    assert engine.scheduler.speculator.enabled
    assert engine.model.settings.batch_invariant


@pytest.mark.parametrize("request_", [
    text_request(COPY_PROMPT, max_tokens=64),
    chat_request(f"Rename `subtotal` to `base` and show the whole function:\n\n{CODE}",
                 max_tokens=64),
    chat_request(PROSE_PROMPT, max_tokens=32),
    text_request(LIST_PROMPT, max_tokens=32),
], ids=["copy", "chat-edit", "prose", "list"])
async def test_greedy_output_is_the_same_with_speculation_on_and_off(engine, request_):
    on, off = on_and_off(request_)
    without = await fresh(engine, off)
    with_ = await fresh(engine, on)
    assert with_.result.choice(0).token_ids == without.result.choice(0).token_ids
    assert with_.text == without.text
    assert with_.finish == without.finish
    assert with_.usage.completion_tokens == without.usage.completion_tokens


async def test_drafts_are_made_and_accepted_on_text_that_repeats_itself(engine):
    drafted, accepted = counters(engine)
    await fresh(engine, text_request(LIST_PROMPT, max_tokens=32))
    now_drafted, now_accepted = counters(engine)
    assert now_drafted > drafted
    assert now_accepted > accepted
    before = counters(engine)
    await fresh(engine, replace(text_request(LIST_PROMPT, max_tokens=32), speculative=False))
    assert counters(engine) == before  # the opt-out drafts nothing


async def test_a_long_copy_comes_out_of_long_drafts(engine):
    """Asked to rewrite a function, the model copies it: most of its tokens are drafted
    and kept, several a step, instead of one token a step."""
    _, accepted = counters(engine)
    result = await fresh(engine, chat_request(
        "Rewrite this function with the variable `subtotal` renamed to `base`. Output "
        f"only the full code.\n\n```python\n{LONG_CODE}```", max_tokens=64))
    tokens = result.usage.completion_tokens
    steps = tokens - (counters(engine)[1] - accepted)  # one token a step besides those kept
    assert 3 * steps <= tokens


async def drafts_batched_as_alone(engine, requests: list[GenerationRequest]) -> int:
    """Run `requests` together; each gives what it gives alone without drafts. Returns
    the tokens drafted meanwhile."""
    alone = [await fresh(engine, replace(r, speculative=False)) for r in requests]
    await engine.clear_cache()
    drafted = counters(engine)[0]
    together = await asyncio.gather(*(run(engine, r) for r in requests))
    for solo, batched in zip(alone, together, strict=True):
        assert batched.result.choice(0).token_ids == solo.result.choice(0).token_ids
        assert batched.finish == solo.finish
    return counters(engine)[0] - drafted


async def test_a_sequence_drafting_beside_one_that_does_not_says_what_each_says_alone(
        engine):
    """Beside one sequence without drafts, a likely draft is worth the extra ubatch it
    makes (step_cost.py): the pair drafts."""
    assert await drafts_batched_as_alone(engine, [
        replace(text_request(LIST_PROMPT, max_tokens=32), speculative=True),
        replace(chat_request(PROSE_PROMPT, max_tokens=32), speculative=False)]) > 0


async def test_a_batch_of_four_where_only_some_may_draft_says_what_each_says_alone(engine):
    await drafts_batched_as_alone(engine, [
        replace(text_request(LIST_PROMPT, max_tokens=24), speculative=True),
        replace(chat_request(PROSE_PROMPT, max_tokens=24), speculative=False),
        replace(text_request(COPY_PROMPT, max_tokens=24), speculative=True),
        replace(chat_request("Name three primary colours.", max_tokens=24),
                speculative=False)])


async def test_logprobs_stop_strings_and_budgets_are_those_without_speculation(engine):
    request = text_request(LIST_PROMPT, max_tokens=24, logprobs=2, stop=("Saturday, Sat",))
    on, off = on_and_off(request)
    without = await fresh(engine, off)
    with_ = await fresh(engine, on)
    assert with_.text == without.text
    assert with_.finish == without.finish
    assert with_.result.choice(0).stop_sequence == without.result.choice(0).stop_sequence
    assert [(lp.token, lp.logprob, [t.token for t in lp.top]) for lp in with_.logprobs] == \
        [(lp.token, lp.logprob, [t.token for t in lp.top]) for lp in without.logprobs]
    short = await fresh(engine, text_request(LIST_PROMPT, max_tokens=5))
    assert short.usage.completion_tokens == 5  # a draft never runs past max_tokens
    assert short.finish == "length"


async def test_a_grammar_constrained_request_with_speculation_stays_valid(engine):
    schema = {"type": "object", "properties": {"days": {"type": "array", "items": {
        "type": "string", "enum": ["Monday", "Tuesday", "Wednesday"]}, "maxItems": 6}},
        "required": ["days"], "additionalProperties": False}
    request = chat_request(f"List the days in this text as JSON: {LIST_PROMPT} Tuesday",
                           max_tokens=80,
                           response_format=ResponseFormat("json_schema", schema=schema))
    on, off = on_and_off(request)
    without = await fresh(engine, off)
    with_ = await fresh(engine, on)
    value = json.loads(with_.text)
    assert set(value) == {"days"}
    assert set(value["days"]) <= {"Monday", "Tuesday", "Wednesday"}
    assert with_.text == without.text


SAMPLED = SamplingParams(temperature=1.0, top_k=20)
# Two choices of six tokens: after the first token (the prompt's own step) a draft of up
# to four tokens is worth its rows for a pair of sequences repeating the prompt; a
# one-token draft never is (step_cost.py: a second row in a step costs a whole step).
CHOICES, LENGTH, REQUESTS = 2, 6, 120


async def sampled_outputs(engine, *, speculative: bool) -> list[tuple[int, ...]]:
    outputs = []
    for seed in range(REQUESTS):
        request = text_request(LIST_PROMPT, max_tokens=LENGTH, n=CHOICES,
                               sampling=replace(SAMPLED, seed=1000 + CHOICES * seed),
                               speculative=speculative)
        result = (await run(engine, request)).result
        outputs += [c.token_ids or () for c in result.ordered_choices()]
    return outputs


async def test_sampled_outputs_follow_the_same_distribution_with_and_without_drafts(engine):
    """Six-token continuations of a repetitive prompt (where drafts are made and
    verified), 240 samples each way: the same seeds draw the same tokens, and the token
    frequencies at each of the first three positions pass a chi-square test of
    homogeneity."""
    await engine.clear_cache()
    drafted = counters(engine)[0]
    on = await sampled_outputs(engine, speculative=True)
    assert counters(engine)[0] > drafted
    off = await sampled_outputs(engine, speculative=False)
    assert on == off  # seeded sampling draws one random number per emitted token either way
    for position in range(3):
        statistic, degrees = homogeneity(
            frequencies([o[position] for o in on if len(o) > position]),
            frequencies([o[position] for o in off if len(o) > position]))
        assert statistic < critical_value(degrees)

"""Reasoning on the REAL engine, with a thinking chat template (SmolLM2 has none of
its own): reasoning events, reasoning token counts, the enable_thinking switch,
and a forced grammar that waits for the reasoning to end."""

from __future__ import annotations

import contextlib

import pytest

from parlance.core.events import ReasoningDelta, TextDelta
from parlance.core.request import SamplingParams
from parlance.core.tools import ReasoningEffort, ReasoningRequest, ResponseFormat
from parlance.engines.grammar import quoted
from parlance.engines.llamacpp.plan import build_plan, render_chat
from parlance.engines.llamacpp.template import ChatTemplate
from tests.support.real_engine import Run, chat_request, eog_tokens, run
from tests.support.templates import THINKING

pytestmark = pytest.mark.model


@contextlib.contextmanager
def thinking_template(engine):
    saved = engine.template
    engine.template = ChatTemplate(THINKING, bos_token="", eos_token="<|im_end|>")
    try:
        yield engine.template
    finally:
        engine.template = saved


def no_way_out(engine) -> SamplingParams:
    """Greedy, with every token that ends the generation or could start `</think>`
    banned: the model can neither stop nor close its reasoning by itself, so what ends
    them is the engine's doing (max_tokens, the budget's end marker, which the engine
    writes past the sampler, or a complete grammar), not the model's wording."""
    model = engine.model
    banned = {t for t in range(model.n_vocab) if b"<" in model.piece(t)} | set(eog_tokens(engine))
    return SamplingParams(temperature=0.0, logit_bias=tuple((t, -100.0) for t in sorted(banned)))


def end_marker(engine) -> list[int]:
    return engine.model.tokenize("</think>", add_special=False, parse_special=True)


async def think(engine, question: str, max_tokens: int, **kw) -> Run:
    with thinking_template(engine):
        return await run(engine, chat_request(question, max_tokens=max_tokens,
                                              sampling=no_way_out(engine), **kw))


def reasoning_then_text(result: Run) -> None:
    """Reasoning came first, and no reasoning delta followed the first text delta."""
    assert result.result.choice(0).reasoning
    kinds = [type(e) for e in result.events if isinstance(e, (ReasoningDelta, TextDelta))]
    assert kinds == sorted(kinds, key=lambda kind: kind is TextDelta)


async def test_output_after_an_opened_think_is_reasoning(llama):
    result = await think(llama, "Why is the sky blue?", max_tokens=16)
    assert result.finish == "length"
    assert not any(isinstance(e, TextDelta) and e.text for e in result.events)
    reasoning = "".join(e.text for e in result.events if isinstance(e, ReasoningDelta))
    assert reasoning and reasoning == result.result.choice(0).reasoning
    assert result.usage.reasoning_tokens == result.usage.completion_tokens == 16


async def test_a_reasoning_budget_ends_the_reasoning_and_the_answer_follows(llama):
    """Anthropic's `thinking.budget_tokens`: after that many reasoning tokens the engine
    writes the end marker itself; the reasoning is what the model said up to there, and
    the model goes on with an answer."""
    question = "Why is the sky blue?"
    free = await think(llama, question, max_tokens=16)
    cut = await think(llama, question, max_tokens=60,
                      reasoning=ReasoningRequest(ReasoningEffort.ON, budget_tokens=16))
    # the marker ends the reasoning
    assert cut.usage.reasoning_tokens == 16 + len(end_marker(llama))
    assert cut.result.choice(0).reasoning == free.result.choice(0).reasoning
    assert cut.usage.completion_tokens == 60 and cut.text  # an answer follows
    reasoning_then_text(cut)


# A schema with exactly two valid answers: the grammar is complete a few tokens after it
# engages, whatever the model would rather write.
CLEAR_SKY = ResponseFormat("json_schema", schema={
    "type": "object", "properties": {"clear": {"type": "boolean"}},
    "required": ["clear"], "additionalProperties": False})
ANSWERS = ('{"clear": true}', '{"clear": false}')
BUDGET = 8


async def budgeted_json(engine, max_tokens: int) -> Run:
    result = await think(engine, "Is the sky clear? Answer as JSON.", max_tokens,
                         response_format=CLEAR_SKY,
                         reasoning=ReasoningRequest(ReasoningEffort.ON, budget_tokens=BUDGET))
    assert result.usage.reasoning_tokens == BUDGET + len(end_marker(engine))
    reasoning_then_text(result)
    return result


async def test_a_reasoning_budget_then_a_forced_grammar(llama):
    """The grammar that waits for the reasoning to end engages after the forced end, and
    the choice stops when the grammar is complete (max_tokens leaves room for it)."""
    result = await budgeted_json(llama, max_tokens=64)
    assert result.finish == "stop"
    assert result.text.lstrip() in ANSWERS


async def test_a_forced_grammar_cut_by_max_tokens_leaves_a_prefix_of_its_json(llama):
    result = await budgeted_json(llama, max_tokens=BUDGET + len(end_marker(llama)) + 2)
    assert result.finish == "length"
    answer = result.text.lstrip()
    assert any(full.startswith(answer) and full != answer for full in ANSWERS), answer


async def test_reasoning_effort_none_turns_thinking_off(llama):
    result = await think(llama, "Why is the sky blue?", max_tokens=16,
                         reasoning=ReasoningRequest(ReasoningEffort.NONE))
    assert result.text and not result.result.choice(0).reasoning
    assert result.usage.reasoning_tokens == 0


def test_a_forced_grammar_engages_when_the_reasoning_ends(llama):
    tpl = ChatTemplate(THINKING, bos_token="", eos_token="<|im_end|>")
    request = chat_request("Give me JSON.", response_format=ResponseFormat("json_object"))
    prompt = render_chat(tpl, request, request.prompts[0].messages)
    plan = build_plan(request, tpl, prompt, llama.tokenizer, llama.model.n_vocab, quoted)
    guide = plan.for_choice(0)
    assert not guide.constrained  # the prompt opened <think>: free text first
    for token in llama.model.tokenize("The user wants JSON.</think>\n", add_special=False,
                                      parse_special=False):
        guide.accept(token, llama.model.piece(token).decode())
    assert guide.constrained
    for token in llama.model.tokenize('{"a": 1}', add_special=False, parse_special=False):
        done = guide.accept(token, llama.model.piece(token).decode())
    assert done  # the object is complete: nothing but the end may follow

"""Reasoning on the REAL engine, with a thinking chat template (SmolLM2 has none of
its own): reasoning events, reasoning token counts, the enable_thinking switch,
and a forced grammar that waits for the reasoning to end."""

from __future__ import annotations

import contextlib
import json

import pytest

from parlance.core.events import ReasoningDelta, TextDelta
from parlance.core.tools import ReasoningEffort, ReasoningRequest, ResponseFormat
from parlance.engines.grammar import quoted
from parlance.engines.llamacpp.plan import build_plan, render_chat
from parlance.engines.llamacpp.template import ChatTemplate
from tests.engines.llamacpp.test_plan import THINKING
from tests.real_engine import chat_request, run

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def thinking_template(engine):
    saved = engine.template
    engine.template = ChatTemplate(THINKING, bos_token="", eos_token="<|im_end|>")
    try:
        yield engine.template
    finally:
        engine.template = saved


async def test_output_after_an_opened_think_is_reasoning(llama):
    with thinking_template(llama):
        result = await run(llama, chat_request("Why is the sky blue?", max_tokens=16))
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
    with thinking_template(llama):
        free = await run(llama, chat_request(question, max_tokens=16))
        cut = await run(llama, chat_request(
            question, max_tokens=60,
            reasoning=ReasoningRequest(ReasoningEffort.ON, budget_tokens=16)))
    end = llama.model.tokenize("</think>", add_special=False, parse_special=True)
    assert cut.usage.reasoning_tokens == 16 + len(end)  # the marker ends the reasoning
    reasoning = cut.result.choice(0).reasoning
    assert reasoning == free.result.choice(0).reasoning
    assert cut.text.strip()  # an answer follows
    assert not any(isinstance(e, ReasoningDelta) for e in cut.events[
        next(i for i, e in enumerate(cut.events) if isinstance(e, TextDelta)):])


async def test_a_reasoning_budget_then_a_forced_grammar(llama):
    """The grammar that waits for the reasoning to end engages after the forced end."""
    with thinking_template(llama):
        result = await run(llama, chat_request(
            "Describe the sky as JSON.", max_tokens=80,
            response_format=ResponseFormat("json_object"),
            reasoning=ReasoningRequest(ReasoningEffort.ON, budget_tokens=8)))
    assert result.result.choice(0).reasoning
    assert result.finish == "stop" and isinstance(json.loads(result.text), dict)


async def test_reasoning_effort_none_turns_thinking_off(llama):
    with thinking_template(llama):
        result = await run(llama, chat_request(
            "Why is the sky blue?", max_tokens=16,
            reasoning=ReasoningRequest(ReasoningEffort.NONE)))
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

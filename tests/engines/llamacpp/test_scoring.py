"""Scoring continuations on the real engine (SmolLM2): a decision's most likely label is
the label the model's own greedy answer starts with, and its probabilities sum to 1."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace

import pytest

from parlance.core import decisions as d
from parlance.core.events import TextDelta
from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams
from parlance.core.scoring import ScoreRequest
from parlance.engines.llamacpp import LlamaCppEngine
from parlance.engines.llamacpp.invariant_attention import available
from parlance.engines.llamacpp.model import ContextSettings
from tests.support.real_engine import (
    LONG_CHAT_PROMPT,
    chat_request,
    kv_cache_mismatches,
    model_path,
    run,
)

pytestmark = pytest.mark.model


def choice(instructions: str, *labels: str) -> d.Question:
    return d.Question(d.Kind.CHOICE, instructions, tuple(d.Option(label) for label in labels))


# Hand-made: ten yes/no questions and ten choices (some labels of several tokens).
QUESTIONS: list[tuple[str, d.Question]] = [
    ("The sky is blue on a clear day.", d.predicate("Is the sky blue on a clear day?")),
    ("Paris is the capital of France.", d.predicate("Is Paris the capital of France?")),
    ("Water boils at 100 degrees Celsius at sea level.", d.predicate("Does water boil at 100 C?")),
    ("I was charged twice and nobody answers my emails!",
     d.predicate("Is the customer angry?")),
    ("The cat sleeps on the sofa all day.", d.predicate("Is the cat a dog?")),
    ("Tom has three apples and eats one.", d.predicate("Does Tom have apples?")),
    ("The meeting is on Monday at 10am.", d.predicate("Is the meeting on Monday?")),
    ("Fish live in water.", d.predicate("Do fish live in water?")),
    ("The store is closed on Sundays.", d.predicate("Is the store open on Sundays?")),
    ("Snow is cold.", d.predicate("Is snow hot?")),
    ("I love this product, it works perfectly!", choice("What is the sentiment?",
                                                         "positive", "negative", "neutral")),
    ("My package never arrived.", choice("Which team should handle this?",
                                         "billing", "shipping", "technical support")),
    ("The app crashes every time I open it.", choice("Which team should handle this?",
                                                     "billing", "shipping", "technical support")),
    ("The capital of Italy is Rome.", choice("Which city is the capital of Italy?",
                                             "Rome", "Milan", "Naples")),
    ("Apples are red, bananas are yellow.", choice("What color are bananas?",
                                                   "red", "yellow", "blue", "green")),
    ("It is raining heavily outside.", choice("What is the weather?",
                                              "sunny", "rainy", "snowy")),
    ("A dog barks at the mailman.", choice("Which animal is mentioned?",
                                           "dog", "cat", "horse", "elephant")),
    ("The invoice shows a wrong amount.", choice("What is the topic?",
                                                 "invoice error", "password reset", "delivery")),
    ("2 + 2 = 4", choice("What is 2 + 2?", "3", "4", "5")),
    ("This movie was terrible and boring.", choice("What is the sentiment?",
                                                   "positive", "negative")),
]


def starting_label(question: d.Question, answer: str) -> str | None:
    """The label the answer starts with (the longest, if several do)."""
    starts = [o.label for o in question.options if answer.startswith(o.label)]
    return max(starts, key=len) if starts else None


async def test_most_likely_label_is_the_greedy_answers(engine):
    """On every question the model answers with a label first (SmolLM2 sometimes opens
    with 'The answer is "cat"' instead: nothing to compare there, but most questions
    must be comparable), the label scored most likely is that label."""
    compared = []
    for context, question in QUESTIONS:
        decision = d.Decision("m", context, (question,))
        request = d.score_request(decision)
        scores = await engine.score(request)
        (answer,) = d.answers(decision, scores.prompts)
        assert math.isclose(sum(answer.probabilities), 1.0, abs_tol=1e-6)
        greedy = await run(engine, replace(request.generation, max_tokens=8))
        label = starting_label(question, greedy.text)
        if label is not None:
            compared.append((question.instructions, question.options[answer.best].label, label))
    assert len(compared) >= 15, compared
    assert [c[1] for c in compared] == [c[2] for c in compared], compared


async def test_a_continuation_is_the_sum_of_its_tokens(engine):
    """The greedy answer's first tokens, forced: their score is the greedy path's
    log-probabilities summed, beside other continuations forced in the same step."""
    prompt = ChatInput((Message("user", "What is the capital of France?"),))
    generation = GenerationRequest("m", (prompt,), sampling=SamplingParams(temperature=0.0),
                                   max_tokens=4, logprobs=0)
    greedy = await run(engine, generation)
    text = greedy.text
    expected = sum(lp.logprob for lp in greedy.logprobs)
    scores = await engine.score(ScoreRequest(generation, ((text, "London", text + " x"),)))
    (result,) = scores.prompts
    assert math.isclose(result.logprobs[0], expected, abs_tol=1e-3)
    assert result.logprobs[2] < result.logprobs[0]


@pytest.fixture(scope="module")
def invariant():
    """SmolLM2 with batch-invariant kernels and 4 slots: a row's logits are the same
    alone or batched, over a prefix evaluated cold or kept or copied, so scores can be
    compared exactly."""
    if not available():
        pytest.skip("this llama.cpp build has no batch-invariant kernels")
    engine = LlamaCppEngine.load(model_path(), ContextSettings(
        n_ctx=2048, n_threads=2, parallel=4, batch_invariant=True))
    yield engine
    asyncio.run(engine.aclose())


async def test_more_long_labels_than_slots_go_in_rounds(invariant):
    """Ten labels of several tokens with four slots: three rounds of forcing, the same
    scores as each label scored alone (the prompt's cells removed after each round,
    the slots' bookkeeping exact)."""
    engine = invariant
    labels = tuple(f"the {word} department" for word in (
        "billing", "shipping", "legal", "sales", "security", "support", "returns",
        "hiring", "press", "research"))
    question = d.Question(d.Kind.CHOICE, "Who handles a refund?",
                          tuple(d.Option(label) for label in labels))
    request = d.score_request(d.Decision("m", "A customer wants a refund.", (question,)))
    together = (await engine.score(request)).prompts[0].logprobs
    for i, label in enumerate(labels[:3]):
        alone = await engine.score(replace(request, continuations=((label,),)))
        assert alone.prompts[0].logprobs[0] == pytest.approx(together[i], abs=1e-9)
    assert not kv_cache_mismatches(engine)


async def test_a_decision_beside_a_running_stream(engine):
    """Scored while another request decodes in the same steps: the stream is untouched
    and the decision's probabilities are whole."""
    alone = await run(engine, replace(chat_request(LONG_CHAT_PROMPT), max_tokens=24))
    generation = await engine.start(replace(chat_request(LONG_CHAT_PROMPT), max_tokens=24))
    decision = d.Decision("m", "The cat sleeps.", (choice("Which animal?", "the cat",
                                                          "the dog", "a horse"),))
    scores = await engine.score(d.score_request(decision))
    events = [event async for event in generation]
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == alone.text
    (answer,) = d.answers(decision, scores.prompts)
    assert math.isclose(sum(answer.probabilities), 1.0, abs_tol=1e-6)

"""Scoring labels through the upstream engine (engines/upstream/scoring.py): a Parlance
replica on the fake engine answers one token with its top log-probabilities, and the
gateway's decisions read the labels there; what the upstream cannot give is a 501 in
each route's own envelope."""

from __future__ import annotations

import math

import httpx
import pytest

from parlance.core.errors import NotImplementedHere
from parlance.core.events import Finish, FinishReason, TextDelta, TokenLogprob, TopLogprob, Usage
from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams
from parlance.core.scoring import ScoreRequest
from parlance.engines.fake import FakeEngine
from tests.support.fake_app import make_app
from tests.support.upstream_replicas import AppServer, fleet, gateway

MODEL = "fake-model"


def answer(*alternatives: tuple[str, float], prompt_tokens: int = 30) -> list:
    """A replica's script: one token, with these alternatives (the first is it)."""
    top = tuple(TopLogprob(t, lp, tuple(t.encode())) for t, lp in alternatives)
    token, logprob = alternatives[0]
    return [TextDelta(token, logprobs=(TokenLogprob(token, logprob, tuple(token.encode()),
                                                    top),)),
            Finish(FinishReason.LENGTH),
            Usage(prompt_tokens=prompt_tokens, completion_tokens=1, cached_tokens=12)]


@pytest.fixture
async def replica():
    engine = FakeEngine()
    with AppServer(make_app(engine)) as server:
        upstream_fleet = fleet(server.base_url)
        await upstream_fleet.check()
        yield engine, upstream_fleet
        await upstream_fleet.aclose()


def score_request(*label_sets: tuple[str, ...]) -> ScoreRequest:
    generation = GenerationRequest(MODEL, tuple(
        ChatInput((Message("user", f"Question {i}?"),)) for i in range(len(label_sets))),
        sampling=SamplingParams(temperature=0.0))
    return ScoreRequest(generation, label_sets)


async def test_labels_are_read_from_the_first_tokens_alternatives(replica):
    engine, upstream_fleet = replica
    engine.scripts.append(answer(("Yes", -0.2), ("No", -1.9), ("Maybe", -3.0)))
    engine.scripts.append(answer(("2", -0.5), ("1", -1.5), ("0", -4.0), ("2", -6.0)))
    scores = await upstream_fleet.engine(MODEL).score(
        score_request(("Yes", "No"), ("0", "1", "2")))
    first, second = scores.prompts
    assert first.logprobs == (-0.2, -1.9)
    assert second.logprobs[:2] == (-4.0, -1.5)  # same-text alternatives are summed:
    assert second.logprobs[2] == pytest.approx(math.log(math.exp(-0.5) + math.exp(-6.0)))
    assert (first.prompt_tokens, first.cached_tokens) == (30, 12)
    # what the replica was asked: one greedy token with OpenAI's most alternatives
    asked = engine.requests[-1]
    assert (asked.max_tokens, asked.logprobs, asked.n) == (1, 20, 1)
    assert asked.sampling.temperature == 0.0


async def test_a_label_missing_from_the_alternatives_is_refused(replica):
    engine, upstream_fleet = replica
    engine.scripts.append(answer(("bill", -0.2), ("tech", -1.0)))
    with pytest.raises(NotImplementedHere, match="'billing' is not among the 2") as refused:
        await upstream_fleet.engine(MODEL).score(score_request(("billing", "tech")))
    assert refused.value.status == 501 and refused.value.param == "questions"


async def test_no_logprobs_is_refused(replica):
    engine, upstream_fleet = replica
    engine.scripts.append([TextDelta("Yes"), Finish(FinishReason.LENGTH),
                           Usage(prompt_tokens=3, completion_tokens=1)])
    with pytest.raises(NotImplementedHere, match="returned no log-probabilities"):
        await upstream_fleet.engine(MODEL).score(score_request(("Yes", "No")))


DECISION = {"model": MODEL, "input": "I was charged twice for my renewal.",
            "questions": [{"type": "predicate", "name": "twice",
                           "instructions": "Was the customer charged twice?"},
                          {"type": "choice", "name": "team", "instructions": "Which team?",
                           "choices": [{"value": "billing"}, {"value": "shipping"}]}]}


async def test_decisions_through_a_gateway(replica):
    engine, upstream_fleet = replica
    app, served = gateway(upstream_fleet)
    await served.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://gateway") as client:
            engine.scripts.append(answer(("Yes", -0.1), ("No", -2.5)))
            engine.scripts.append(answer(("billing", -0.3), ("shipping", -1.4)))
            response = await client.post("/v1/decisions", json=DECISION)
            assert response.status_code == 200, response.text
            twice, team = response.json()["answers"]
            assert twice["probability"] == pytest.approx(1 / (1 + math.exp(-2.4)))
            assert team["choice"] == "billing"
            assert math.fsum(p["probability"] for p in team["probabilities"]) == \
                pytest.approx(1.0, abs=1e-12)
            # a label the upstream cannot give: 501 in OpenAI's envelope
            engine.scripts.append(answer(("Yes", -0.1), ("No", -2.5)))
            engine.scripts.append(answer(("bill", -0.3), ("shipping", -1.4)))
            refused = await client.post("/v1/decisions", json=DECISION)
            assert refused.status_code == 501
            error = refused.json()["error"]
            assert "'billing'" in error["message"] and error["param"] == "questions"
            # and in System One's (llama-server's) envelope
            engine.scripts.append([TextDelta("Yes"), Finish(FinishReason.LENGTH),
                                   Usage(prompt_tokens=3, completion_tokens=1)])
            one = await client.post("/v1/systemone", json={
                "model": MODEL, "state": "x",
                "questions": {"q": {"type": "noul", "instructions": "Is it?"}}})
            assert one.status_code == 501
            assert set(one.json()) == {"error"}
            assert one.json()["error"]["code"] == 501
    finally:
        await served.aclose()

"""The official openai SDK's `client.decisions.create` against /v1/decisions (fake engine),
with strict response validation: the answer parses as the SDK's `Decision`."""

from __future__ import annotations

import math

import pytest

from parlance.engines.fake import FakeEngine
from tests.support.openai_sdk import sdk

pytestmark = pytest.mark.clients


async def test_the_sdk_reads_every_answer_type():
    engine = FakeEngine()
    engine.score_scripts.extend([(-0.1, -2.5), (-1.0, -0.2, -3.0), (-2.0, -0.5, -1.0),
                                 (-0.3, -1.5)])
    client = sdk(engine)
    decision = await client.decisions.create(
        model="fake-model",
        input=[{"role": "user", "content": "I was charged twice for one renewal."}],
        questions=[
            {"type": "predicate", "name": "twice", "instructions": "Charged twice?"},
            {"type": "choice", "name": "team", "instructions": "Which team?",
             "choices": [{"value": "billing"}, {"value": "shipping"},
                         {"value": "technical", "description": "Errors and outages"}]},
            {"type": "score", "instructions": "How urgent?",
             "levels": [{"label": "low"}, {"label": "mid"}, {"label": "high"}]},
            {"type": "choice", "name": "refund", "instructions": "Refund?",
             "choices": [{"value": True}, {"value": False}]},
        ])
    predicate, team, urgency, refund = decision.answers
    assert decision.model == "fake-model"
    assert predicate.type == "predicate" and predicate.probability > 0.5
    assert team.type == "choice" and team.choice == "shipping"
    assert math.isclose(sum(p.probability for p in team.probabilities), 1.0)
    assert urgency.type == "score" and urgency.name is None
    assert [p.label for p in urgency.probabilities] == ["low", "mid", "high"]
    assert refund.type == "choice" and refund.choice is True
    assert decision.usage.output_tokens == 0

"""Decisions through the upstream engine in front of a real replica (SmolLM2 behind a
Parlance app on loopback): labels of one token read from the first answer token's top
log-probabilities give the probabilities the local engine's teacher forcing gives (from
the same cache state), and
a label of several tokens is a 501."""

from __future__ import annotations

import contextlib
import math

import pytest

from parlance.core import decisions as d
from parlance.models.registry import builtin_registry
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.real_engine import MODEL_ID, PATIENCE, asgi_client
from tests.support.upstream_replicas import AppServer, fleet, gateway

pytestmark = pytest.mark.model

CONTEXT = "I was charged twice for my subscription renewal and nobody answers my emails."
DECISION = {"model": "smollm2-135m-instruct", "input": CONTEXT,
            "questions": [{"type": "predicate", "instructions": "Is the customer angry?"},
                          {"type": "score", "instructions": "How urgent is this?",
                           "levels": [{"label": "low"}, {"label": "mid"},
                                      {"label": "high"}]}]}


@contextlib.asynccontextmanager
async def gateway_client(engine):
    """A gateway in front of a replica that serves the engine (its fleet closed after)."""
    replica = ServedModels([ServedModel(builtin_registry()[MODEL_ID], engine, 1700000000)])
    with AppServer(create_app(replica, ServerSettings(request_timeout=3600.0))) as server:
        upstream_fleet = fleet(server.base_url)
        app, served = gateway(upstream_fleet)
        await served.start()
        try:
            async with asgi_client(app) as client:
                yield client
        finally:
            await served.aclose()


async def test_one_token_labels_score_as_the_local_engine_does(llama):
    for label in ("Yes", "No", "0", "1", "2"):  # one token each: what this test relies on
        assert len(llama.model.tokenize(label, add_special=False, parse_special=False)) == 1
    decision = d.Decision(MODEL_ID, CONTEXT, (
        d.predicate("Is the customer angry?"),
        d.scale("How urgent is this?", ["low", "mid", "high"])))
    local = d.answers(decision, (await llama.score(d.score_request(decision))).prompts)
    # cold again: where cached cells lie changes the float sums, so both start alike
    assert llama.scheduler.clear_cache().wait(PATIENCE)
    async with gateway_client(llama) as client:
        response = await client.post("/v1/decisions", json=DECISION)
        assert response.status_code == 200, response.text
        predicate, urgency = response.json()["answers"]
        assert predicate["probability"] == pytest.approx(local[0].probabilities[0], abs=1e-6)
        levels = [p["probability"] for p in urgency["probabilities"]]
        assert levels == pytest.approx(list(local[1].probabilities), abs=1e-6)
        assert math.fsum(levels) == pytest.approx(1.0, abs=1e-6)
        several = {**DECISION, "questions": [{
            "type": "choice", "instructions": "Which team?",
            "choices": [{"value": "billing department"}, {"value": "technical support"}]}]}
        refused = await client.post("/v1/decisions", json=several)
        assert refused.status_code == 501, refused.text
        assert "billing department" in refused.json()["error"]["message"]

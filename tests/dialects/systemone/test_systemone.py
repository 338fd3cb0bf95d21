"""System One over HTTP on the fake engine: llama-server's exact key sets, answers under
the question ids in order, its error envelope (422 for semantic faults)."""

from __future__ import annotations

import math

import pytest

REQUEST = {
    "model": "jev-latest",  # not served here: the default model answers (as llama-server)
    "state": "Customer message: I was charged twice for my order last week.",
    "questions": {
        "route": {"type": "choice", "instructions": "Which team should handle this?",
                  "criteria": {"billing": None, "shipping": "parcels", "technical": None}},
        "angry": {"type": "noul", "instructions": "Is the customer angry?"},
        "urgency": {"type": "score", "instructions": "How urgent is this?",
                    "criteria": ["can wait", "this week", "today", "right now"]},
    },
}


async def test_answers_in_llama_servers_shape(client, fake_engine):
    fake_engine.score_scripts.extend([(-0.1, -3.0, -4.0), (-2.0, -0.2),
                                      (-3.0, -2.0, -0.5, -1.0)])
    response = await client.post("/v1/systemone", json=REQUEST)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"model", "answers", "usage"}
    # no decision model's head is read: every answer says it is uncalibrated
    assert response.headers["x-parlance-calibration"] == "uncalibrated"
    assert set(body["usage"]) == {"input_tokens", "output_tokens"}
    assert body["usage"]["output_tokens"] == 0
    assert list(body["answers"]) == ["route", "angry", "urgency"]
    route, angry, urgency = body["answers"].values()
    assert set(route) == {"type", "choice", "probabilities", "confidence"}
    assert route["choice"] == "billing"
    assert math.isclose(sum(route["probabilities"].values()), 1.0, abs_tol=1e-9)
    assert set(angry) == {"type", "noul"} and angry["noul"] < 0.5
    assert set(urgency) == {"type", "score", "legend", "probabilities", "confidence"}
    assert urgency["legend"] == {"0": "can wait", "1": "this week", "2": "today",
                                 "3": "right now"}
    assert list(urgency["probabilities"]) == ["0", "1", "2", "3"]
    expected = sum(int(k) * p for k, p in urgency["probabilities"].items())
    assert math.isclose(urgency["score"], expected)
    # The model read each question after the shared state, and scored the labels.
    request = fake_engine.score_requests[-1]
    assert request.continuations == (("billing", "shipping", "technical"), ("Yes", "No"),
                                     ("0", "1", "2", "3"))
    first = request.generation.prompts[0].messages[-1].content
    assert first.startswith("Context:\n" + REQUEST["state"])
    assert "shipping: parcels" in first


@pytest.mark.parametrize(("change", "message"), [
    ({"state": None}, '"state" must be provided'),
    ({"questions": {}}, '"questions" must be a non-empty object'),
    ({"questions": {"q": {"type": "maybe", "instructions": "x"}}},
     '"type" must be one of: choice, score, noul'),
    ({"questions": {"q": {"type": "noul", "instructions": ""}}}, "non-empty"),
    ({"questions": {"q": {"type": "score", "instructions": "x", "criteria": ["one"]}}},
     '"criteria" must be an array of 2 to 10 levels'),
    ({"questions": {"q": {"type": "choice", "instructions": "x", "criteria": {}}}},
     "at least one option"),
    ({"model": 5}, '"model" must be a string'),
])
async def test_semantic_faults_are_422_in_its_envelope(client, change, message):
    response = await client.post("/v1/systemone", json={**REQUEST, **change})
    assert response.status_code == 422
    error = response.json()["error"]
    assert set(error) == {"code", "message", "type"}
    assert error["code"] == 422 and error["type"] == "unprocessable_entity_error"
    assert message in error["message"]


async def test_a_body_that_is_no_json_is_400(client):
    response = await client.post("/v1/systemone", content=b"{nope",
                                 headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_images_are_not_supported(client):
    images = ["data:image/png;base64,AA"]
    response = await client.post("/systemone", json={**REQUEST, "images": images})
    assert response.status_code == 422
    assert "images" in response.json()["error"]["message"]

"""OpenAI's Decisions (`POST /v1/decisions`) on the fake engine: the SDK types' shapes,
answers in question order with their names, typed choice values."""

from __future__ import annotations

import math

REQUEST = {
    "model": "fake-model",
    "input": "I was charged twice for the same subscription renewal.",
    "questions": [
        {"type": "predicate", "name": "duplicate_charge",
         "instructions": "The customer reports being charged more than once."},
        {"type": "choice", "name": "category", "instructions": "Classify the ticket.",
         "choices": [{"value": "billing"},
                     {"value": "technical", "description": "Software errors"}]},
        {"type": "score", "instructions": "How urgent is it?",
         "levels": [{"label": "low"}, {"label": "mid"}, {"label": "high"}]},
        {"type": "choice", "name": "flag", "instructions": "Is it a refund?",
         "choices": [{"value": True}, {"value": False}]},
    ],
}


async def test_answers_in_the_sdk_shape(client, fake_engine):
    fake_engine.score_scripts.extend([(-0.1, -3.0), (-0.2, -2.0), (-3.0, -1.0, -0.3),
                                      (-2.0, -0.1)])
    response = await client.post("/v1/decisions", json=REQUEST)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == "fake-model"
    # no decision model's head is read: every answer says it is uncalibrated
    assert response.headers["x-parlance-calibration"] == "uncalibrated"
    predicate, category, urgency, flag = body["answers"]
    assert predicate["type"] == "predicate" and predicate["name"] == "duplicate_charge"
    assert predicate["probability"] > 0.9
    assert category["choice"] == "billing"
    assert [p["value"] for p in category["probabilities"]] == ["billing", "technical"]
    assert math.isclose(sum(p["probability"] for p in category["probabilities"]), 1.0)
    assert urgency["name"] is None
    assert [(p["label"], p["value"]) for p in urgency["probabilities"]] == [
        ("low", 0), ("mid", 1), ("high", 2)]
    assert 1.0 < urgency["score"] < 2.0 and 0 <= urgency["confidence"] <= 1
    assert flag["choice"] is False  # typed as the client sent it
    usage = body["usage"]
    assert usage["output_tokens"] == 0
    assert usage["total_tokens"] == usage["input_tokens"] > 0
    assert set(usage["input_tokens_details"]) == {"cached_tokens", "cache_write_tokens"}


async def test_system_ones_body_is_refused_with_directions(client):
    body = {"model": "fake-model", "input": "x",
            "questions": {"q": {"type": "noul", "instructions": "x"}}}
    response = await client.post("/v1/decisions", json=body)
    assert response.status_code == 400
    assert "/v1/systemone" in response.json()["error"]["message"]


async def test_duplicate_choices_are_refused(client):
    body = {**REQUEST, "questions": [{"type": "choice", "instructions": "x",
                                      "choices": [{"value": "true"}, {"value": True}]}]}
    response = await client.post("/v1/decisions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "questions[0].choices"


async def test_images_are_not_supported(client):
    body = {**REQUEST, "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,AA"}]}]}
    response = await client.post("/v1/decisions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "input[0].content"


async def test_any_input_item_is_read_as_text(client, fake_engine):
    body = {**REQUEST, "questions": REQUEST["questions"][:1], "input": [
        {"role": "system", "content": "Support desk."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Charged twice.",
             "prompt_cache_breakpoint": {"mode": "explicit"}},
            {"type": "input_json", "data": {"order": 7}}]},
        {"type": "function_call", "name": "lookup", "arguments": "{}", "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "paid twice"}]}
    response = await client.post("/v1/decisions", json=body)
    assert response.status_code == 200, response.text
    user = fake_engine.score_requests[-1].generation.prompts[0].messages[-1].content
    assert ("System: Support desk.\n\nUser: Charged twice.\n{\"order\": 7}\n\n"
            "Tool call lookup: {}\n\nTool output: paid twice") in user

"""Rerank over HTTP (fake engine, scored as an instruct model's "yes"): the Jina/Cohere
shape at every path, best first, top_n, return_documents, documents as objects."""

from __future__ import annotations

import math

import pytest

DOCUMENTS = ["hi", "it is a bear",
             "The giant panda (Ailuropoda melanoleuca) is a bear species endemic to China."]


def yes(p: float) -> tuple[float, float]:
    """The log-probabilities of "yes" and "no" giving p("yes") = p among the two."""
    return (math.log(p), math.log(1 - p))


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank", "/reranking", "/v1/reranking",
                                  "/v2/rerank"])
async def test_results_best_first(client, fake_engine, path):
    fake_engine.score_scripts.extend([yes(0.1), yes(0.6), yes(0.9)])
    response = await client.post(path, json={"model": "fake-model", "query": "What is panda?",
                                              "documents": DOCUMENTS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert [r["index"] for r in body["results"]] == [2, 1, 0]
    assert [round(r["relevance_score"], 6) for r in body["results"]] == [0.9, 0.6, 0.1]
    assert all("document" not in r for r in body["results"])
    assert body["model"] == "fake-model" and body["object"] == "list"
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0
    assert body["parlance_method"] == "instruct_yes_no"


async def test_top_n_documents_as_objects_and_returned(client, fake_engine):
    fake_engine.score_scripts.extend([yes(0.2), yes(0.7), yes(0.5)])
    response = await client.post("/v1/rerank", json={
        "query": "bears", "top_n": 2, "return_documents": True,
        "documents": [{"text": d} for d in DOCUMENTS]})
    results = response.json()["results"]
    assert [(r["index"], r["document"]) for r in results] == [
        (1, {"text": DOCUMENTS[1]}), (2, {"text": DOCUMENTS[2]})]


async def test_the_query_comes_first_in_each_prompt(client, fake_engine):
    await client.post("/rerank", json={"query": "bears", "documents": DOCUMENTS[:2],
                                       "instruction": "Find animals"})
    request = fake_engine.score_requests[-1]
    assert request.continuations == (("yes", "no"),) * 2
    user = request.generation.prompts[1].messages[-1].content
    assert user == f"<Instruct>: Find animals\n<Query>: bears\n<Document>: {DOCUMENTS[1]}"


@pytest.mark.parametrize("body", [
    {"documents": ["a"]},
    {"query": "q", "documents": []},
    {"query": "q", "documents": [3]},
    {"query": "q", "documents": ["a", ""]},
    {"query": "q", "documents": ["a"], "top_n": -1},
])
async def test_bad_bodies_are_400_in_llama_servers_envelope(client, body):
    response = await client.post("/rerank", json=body)
    assert response.status_code == 400
    assert set(response.json()["error"]) == {"code", "message", "type"}

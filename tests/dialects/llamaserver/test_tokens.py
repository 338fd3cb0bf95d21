"""llama-server's /tokenize, /detokenize and /apply-template over HTTP (fake engine: words
are tokens)."""

from __future__ import annotations


async def test_tokenize_and_back(client):
    response = await client.post("/tokenize", json={"content": "hello big world"})
    assert response.status_code == 200, response.text
    tokens = response.json()["tokens"]
    assert len(tokens) == 3 and all(isinstance(t, int) for t in tokens)
    text = (await client.post("/detokenize", json={"tokens": tokens})).json()
    assert text == {"content": "hello big world "}


async def test_pieces_special_tokens_and_mixed_content(client):
    response = await client.post("/tokenize", json={
        "content": ["hello", 0, "world"], "add_special": True, "with_pieces": True})
    tokens = response.json()["tokens"]
    assert tokens[0] == {"id": 0, "piece": "<s>"}  # add_special: before the first text
    assert [t["piece"] for t in tokens[1:]] == ["hello ", "<s>", "world "]


async def test_no_content_is_no_tokens(client):
    assert (await client.post("/tokenize", json={})).json() == {"tokens": []}


async def test_an_unknown_token_is_400_in_llama_servers_envelope(client):
    response = await client.post("/detokenize", json={"tokens": [99999]})
    assert response.status_code == 400
    assert response.json() == {"error": {
        "code": 400, "message": "Token id 99999 is outside the vocabulary.",
        "type": "invalid_request_error"}}


async def test_a_wrong_type_is_400(client):
    response = await client.post("/tokenize", json={"content": {"text": "x"}})
    assert response.status_code == 400
    assert set(response.json()["error"]) == {"code", "message", "type"}


async def test_apply_template_renders_a_chat_body(client, fake_engine):
    response = await client.post("/apply-template", json={
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Hi!"}]})
    assert response.status_code == 200, response.text
    assert response.json() == {"prompt": "Be brief.\nHi!"}  # the fake's "template"
    assert not fake_engine.requests  # rendered, never generated

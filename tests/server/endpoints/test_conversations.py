"""`/parlance/conversations`: the web chat's conversations kept by the server, listed,
searched, read back whole, renamed, replaced, imported and deleted, under the API
key; a document that is not a tree of messages, or too large, is a 4xx naming why."""

from __future__ import annotations

import httpx
import pytest

from parlance.engines.fake import FakeEngine
from tests.support.fake_app import make_app

PATH = "/parlance/conversations"


def conversation(title: str = "Tides", **extra: object) -> dict:
    return {"title": title, "settings": {"model": "fake-model"},
            "messages": [{"id": "u1", "parent": None, "role": "user", "text": "Hi"},
                         {"id": "a1", "parent": "u1", "role": "assistant", "text": "Hello",
                          "status": "stopped", "stats": {"tokens": 3}},
                         {"id": "a2", "parent": "u1", "role": "assistant", "text": "Hey"}],
            **extra}


async def test_a_conversation_is_created_listed_read_renamed_and_deleted(client):
    created = (await client.post(PATH, json=conversation())).json()
    assert created["id"].startswith("conv_") and created["title"] == "Tides"
    listed = (await client.get(PATH)).json()
    assert [c["id"] for c in listed["data"]] == [created["id"]] and not listed["has_more"]
    read = (await client.get(f"{PATH}/{created['id']}")).json()
    assert read["messages"][1]["status"] == "stopped" and read["settings"]["model"] == "fake-model"
    renamed = await client.patch(f"{PATH}/{created['id']}", json={"title": "Waves"})
    assert renamed.json()["title"] == "Waves"
    assert (await client.delete(f"{PATH}/{created['id']}")).json()["deleted"] is True
    gone = await client.get(f"{PATH}/{created['id']}")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"


async def test_put_replaces_under_the_given_id_and_search_finds_message_text(client):
    put = await client.put(f"{PATH}/my-chat", json=conversation("Mine"))
    assert put.status_code == 200 and put.json()["id"] == "my-chat"
    await client.post(PATH, json=conversation("Other", messages=[]))
    found = (await client.get(PATH, params={"q": "hey"})).json()["data"]
    assert [c["id"] for c in found] == ["my-chat"]


async def test_an_export_imports_back(client):
    first = (await client.post(PATH, json=conversation())).json()
    exported = (await client.get(f"{PATH}/{first['id']}")).json()
    await client.delete(f"{PATH}/{first['id']}")
    imported = (await client.post(PATH, json={"conversations": [exported]})).json()
    assert [c["id"] for c in imported["data"]] == [first["id"]]
    again = (await client.get(f"{PATH}/{first['id']}")).json()
    assert again["messages"] == exported["messages"]
    assert again["created_at"] == exported["created_at"]


@pytest.mark.parametrize("body, param", [
    ([1, 2], None),
    ({"messages": [{"id": "a", "parent": "later", "role": "user"},
                   {"id": "later", "parent": None, "role": "user"}]}, "messages[0].parent"),
    ({"messages": [{"id": "a", "role": "user"}, {"id": "a", "role": "assistant"}]},
     "messages[1].id"),
    ({"messages": [{"id": "a", "role": "robot"}]}, "messages.0.role"),
    ({"title": "x" * 201}, "title"),
    ({"id": "../etc", "messages": []}, "id"),
])
async def test_a_document_that_is_not_a_tree_of_messages_is_refused(client, body, param):
    response = await client.post(PATH, json=body)
    assert response.status_code == 400, response.text
    if param is not None:
        assert response.json()["error"]["param"].replace("[", ".").replace("]", "") == \
            param.replace("[", ".").replace("]", "")


async def test_bad_ids_and_queries_are_400_and_unknown_ids_404(client):
    assert (await client.get(f"{PATH}/bad%20id")).status_code == 400
    assert (await client.get(PATH, params={"limit": "0"})).status_code == 400
    assert (await client.patch(f"{PATH}/nope", json={"title": "x"})).status_code == 404
    assert (await client.delete(f"{PATH}/nope")).status_code == 404


async def test_a_conversation_too_large_is_413():
    app = make_app(FakeEngine())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        big = conversation(messages=[{"id": "u", "role": "user", "text": "x" * (9 * 2**20)}])
        assert (await client.post(PATH, json=big)).status_code == 413


async def test_every_operation_needs_the_key():
    app = make_app(FakeEngine(), api_keys=("sekrit",))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        assert (await client.get(PATH)).status_code == 401
        assert (await client.post(PATH, json=conversation())).status_code == 401
        ok = await client.get(PATH, headers={"Authorization": "Bearer sekrit"})
        assert ok.status_code == 200

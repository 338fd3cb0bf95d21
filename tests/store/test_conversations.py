"""The conversation store: replace keeps the creation time, search finds text inside
the document (quotes and wildcards taken literally), and both bounds hold."""

from __future__ import annotations

from parlance.store.conversations import ConversationStore, encoded_size


def doc(text: str) -> dict:
    return {"messages": [{"id": "m1", "parent": None, "role": "user", "text": text}]}


def test_a_replaced_conversation_keeps_its_creation_time_and_comes_first(tmp_path):
    store = ConversationStore(tmp_path / "c.sqlite3")
    first = store.put("a", "First", doc("hello"), created_at=100.0)
    store.put("b", "Second", doc("world"))
    again = store.put("a", "First, renamed", doc("hello again"))
    assert again.created_at == first.created_at == 100.0
    assert [s.id for s in store.list()] == ["a", "b"]
    summary, document = store.get("a")
    assert summary.title == "First, renamed" and document == doc("hello again")
    store.close()
    reopened = ConversationStore(tmp_path / "c.sqlite3")
    assert [s.id for s in reopened.list()] == ["a", "b"]


def test_search_matches_title_and_text_literally():
    store = ConversationStore()
    store.put("quote", "Quotes", doc('she said "tides" at 100%'))
    store.put("plain", "Tides of March", doc("nothing"))
    store.put("other", "Other", doc("a_b"))
    assert {s.id for s in store.list("tides")} == {"quote", "plain"}
    assert [s.id for s in store.list('"tides"')] == ["quote"]
    assert [s.id for s in store.list("100%")] == ["quote"]
    assert [s.id for s in store.list("a_b")] == ["other"]
    assert store.list("%") == [s for s in store.list() if s.id == "quote"]


def test_only_the_newest_conversations_are_kept():
    store = ConversationStore(retention=3)
    for n in range(5):
        store.put(f"c{n}", f"#{n}", doc("x"))
    assert [s.id for s in store.list()] == ["c4", "c3", "c2"]


def test_rename_and_delete_say_whether_anything_was_there():
    store = ConversationStore()
    store.put("a", "A", doc("x"))
    assert store.rename("a", "B").title == "B"
    assert store.rename("nope", "B") is None
    assert store.delete("a") and not store.delete("a")
    assert store.get("a") is None


def test_the_encoded_size_is_the_stored_size():
    assert encoded_size(doc("é")) == len('{"messages":[{"id":"m1","parent":null,"role":"user",'
                                         '"text":"é"}]}'.encode())

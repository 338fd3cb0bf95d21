"""The web chat's conversations, kept by the server so that every browser pointed at it
sees the same list: one JSON document a conversation (its messages as a tree, so edits
and regenerations are branches; its settings; each answer's stats and status), with
its title and times beside it for listing and searching.

One SQLite file under the data directory (in memory when there is none), like the
response store. The store is bounded twice: a document is at most `max_document_bytes`
and only the `retention` most recently updated conversations are kept.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    document TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS conversations_updated ON conversations (updated_at);
"""
DEFAULT_RETENTION = 1_000
DEFAULT_MAX_DOCUMENT_BYTES = 8 * 2**20


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    id: str
    title: str
    created_at: float
    updated_at: float


class ConversationStore:
    def __init__(self, path: Path | None = None, *, retention: int = DEFAULT_RETENTION,
                 max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES) -> None:
        self.retention = retention
        self.max_document_bytes = max_document_bytes
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path) if path else ":memory:", check_same_thread=False,
                                   isolation_level=None)
        if path is not None:
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)

    def put(self, conversation_id: str, title: str, document: dict[str, Any],
            created_at: float | None = None) -> ConversationSummary:
        """Insert or replace a whole conversation; its creation time is kept on replace.
        The caller checks the document's size with `encoded` first."""
        now = time.time()
        text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
        with self._db:
            self._db.execute(
                "INSERT INTO conversations (id, title, created_at, updated_at, document) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET title = excluded.title, "
                "updated_at = excluded.updated_at, document = excluded.document",
                (conversation_id, title, created_at or now, now, text))
            self._db.execute(
                "DELETE FROM conversations WHERE id NOT IN (SELECT id FROM conversations "
                "ORDER BY updated_at DESC LIMIT ?)", (self.retention,))
        found = self.summary(conversation_id)
        assert found is not None  # just written, and the newest is never the one dropped
        return found

    def rename(self, conversation_id: str, title: str) -> ConversationSummary | None:
        with self._db:
            changed = self._db.execute(
                "UPDATE conversations SET title = ?, updated_at = ? WHERE id = ?",
                (title, time.time(), conversation_id)).rowcount
        return self.summary(conversation_id) if changed else None

    def get(self, conversation_id: str) -> tuple[ConversationSummary, dict[str, Any]] | None:
        row = self._db.execute(
            "SELECT id, title, created_at, updated_at, document FROM conversations "
            "WHERE id = ?", (conversation_id,)).fetchone()
        if row is None:
            return None
        return ConversationSummary(*row[:4]), json.loads(row[4])

    def summary(self, conversation_id: str) -> ConversationSummary | None:
        row = self._db.execute("SELECT id, title, created_at, updated_at FROM conversations "
                               "WHERE id = ?", (conversation_id,)).fetchone()
        return ConversationSummary(*row) if row else None

    def list(self, query: str = "", limit: int = 100, offset: int = 0
             ) -> list[ConversationSummary]:
        """The most recently updated first; `query` matches the title or any text of the
        conversation, case-insensitively (ASCII), as a plain substring."""
        sql = "SELECT id, title, created_at, updated_at FROM conversations"
        args: list[Any] = []
        if query:
            pattern = "%" + _escape_like(query) + "%"
            sql += " WHERE title LIKE ? ESCAPE '\\' OR document LIKE ? ESCAPE '\\'"
            args += [pattern, _escape_like_json(query, pattern)]
        sql += " ORDER BY updated_at DESC LIMIT ? OFFSET ?"
        args += [limit, offset]
        return [ConversationSummary(*row) for row in self._db.execute(sql, args)]

    def delete(self, conversation_id: str) -> bool:
        with self._db:
            return self._db.execute("DELETE FROM conversations WHERE id = ?",
                                    (conversation_id,)).rowcount > 0

    def close(self) -> None:
        self._db.close()


def encoded_size(document: dict[str, Any]) -> int:
    return len(json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode())


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _escape_like_json(query: str, plain: str) -> str:
    """The pattern as the text appears inside the stored JSON (quotes, backslashes and
    newlines are escaped there); the plain pattern when escaping changes nothing."""
    inner = json.dumps(query, ensure_ascii=False)[1:-1]
    return plain if inner == query else "%" + _escape_like(inner) + "%"

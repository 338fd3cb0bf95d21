"""Stored responses: the response object as last rendered, and every input item the
model saw (the chain of earlier turns plus this request's input), so a later
request can continue from it with `previous_response_id`, even after a restart.

One SQLite file under the data directory (in memory when there is none). Calls
are short and run on the event loop's thread; WAL keeps a crash from losing
committed rows. Only the newest `retention` responses are kept.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    response TEXT NOT NULL,
    context TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_created ON responses (created_at);
"""
DEFAULT_RETENTION = 10_000


@dataclass(frozen=True, slots=True)
class StoredResponse:
    id: str
    response: dict[str, Any]
    context: list[dict[str, Any]]  # input items, each with an id


class ResponseStore:
    def __init__(self, path: Path | None = None, *, retention: int = DEFAULT_RETENTION):
        self.path = path
        self.retention = retention
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path) if path else ":memory:", check_same_thread=False,
                                   isolation_level=None)
        if path is not None:
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)

    def put(self, record: StoredResponse) -> None:
        """Insert or replace (a streamed response is stored again when it ends)."""
        with self._db:
            self._db.execute(
                "INSERT INTO responses (id, created_at, response, context) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET response = excluded.response, "
                "context = excluded.context",
                (record.id, time.time(), json.dumps(record.response),
                 json.dumps(record.context)))
            self._db.execute(
                "DELETE FROM responses WHERE id NOT IN "
                "(SELECT id FROM responses ORDER BY created_at DESC LIMIT ?)", (self.retention,))

    def get(self, response_id: str) -> StoredResponse | None:
        row = self._db.execute("SELECT response, context FROM responses WHERE id = ?",
                               (response_id,)).fetchone()
        if row is None:
            return None
        return StoredResponse(response_id, json.loads(row[0]), json.loads(row[1]))

    def delete(self, response_id: str) -> bool:
        with self._db:
            return self._db.execute("DELETE FROM responses WHERE id = ?",
                                    (response_id,)).rowcount > 0

    def close(self) -> None:
        self._db.close()

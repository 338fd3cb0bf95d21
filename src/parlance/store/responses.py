"""Stored responses: the response object as last rendered, and every input item the
model saw (the chain of earlier turns plus this request's input), so a later
request can continue from it with `previous_response_id`, even after a restart.
`kind` says which API stored it ("response" for OpenAI Responses, "chat" for
LM Studio chats): each continues only its own. `pending` marks a response stored
while it still runs (a background response, at each change of status): one still
pending when the server starts again was cut short by the stop (`unfinished`).

One SQLite file under the data directory (in memory when there is none). Calls
are short and run on the event loop's thread; WAL keeps a crash from losing
committed rows. Only the newest `retention` responses are kept.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from parlance.core.errors import Unavailable
from parlance.core.stored import RESPONSE, StoredResponse

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    response TEXT NOT NULL,
    context TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'response',
    pending INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS responses_created ON responses (created_at);
"""
DEFAULT_RETENTION = 10_000


class ResponseStore:
    def __init__(self, path: Path | None = None, *, retention: int = DEFAULT_RETENTION):
        """Raises `Unavailable` (one line, naming the file and why) where the file cannot
        be opened for writing: a read-only data directory, a path through a file, no
        permission; the server cannot start without it."""
        self.path = path
        self.retention = retention
        db = None
        try:
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
            db = self._db = sqlite3.connect(str(path) if path else ":memory:",
                                            check_same_thread=False, isolation_level=None)
            if path is not None:
                db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)
            self._migrate()
            self._try_a_write()
        except (OSError, sqlite3.Error) as exc:
            if db is not None:
                db.close()
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise Unavailable(f"cannot open the response store {path}: {reason} (is the "
                              "data directory writable? parlance serve --data-dir)",
                              code="store_unavailable") from None

    def _try_a_write(self) -> None:
        """A row written and taken back: a store this server may only read would fail
        every response it stores later, each a 500."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("INSERT OR REPLACE INTO responses (id, created_at, response, context) "
                       "VALUES ('', 0, '', '')")
        finally:
            db.execute("ROLLBACK")

    def _migrate(self) -> None:
        """Columns a store written by an earlier version lacks."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(responses)")}
        if "kind" not in columns:  # a store written before chats were stored
            self._db.execute("ALTER TABLE responses ADD COLUMN kind TEXT NOT NULL "
                             f"DEFAULT '{RESPONSE}'")
        if "pending" not in columns:  # written before background responses
            self._db.execute("ALTER TABLE responses ADD COLUMN pending INTEGER NOT NULL "
                             "DEFAULT 0")

    def put(self, record: StoredResponse) -> None:
        """Insert or replace (a streamed response is stored again when it ends)."""
        with self._db:
            self._db.execute(
                "INSERT INTO responses (id, created_at, response, context, kind, pending) "
                "VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET response = excluded.response, "
                "context = excluded.context, pending = excluded.pending",
                (record.id, time.time(), json.dumps(record.response),
                 json.dumps(record.context), record.kind, int(record.pending)))
            self._db.execute(
                "DELETE FROM responses WHERE id NOT IN "
                "(SELECT id FROM responses ORDER BY created_at DESC LIMIT ?)", (self.retention,))

    def update(self, record: StoredResponse) -> bool:
        """Replace a response stored while it ran; False (nothing stored) when it is no
        longer there: deleted meanwhile, so it stays deleted."""
        with self._db:
            cursor = self._db.execute(
                "UPDATE responses SET response = ?, context = ?, pending = ? "
                "WHERE id = ? AND kind = ?",
                (json.dumps(record.response), json.dumps(record.context),
                 int(record.pending), record.id, record.kind))
        return cursor.rowcount > 0

    def get(self, response_id: str, kind: str = RESPONSE) -> StoredResponse | None:
        row = self._db.execute("SELECT response, context, pending FROM responses "
                               "WHERE id = ? AND kind = ?", (response_id, kind)).fetchone()
        if row is None:
            return None
        return StoredResponse(response_id, json.loads(row[0]), json.loads(row[1]), kind,
                              bool(row[2]))

    def unfinished(self, kind: str = RESPONSE) -> list[StoredResponse]:
        """The responses stored while they ran and never stored finished."""
        rows = self._db.execute("SELECT id FROM responses WHERE pending = 1 AND kind = ?",
                                (kind,)).fetchall()
        return [found for (response_id,) in rows
                if (found := self.get(response_id, kind)) is not None]

    def delete(self, response_id: str, kind: str = RESPONSE) -> bool:
        with self._db:
            return self._db.execute("DELETE FROM responses WHERE id = ? AND kind = ?",
                                    (response_id, kind)).rowcount > 0

    def close(self) -> None:
        self._db.close()

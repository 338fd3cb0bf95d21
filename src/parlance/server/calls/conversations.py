"""The conversations of stateful dialects, loaded and saved: the I/O half of
`dialects.base.Stateful` (a call continues a stored response; its own is stored)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from parlance.core.errors import InvalidRequest
from parlance.core.stored import StoredResponse
from parlance.dialects.base import Call, Stateful
from parlance.store.responses import ResponseStore


class Conversations:
    def __init__(self, dialect: Stateful[Any], store: ResponseStore) -> None:
        self.dialect = dialect
        self.store = store

    def recall(self, call: Call) -> Call:
        """The call with the stored conversation it continues (400 if there is none,
        or if it is still running)."""
        previous_id = self.dialect.previous_id(call)
        if previous_id is None:
            return call
        previous = self.find(previous_id)
        if previous is None:
            raise InvalidRequest(f"Previous response with id '{previous_id}' not found.",
                                 param="previous_response_id",
                                 code="previous_response_not_found")
        if previous.pending:
            raise InvalidRequest(f"Previous response with id '{previous_id}' is still "
                                 "running: continue from it once it has finished.",
                                 param="previous_response_id",
                                 code="previous_response_in_progress")
        return self.dialect.continued(call, previous)

    def find(self, response_id: str) -> StoredResponse | None:
        return self.store.get(response_id, self.dialect.stored_kind)

    def keep(self, call: Call, response: dict[str, Any], *, pending: bool = False) -> None:
        """Store what the dialect keeps of `response`; `pending`: it is still running."""
        record = self.dialect.record(call, response)
        if record is not None:
            self.store.put(replace(record, pending=pending))

    def begin(self, call: Call, response: dict[str, Any]) -> None:
        """A streamed response as it starts (its id is the client's from the first
        event), stored pending: it can be retrieved, and deleted, while it runs."""
        self.keep(call, response, pending=True)

    def end(self, call: Call, response: dict[str, Any]) -> None:
        """The response `begin` stored, as it ended; one deleted meanwhile stays deleted."""
        record = self.dialect.record(call, response)
        if record is not None:
            self.store.update(replace(record, pending=False))

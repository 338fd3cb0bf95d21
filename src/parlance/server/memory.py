"""Loading and saving for stateful dialects: the I/O half of `dialects.base.Stateful`."""

from __future__ import annotations

from typing import Any

from parlance.core.errors import InvalidRequest
from parlance.dialects.base import Call, Stateful
from parlance.store.responses import ResponseStore


class Memory:
    def __init__(self, dialect: Stateful[Any], store: ResponseStore) -> None:
        self.dialect = dialect
        self.store = store

    def recall(self, call: Call) -> Call:
        """The call with the stored conversation it continues (400 if there is none)."""
        previous_id = self.dialect.previous_id(call)
        if previous_id is None:
            return call
        previous = self.store.get(previous_id, self.dialect.stored_kind)
        if previous is None:
            raise InvalidRequest(f"Previous response with id '{previous_id}' not found.",
                                 param="previous_response_id",
                                 code="previous_response_not_found")
        return self.dialect.continued(call, previous)

    def keep(self, call: Call, response: dict[str, Any]) -> None:
        record = self.dialect.record(call, response)
        if record is not None:
            self.store.put(record)

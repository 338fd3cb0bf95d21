"""Error statuses as data: each `ParlanceError` class carries the status most APIs
answer it with, and a dialect names only the classes its API answers otherwise."""

from __future__ import annotations

from collections.abc import Mapping

from parlance.core.errors import ParlanceError

StatusOverrides = Mapping[type[ParlanceError], int]


def status_of(error: ParlanceError, overrides: StatusOverrides) -> int:
    """The status for `error`: the most specific class on its way up to
    `ParlanceError` that either the dialect overrides or that declares a status of its
    own. So an override covers the subclasses that keep their parent's status, and a
    subclass with a status of its own (`ToolServerFailed`) is a kind of its own."""
    for cls in type(error).__mro__:
        if cls in overrides:
            return overrides[cls]
        declared = vars(cls).get("status")
        if isinstance(declared, int):
            return declared
    return error.status

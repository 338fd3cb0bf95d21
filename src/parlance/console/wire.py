"""Reading what a server sent, which may be anything: an event that is not JSON, a
list where an object belongs, a number where text belongs. Each read here checks the
shape it needs, and a wrong one is a `ServerError` naming what was wrong (the
command says it on one `error:` line and carries on), never a traceback."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from parlance.console.errors import ServerError

T = TypeVar("T")

PREVIEW = 60  # characters of a malformed event quoted in its error

_KINDS = {str: "text", int: "a number", float: "a number", bool: "true or false",
          dict: "an object", list: "a list"}


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    return next((name for kind, name in _KINDS.items() if isinstance(value, kind)),
                type(value).__name__)


class Malformed(ServerError):
    """The server sent something of the wrong shape."""


def decoded(text: str, what: str) -> dict[str, Any]:
    """`text` as the JSON object `what` (an event, a line, an answer) must be."""
    try:
        value = json.loads(text)
    except ValueError:
        raise Malformed(f"the server sent {what} that is not JSON: "
                        f"{preview(text)}") from None
    return an_object(value, what)


def an_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Malformed(f"the server sent {what} that is not a JSON object: "
                        f"{preview(json.dumps(value))}")
    return value


def preview(text: str) -> str:
    return text if len(text) <= PREVIEW else f"{text[:PREVIEW]}… ({len(text)} characters)"


def field(obj: dict[str, Any], key: str, kind: type[T], where: str) -> T | None:
    """`obj[key]` when it is of `kind` (an int for a float is taken); None when absent
    or null; anything else is `Malformed`."""
    value = obj.get(key)
    if value is None:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)  # type: ignore[return-value]
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise Malformed(f"the server sent a malformed {where}: its {key!r} is "
                    f"{kind_of(value)}, not {_KINDS.get(kind, kind.__name__)}")


def text(obj: dict[str, Any], key: str, where: str) -> str:
    """A text field; absent: ''."""
    return field(obj, key, str, where) or ""


def an_object_field(obj: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """An object field; absent: {}."""
    return field(obj, key, dict, where) or {}


def objects(obj: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    """A list of objects; absent: []."""
    items = field(obj, key, list, where) or []
    for item in items:
        if not isinstance(item, dict):
            raise Malformed(f"the server sent a malformed {where}: an item of its "
                            f"{key!r} is {kind_of(item)}, not an object")
    return items

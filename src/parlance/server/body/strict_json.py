"""Decoding a request body as strict JSON: UTF-8, standard numbers only, bounded.

Python's `json` accepts what no client means to send and what later breaks code far
from the wire: `NaN`/`Infinity` literals, `1e999` (infinite), integers too long for
`int()` (a ValueError past 4300 digits), nesting deep enough to exhaust the stack of
whatever walks it next (templates, schema compilers), and `\\ud800` escapes that
decode to lone surrogates no encoder can write back. Each is refused here with an
`InvalidRequest` naming where in the body it sits, so nothing downstream sees them.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from parlance.core.errors import InvalidRequest

MAX_DEPTH = 64  # nested arrays/objects; real requests (schemas included) use far fewer
MAX_NUMBER_CHARS = 100  # a seed or token id needs 20; a float's shortest form needs 24
# Objects (messages, items, content parts...): the work of validating, converting and
# templating a body grows with them, far faster than with its bytes (the effect on
# /health is what bench/health_under_load.py measures). A 128k-token context holds
# about 20k of the shortest chat turns; with parts and tool calls, this.
MAX_OBJECTS = 50_000

Path = tuple[str | int, ...]

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _Refused:
    """Stands in for a refused number while decoding, so that the walk after it can
    name the place (the decoder's hooks are not told where they are)."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem


class _Hooks:
    """The decoder's hooks for one body: they refuse numbers in place (noting that
    they did) and count objects, refusing the body past MAX_OBJECTS before decoding
    the rest. (Being Python, the object hook also lets other threads run while a
    body decodes.)"""

    __slots__ = ("objects", "refused")

    def __init__(self) -> None:
        self.objects = 0
        self.refused = False

    def integer(self, text: str) -> int | _Refused:
        if len(text) > MAX_NUMBER_CHARS:
            return self._refuse(f"a number of {len(text)} digits (at most {MAX_NUMBER_CHARS})")
        return int(text)

    def real(self, text: str) -> float | _Refused:
        if len(text) > MAX_NUMBER_CHARS:
            return self._refuse(
                f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
        value = float(text)
        return value if math.isfinite(value) else self._refuse(f"{text} is not a finite number")

    def constant(self, name: str) -> _Refused:
        return self._refuse(f"{name} is not a JSON number")

    def make_object(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        self.objects += 1
        if self.objects > MAX_OBJECTS:
            raise _TooManyObjects
        return dict(pairs)

    def _refuse(self, problem: str) -> _Refused:
        self.refused = True
        return _Refused(problem)


class _TooManyObjects(Exception):
    pass


def decode(raw: bytes) -> Any:
    """The body's JSON value, or `InvalidRequest` saying what is wrong and where."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid UTF-8 (byte {exc.start}).",
                             code="invalid_json") from exc
    try:
        hooks = _Hooks()
        value = json.loads(text, parse_int=hooks.integer, parse_float=hooks.real,
                           parse_constant=hooks.constant, object_pairs_hook=hooks.make_object)
    except _TooManyObjects as exc:
        raise InvalidRequest(f"The JSON body holds more than {MAX_OBJECTS} objects.",
                             code="too_many_objects") from exc
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"We could not parse the JSON body of your request ({exc}).",
                             code="invalid_json") from exc
    except RecursionError as exc:
        raise InvalidRequest(f"The JSON body is nested more than {MAX_DEPTH} levels deep.",
                             code="invalid_json") from exc
    # The walk finds where a problem is: a second pass over every value in Python, so
    # it runs only where one can be: a refused number, more than MAX_DEPTH brackets,
    # or a \uD800-\uDFFF escape (a decoded UTF-8 text holds a lone surrogate no other way).
    if (hooks.refused or text.count("[") + text.count("{") >= MAX_DEPTH
            or _SURROGATE_ESCAPE.search(text)):
        check(value)
    return value


def check(value: Any) -> None:
    """Walk the decoded value (iteratively: its depth is what is being checked) for
    refused numbers, excessive depth and lone surrogates (only a string that is not
    ASCII, which Python knows without looking at it, may hold one)."""
    _leaf(value, ())
    stack: list[tuple[Any, Path]] = [(value, ())] if isinstance(value, dict | list) else []
    while stack:
        node, path = stack.pop()
        if len(path) >= MAX_DEPTH:
            raise InvalidRequest(f"The JSON body is nested more than {MAX_DEPTH} levels deep "
                                 f"(at '{dotted(path)}').", param=dotted(path) or None,
                                 code="invalid_json")
        for key, child in node.items() if isinstance(node, dict) else enumerate(node):
            if isinstance(key, str) and (found := _surrogate(key)) is not None:
                _refuse((*path, key), f"the key contains {found}")
            if isinstance(child, dict | list):
                stack.append((child, (*path, key)))
            else:
                _leaf(child, (*path, key))


def _leaf(value: Any, path: Path) -> None:
    if isinstance(value, _Refused):
        _refuse(path, value.problem)
    if isinstance(value, str) and (found := _surrogate(value)) is not None:
        _refuse(path, f"it contains {found}")


def _refuse(path: Path, problem: str) -> None:
    where = dotted(path)
    if not where:
        raise InvalidRequest(f"Invalid request body: {problem}.", code="invalid_value")
    raise InvalidRequest(f"Invalid value for '{where}': {problem}.", param=where,
                         code="invalid_value")


def _surrogate(text: str) -> str | None:
    """How to describe the first lone surrogate of `text` (no UTF-8 can encode one)."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate (\\u{ord(text[exc.start]):04x}), which is not valid Unicode"
    return None


def dotted(path: Path) -> str:
    """A location the way clients name parameters: `messages[0].content` (a lone
    surrogate in a key is written as its escape: the error must be encodable)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        name = part.encode("utf-8", "backslashreplace").decode("utf-8")
        out += f".{name}" if out else name
    return out

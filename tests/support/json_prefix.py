"""Whether a text cut short is the start of a JSON text: what a grammar-constrained answer
that `max_tokens` cut must still be."""

from __future__ import annotations

import json

# Endings that complete a JSON text cut anywhere: a partial literal, number or escape,
# then a missing value or key; the open containers are closed after them.
_PARTIAL_ENDS = ("", '"', 'n"', '0"', '00"', '000"', '0000"', "e", "ue", "rue", "l", "ll",
                 "ull", "se", "lse", "alse", "0", "1")
_MISSING = ("", "0", ": 0", '"k": 0')


def _closers(text: str) -> str | None:
    """What closes the arrays and objects left open in `text` (None inside a string)."""
    stack, in_string, escaped = [], False, False
    for char in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            stack.append("]" if char == "[" else "}")
        elif char in "]}" and stack:
            stack.pop()
    return None if in_string else "".join(reversed(stack))


def json_prefix(text: str) -> bool:
    """Whether `text` is the start of a JSON text: what a grammar-constrained answer that
    `max_tokens` cut short must still be."""
    for end in _PARTIAL_ENDS:
        for missing in _MISSING:
            head = text + end + missing
            closers = _closers(head)
            if closers is None:
                continue
            try:
                json.loads(head + closers)
            except ValueError:
                continue
            return True
    return False

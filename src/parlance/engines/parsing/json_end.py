"""Where a JSON object or array that arrives in pieces ends: the depth and the string
state are carried from piece to piece, so each character is looked at once. Shared by
the call parsers whose arguments are a JSON value (`calls.py`, `tagged.py`)."""

from __future__ import annotations


class JsonEnd:
    __slots__ = ("depth", "in_string", "escaped")

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.escaped = False

    def reset(self) -> None:
        self.depth, self.in_string, self.escaped = 0, False, False

    @property
    def outside(self) -> bool:
        """No value begun yet (or the last one closed)."""
        return self.depth == 0 and not self.in_string

    def end_in(self, piece: str) -> int | None:
        """Index just after the value's last character in `piece`, or None when the
        value goes on past it (the state then carries over to the next piece)."""
        for i, ch in enumerate(piece):
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif ch == "\\":
                    self.escaped = True
                elif ch == '"':
                    self.in_string = False
            elif ch == '"':
                self.in_string = True
            elif ch in "{[":
                self.depth += 1
            elif ch in "}]":
                self.depth -= 1
                if self.depth == 0:
                    return i + 1
        return None

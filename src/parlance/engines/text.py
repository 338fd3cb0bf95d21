"""Engine-neutral text plumbing: UTF-8-safe detokenization and stop-string holdback."""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class Utf8Stream:
    """Turns token byte pieces into text without ever splitting a character.

    Bytes of an incomplete multi-byte character are held until the token that
    completes it arrives; `flush()` turns any leftover into U+FFFD.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, piece: bytes) -> str:
        return self._decoder.decode(piece)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


def partial_suffix(text: str, markers: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of a marker:
    text that must be held back because the next token may complete the marker."""
    best = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:size]):
                best = size
                break
    return best


@dataclass(slots=True)
class Piece(Generic[T]):
    """A run of text and what produced it (e.g. a token's logprob record)."""

    text: str
    payload: T
    cut: bool = False  # a stop string cut this piece short


class StopMatcher(Generic[T]):
    """Holds back text that may be the start of a stop string.

    `push()` returns the pieces that are now safe to emit. Once a stop string
    appears, the text before it is released (the piece it falls in is cut) and
    `stopped` becomes true; nothing after the stop string is ever released.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._pending: list[Piece[T]] = []
        self.stopped = False
        self.matched: str | None = None  # the stop string that stopped it

    def push(self, text: str, payload: T) -> list[Piece[T]]:
        if self.stopped:
            return []
        self._pending.append(Piece(text, payload))
        if not self._stops:
            return self._release_all()
        joined = "".join(p.text for p in self._pending)
        cut = self._first_stop(joined)
        if cut is not None:
            self.stopped = True
            self.matched = min((s for s in self._stops if s in joined),
                               key=lambda s: (joined.find(s), -len(s)))
            return self._release_chars(cut, truncate=True)
        return self._release_chars(len(joined) - self._holdback(joined), truncate=False)

    def flush(self) -> list[Piece[T]]:
        """End of generation without a stop string: release everything held."""
        return [] if self.stopped else self._release_all()

    def _first_stop(self, text: str) -> int | None:
        hits = [i for i in (text.find(s) for s in self._stops) if i >= 0]
        return min(hits) if hits else None

    def _holdback(self, text: str) -> int:
        return partial_suffix(text, self._stops)

    def _release_all(self) -> list[Piece[T]]:
        released, self._pending = self._pending, []
        return released

    def _release_chars(self, limit: int, *, truncate: bool) -> list[Piece[T]]:
        released: list[Piece[T]] = []
        used = 0
        while self._pending:
            piece = self._pending[0]
            if used + len(piece.text) <= limit:
                released.append(self._pending.pop(0))
                used += len(piece.text)
                continue
            if truncate and used < limit:
                released.append(Piece(piece.text[: limit - used], piece.payload, cut=True))
            break
        if truncate:
            self._pending = []
        return released

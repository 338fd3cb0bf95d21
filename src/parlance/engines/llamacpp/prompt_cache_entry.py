"""What both tiers of the prompt cache hold and answer: an `Entry` (a saved sequence's
tokens and KV state), a lookup's `Found`, and `common_prefix`, the measure of both."""

from __future__ import annotations

from dataclasses import dataclass

State = bytes | bytearray  # llama.cpp's bytes for one sequence (read in place: tens of MB)


@dataclass(frozen=True, slots=True, eq=False)
class Entry:
    """One saved sequence: its tokens, position by position, and llama.cpp's state bytes."""

    tokens: tuple[int, ...]
    state: State

    @property
    def size(self) -> int:
        return len(self.state) + 4 * len(self.tokens)


@dataclass(frozen=True, slots=True)
class Found:
    """A lookup's answer: `length` prompt tokens are in `entry`, which lives in `tier`."""

    entry: Entry
    length: int
    tier: str  # "ram" or "disk"


def common_prefix(a: list[int] | tuple[int, ...], b: list[int] | tuple[int, ...]) -> int:
    """How many leading tokens a and b share. Slices compare in C: a bisection over
    prefix equality is much faster than a Python loop for thousands of tokens."""
    n = min(len(a), len(b))
    left, right = list(a[:n]), list(b[:n])
    if left == right:
        return n
    lo, hi = 0, n  # left[:lo] == right[:lo], left[:hi] != right[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if left[lo:mid] == right[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo

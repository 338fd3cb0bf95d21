"""Draft tokens for speculative decoding, by prompt lookup: the text a sequence
writes often repeats spans of its context (code being edited, fields copied into
JSON, names from a document), so the tokens that followed the latest earlier
occurrence of its last n tokens are a cheap guess at what comes next.

`NgramDrafter` keeps, for every n-gram of the context (n = `max_n` down to
`min_n`), where it last ended, updated as each token arrives: a proposal costs a
few dictionary look-ups however long the prompt. The longest n that matched
wins (as vLLM's `ngram` proposer and llama.cpp's `ngram` lookups do).

`DraftLength` is one sequence's adaptive draft length: it grows while drafts are
accepted whole, shrinks to what was accepted on a rejection, and rests (no draft
at all) after a run of drafts that mostly failed, so text that never repeats
costs nothing but the look-ups.
"""

from __future__ import annotations

from collections.abc import Iterable

MAX_DRAFT = 8  # tokens a sequence may draft in one step
MIN_N, MAX_N = 1, 3  # the n-grams looked up, longest first
MATCH_CAP = 32  # tokens a match's length is counted to


class NgramDrafter:
    """Prompt lookup over one sequence's context (prompt, then what it generated)."""

    __slots__ = ("tokens", "min_n", "max_n", "_last_end", "_match")

    def __init__(self, tokens: Iterable[int] = (), *, min_n: int = MIN_N,
                 max_n: int = MAX_N) -> None:
        self.tokens: list[int] = []
        self.min_n, self.max_n = min_n, max_n
        # n-gram → the index just past its latest occurrence (where its continuation starts)
        self._last_end: dict[tuple[int, ...], int] = {}
        # n → where the continuation of the previous occurrence of the context's last
        # n tokens starts (set as each token arrives, before its own occurrence is indexed)
        self._match: dict[int, int] = {}
        self.extend(tokens)

    def copy(self) -> NgramDrafter:
        """Another choice of the same prompt starts from the same index."""
        twin = NgramDrafter(min_n=self.min_n, max_n=self.max_n)
        twin.tokens = list(self.tokens)
        twin._last_end = dict(self._last_end)
        twin._match = dict(self._match)
        return twin

    def extend(self, tokens: Iterable[int]) -> None:
        history, index, match = self.tokens, self._last_end, self._match
        for token in tokens:
            history.append(token)
            end = len(history)
            for n in range(self.min_n, self.max_n + 1):
                if end < n:
                    break
                key = tuple(history[end - n:end])
                previous = index.get(key)
                if previous is None:
                    match.pop(n, None)
                else:
                    match[n] = previous
                index[key] = end

    def sync(self, generated: list[int], prompt_length: int) -> None:
        """Take in the tokens a sequence generated since the last call."""
        have = len(self.tokens) - prompt_length
        if have < len(generated):
            self.extend(generated[have:])

    def propose(self, limit: int) -> list[int]:
        """Up to `limit` tokens that followed the latest earlier occurrence of the
        longest suffix of the context seen before; [] when none was."""
        if limit <= 0:
            return []
        start = self.source()
        return [] if start is None else self.tokens[start:start + limit]

    def source(self) -> int | None:
        """Where the continuation of the context's longest suffix seen before starts."""
        for n in range(self.max_n, self.min_n - 1, -1):
            start = self._match.get(n)
            if start is not None:
                return start
        return None

    def match_length(self, start: int, cap: int = MATCH_CAP) -> int:
        """How many tokens before `start` equal the context's last ones (at most `cap`):
        how much of the context the draft's source agrees with."""
        tokens, end = self.tokens, len(self.tokens)
        n = 0
        while n < cap and n < start and tokens[start - 1 - n] == tokens[end - 1 - n]:
            n += 1
        return n


class DraftLength:
    """How many tokens one sequence drafts next, from how its drafts fared."""

    __slots__ = ("length", "drafted", "accepted", "_misses", "_rest", "_rest_for")

    START = 4
    # A sequence whose last drafts were mostly rejected stops drafting for a while
    # (doubling each time it fails again): a rejected token costs a batch row and
    # saves nothing.
    MISSES_TO_REST = 3
    FIRST_REST = 8  # steps

    def __init__(self) -> None:
        self.length = self.START
        self.drafted = 0
        self.accepted = 0
        self._misses = 0  # drafts in a row that were rejected at their first token
        self._rest = 0  # steps left without drafting
        self._rest_for = self.FIRST_REST

    def wanted(self) -> int:
        """The draft length for this step (0 while resting)."""
        if self._rest:
            self._rest -= 1
            return 0
        return self.length

    def record(self, drafted: int, accepted: int) -> None:
        """A draft of `drafted` tokens was verified and its first `accepted` kept."""
        if drafted == 0:
            return
        self.drafted += drafted
        self.accepted += accepted
        if accepted == drafted:
            self.length = min(MAX_DRAFT, self.length * 2)
            self._misses = 0
            self._rest_for = self.FIRST_REST
            return
        self.length = max(1, accepted + 1 if accepted else self.length // 2)
        if accepted:
            self._misses = 0
            return
        self._misses += 1
        if self._misses >= self.MISSES_TO_REST:
            self._misses = 0
            self._rest = self._rest_for
            self._rest_for = min(self._rest_for * 2, 256)

    @property
    def rate(self) -> float:
        """Share of drafted tokens accepted so far (1.0 before any draft: worth trying)."""
        return self.accepted / self.drafted if self.drafted else 1.0

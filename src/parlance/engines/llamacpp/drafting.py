"""Draft tokens for speculative decoding, by prompt lookup: the text a sequence
writes often repeats spans of its context (code being edited, fields copied into
JSON, names from a document), so the tokens that followed the latest earlier
occurrence of its last n tokens are a cheap guess at what comes next.

`NgramDrafter` keeps, for every n-gram of the context (n = `max_n` down to
`min_n`), where it last ended, updated as each token arrives: a lookup costs a
few dictionary look-ups however long the prompt. The longest n that matched
wins (as vLLM's `ngram` proposer and llama.cpp's `ngram` lookups do); how far the
match really reaches back (up to `MATCH_CAP` tokens) is counted at the source. The
source found is where a copy starts (copying.py follows it and drafts from it).

`Acceptance` is one sequence's record of how its drafts fared, by the length of the
match each drafted token stood on (the copy's run, counted through the model's
edits): a draft from a match of m tokens whose first k tokens were accepted put its
next token on a match of m + k. Measured on
bench/speculative.py's workloads, a token on a match of 1-3 tokens is accepted a third
of the time or less, one on a match of 8 or more nine times in ten: llama.cpp's
`ngram-mod` drafts only from matches of 24 tokens for that reason. The estimates
start from those figures and follow the sequence's own drafts.
"""

from __future__ import annotations

from collections.abc import Iterable

MIN_N, MAX_N = 1, 3  # the n-grams looked up, longest first
MATCH_CAP = 32  # tokens a match's length is counted to
# A draft token accepted less often than this cannot pay for its batch row anywhere
# (step_cost.py: a row costs 0.43 of a one-row step).
NEGLIGIBLE = 0.2


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


class Acceptance:
    """One sequence's chance that a draft token is accepted, given the previous ones
    were, by the length of the match it stands on (buckets of `BUCKETS`): a prior worth
    `PRIOR_WEIGHT` tokens at `PRIOR`, plus what its own drafts showed, each older draft
    counting `DECAY` times less."""

    __slots__ = ("_hits", "_misses")

    BUCKETS = (1, 2, 3, 4, 8, 16, 32)  # a match of m tokens is in the last bucket <= m
    PRIOR = (0.3, 0.35, 0.4, 0.8, 0.9, 0.93, 0.97)
    PRIOR_WEIGHT = 4.0
    DECAY = 0.9

    def __init__(self) -> None:
        self._hits = [0.0] * len(self.BUCKETS)
        self._misses = [0.0] * len(self.BUCKETS)

    @classmethod
    def bucket(cls, match: int) -> int:
        return _BUCKET_OF[min(match, len(_BUCKET_OF) - 1)]

    def chance(self, match: int) -> float:
        """The chance a token on a match of `match` tokens is accepted."""
        return self._chance(self.bucket(match))

    def _chance(self, b: int) -> float:
        hits, seen = self._hits[b], self._hits[b] + self._misses[b]
        return (hits + self.PRIOR_WEIGHT * self.PRIOR[b]) / (seen + self.PRIOR_WEIGHT)

    def expected(self, match: int, length: int) -> list[float]:
        """`e[k]`: the tokens a draft of k tokens from a match of `match` tokens is
        expected to have accepted (k = 0 … length), ending early where a further token
        would be accepted less than `NEGLIGIBLE` of the time."""
        chances = [self._chance(b) for b in range(len(self.BUCKETS))]
        last = len(_BUCKET_OF) - 1
        out, chain = [0.0], 1.0
        for k in range(length):
            chain *= chances[_BUCKET_OF[min(match + k, last)]]
            if chain < NEGLIGIBLE:
                break
            out.append(out[-1] + chain)
        return out

    def record(self, match: int, drafted: int, accepted: int) -> None:
        """A draft of `drafted` tokens from a match of `match` tokens kept `accepted`."""
        if drafted == 0:
            return
        for b in range(len(self._hits)):
            self._hits[b] *= self.DECAY
            self._misses[b] *= self.DECAY
        for k in range(accepted):
            self._hits[self.bucket(match + k)] += 1
        if accepted < drafted:
            self._misses[self.bucket(match + accepted)] += 1


_BUCKET_OF = [max(b for b, low in enumerate(Acceptance.BUCKETS) if low <= max(m, 1))
              for m in range(Acceptance.BUCKETS[-1] + 1)]

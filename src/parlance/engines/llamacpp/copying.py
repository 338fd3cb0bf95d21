"""Following a copy: where in its context a sequence is copying from, what the model
changed in the copy so far, and where the copy goes on after the model departs from it.

Prompt lookup finds a source from the context's last few tokens alone, and counts the
match only back to the last difference. A sequence rewriting code with a name changed
is one long copy with a few edits: once the model has written its own word where the
source had another, the source goes on a few tokens later, and wherever the source
says the old word again the model says its new one. `Copy` keeps that: a cursor in
the context (advanced as the sequence's tokens agree with the copy), the run of tokens
the copy has held for (counted through its edits, with at most `RESUMED_RUN` of it
from before the last one: text whose copies keep being edited, a summary's, breaks
again soon), the edits (`old` source tokens → the model's `new` ones, applied to every
draft), and, after a departure from a copy that had held, the search for where the
source picks up again: the fewest tokens replaced on either side, confirmed by the
model's next `CONFIRM` tokens. An edit the model does not repeat is forgotten where it
first breaks the copy.
"""

from __future__ import annotations

from dataclasses import dataclass

# A copy broken after fewer tokens than this was a coincidence, not a copy to pick up.
MIN_RUN = 8
# An edit replaces at most this many tokens on either side: a name, not a rewrite.
MAX_EDIT = 6
# Tokens past the edit that must agree with the source before the copy goes on.
CONFIRM = 2
# A copy picked up after an edit keeps at most this much of the run it had before:
# weighed on bench/speculation_replay.py's workloads (16 and 2 confirming tokens: a
# summary's paraphrases break again soon, and longer credit drafted past them).
RESUMED_RUN = 16

Tokens = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Cursor:
    """The copy's next token: the source token at `at`, or, where an edit replaces the
    source from `at` on, its `into`-th replacement token."""

    at: int
    into: int = 0


@dataclass(frozen=True, slots=True)
class _Break:
    source: int  # where in the context the model stopped following the source
    context: int  # the index of the model's first token of its own
    run: int  # how long the copy had held


class Copy:
    """One sequence's copy of its context (see the module doc)."""

    __slots__ = ("cursor", "run", "seen", "edits", "_by_first", "_break")

    def __init__(self) -> None:
        self.cursor: Cursor | None = None
        self.run = 0
        self.seen = 0  # context tokens already followed
        self.edits: dict[Tokens, Tokens] = {}
        self._by_first: dict[int, list[Tokens]] = {}  # first old token → olds, longest first
        self._break: _Break | None = None

    @property
    def standing(self) -> int:
        """The match a lookup's source must exceed to be followed instead: the run of the
        copy followed, or, while the model's departure from one may yet turn out to be
        an edit, a match that long copy would have been worth picking up for."""
        if self.cursor is not None:
            return self.run
        return MIN_RUN - 1 if self._break is not None else 0

    def start(self, at: int, run: int) -> None:
        """Follow the source at `at`, which agrees with the context's last `run` tokens."""
        self.cursor, self.run, self._break = Cursor(at), run, None

    def follow(self, tokens: list[int]) -> None:
        """Take in the context's tokens since the last call: advance the cursor while they
        agree with the copy; where they depart from it, remember where, and look for
        the place the source picks up again."""
        end = len(tokens)
        cursor = self.cursor
        for index in range(self.seen, end):
            if cursor is None:
                break
            token, after, edit = self._step(tokens, cursor)
            if token == tokens[index]:
                cursor = after
                self.run += 1
                continue
            if edit is not None:  # the model did not repeat this edit here
                self._forget(edit)
            self._break = (_Break(cursor.at, index - cursor.into, self.run)
                           if self.run >= MIN_RUN else None)
            cursor = None
        self.cursor = cursor
        self.seen = end
        if cursor is None and self._break is not None:
            self._realign(tokens)

    def draft(self, tokens: list[int], limit: int) -> list[int]:
        """Up to `limit` tokens of the copy from its cursor, edits applied; a source that
        reaches the context's end goes on with what the draft copied (text repeating
        itself)."""
        out: list[int] = []
        cursor = self.cursor
        while cursor is not None and len(out) < limit:
            token, cursor, _ = self._step(tokens, cursor, out)
            if token is None:
                break
            out.append(token)
        return out

    def _step(self, tokens: list[int], cursor: Cursor,
              drafted: list[int] | None = None) -> tuple[int | None, Cursor, Tokens | None]:
        """The copy's token at `cursor`, the cursor after it, and the edit it comes from."""
        at = cursor.at
        old = self._edit_at(tokens, at, drafted)
        if old is None:
            return _source(tokens, at, drafted), Cursor(at + 1), None
        new, into = self.edits[old], cursor.into
        after = Cursor(at, into + 1) if into + 1 < len(new) else Cursor(at + len(old))
        return new[into], after, old

    def _edit_at(self, tokens: list[int], at: int, drafted: list[int] | None) -> Tokens | None:
        first = _source(tokens, at, drafted)
        for old in self._by_first.get(first, ()) if first is not None else ():
            if all(_source(tokens, at + k, drafted) == t for k, t in enumerate(old)):
                return old
        return None

    def _realign(self, tokens: list[int]) -> None:
        """Where the source picks up after the model departed from it: the model's tokens
        since the departure are `new` tokens in place of `old` source tokens, then the
        source again for at least `CONFIRM` tokens. The smallest such edit wins; one
        that replaced tokens by others is learned for the rest of the copy."""
        broken = self._break
        assert broken is not None
        written = tokens[broken.context:]
        if len(written) > MAX_EDIT + CONFIRM:
            self._break = None  # a departure for good: a lookup finds the next copy
            return
        for size in range(2 * MAX_EDIT + 1):  # 0: an edit the model did not repeat
            for added in range(max(0, size - MAX_EDIT), min(size, MAX_EDIT) + 1):
                resume = broken.source + size - added
                after = written[added:]
                if (len(after) < CONFIRM or resume >= broken.context
                        or tokens[resume:resume + len(after)] != after):
                    continue
                old = tuple(tokens[broken.source:resume])
                if old and added:
                    self._learn(old, tuple(written[:added]))
                self.cursor = Cursor(resume + len(after))
                self.run = min(broken.run, RESUMED_RUN) + len(after)
                self._break = None
                return

    def _learn(self, old: Tokens, new: Tokens) -> None:
        if old not in self.edits:
            olds = self._by_first.setdefault(old[0], [])
            olds.append(old)
            olds.sort(key=len, reverse=True)  # the longest old text that matches wins
        self.edits[old] = new

    def _forget(self, old: Tokens) -> None:
        del self.edits[old]
        self._by_first[old[0]].remove(old)


def _source(tokens: list[int], at: int, drafted: list[int] | None) -> int | None:
    """The context's token at `at`; past its end, the draft's own (a copy of the
    context's last tokens goes on with what it copied)."""
    if at < len(tokens):
        return tokens[at]
    k = at - len(tokens)
    return drafted[k] if drafted is not None and k < len(drafted) else None

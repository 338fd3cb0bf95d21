"""Speculative decoding inside the batching scheduler: which sequences draft how
many tokens this step, and what became of their drafts.

A draft rides in the same `llama_decode` as every other sequence's token, one
batch row (with logits) per drafted token, right after the sequence's pending
token; the scheduler verifies it (verification.py) and removes the rejected
cells. On a CPU a draft row is not free: it costs nearly what a row of a prompt
costs, about 0.43 of a one-row step, and a second row in a step costs a whole one
(step_cost.py). A draft pays only when its tokens are likely enough: each step
`plan` weighs every proposal's expected accepted tokens (drafting.Acceptance, by
the run of the copy it comes from: copying.py follows a copy through the model's
edits, so a rewrite with a renamed variable stays one long copy) against what the
step would cost with it, the ubatches llama.cpp splits it into included, and keeps
the drafts that raise the step's tokens per unit of cost. Text that never repeats
long spans drafts nothing; a large batch, whose rows are already cheap per token,
drafts only near-certain spans; a sequence whose drafts keep failing stops drafting.

With a draft model (`draft` mode) the drafts come from a `Proposer` instead
(draft_plan.py), which the planner asks for the whole step's drafts at once: its
guesses cost decodes of its own, made for all drafting sequences together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from parlance.engines.llamacpp.copying import Copy
from parlance.engines.llamacpp.drafting import MATCH_CAP, Acceptance, NgramDrafter
from parlance.engines.llamacpp.step_cost import StepCost
from parlance.engines.metrics import EngineMetrics

SpeculativeMode = Literal["ngram", "draft", "off"]
SPECULATIVE_MODES: tuple[SpeculativeMode, ...] = ("ngram", "draft", "off")
MAX_DRAFT = 32  # tokens a sequence may draft in one step
GAIN = 1.05  # a plan must beat no drafts by this factor in tokens per unit of cost
SPARSE_LENGTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24)  # weighed in a batch of many sequences
# A batch whose looks keep finding no plan better than none (free prose over many
# streams) is looked at less often: after each IDLE_LOOKS fruitless looks, one more step
# between looks, up to MAX_SKIPPED. A skipped step only defers: at the next look every
# sequence's index and copy take in all its tokens since.
IDLE_LOOKS, MAX_SKIPPED = 8, 3


@dataclass(frozen=True, slots=True)
class SpeculativeSettings:
    mode: SpeculativeMode = "ngram"
    cost: StepCost = field(default_factory=StepCost)
    max_draft: int = MAX_DRAFT
    # `draft` mode: a decode of the draft model relative to one of the target (None:
    # the ratio of their weights' sizes)
    draft_cost: float | None = None

    @property
    def enabled(self) -> bool:
        return self.mode != "off"


NO_SPECULATION = SpeculativeSettings(mode="off")
DEFAULT_SPECULATION = SpeculativeSettings()


class SequenceDraft:
    """One sequence's drafting state: its context's n-gram index, the copy it follows
    (copying.py), how its drafts fared, and the run its pending draft stood on."""

    __slots__ = ("drafter", "copy", "acceptance", "prompt_length", "match")

    def __init__(self, drafter: NgramDrafter, prompt_length: int) -> None:
        self.drafter = drafter
        self.copy = Copy()
        self.acceptance = Acceptance()
        self.prompt_length = prompt_length
        self.match = 0


@dataclass(slots=True)
class Candidate:
    """A sequence decoding this step: its slot, its drafting state (None: it does not
    draft), the most draft tokens it may verify, what it generated so far, and what
    its grammar keeps of a draft."""

    slot: int
    state: SequenceDraft | None
    limit: int
    generated: list[int]
    screen: Callable[[list[int]], list[int]]


@dataclass(slots=True)
class _Proposal:
    index: int  # in the step's candidates
    tokens: list[int]
    expected: list[float]  # expected accepted tokens by draft length
    length: int = 0  # chosen

    def worth(self, floor: float) -> bool:
        """Some length of it is expected to keep more than `floor` of its tokens."""
        return any(e > floor * k for k, e in enumerate(self.expected) if k)

    def options(self, others: list[_Proposal], *, every: bool) -> list[int]:
        """The lengths to weigh, shortest first: all of them (`every`), or a few and the
        lengths others chose (drafts of equal length share a ubatch)."""
        longest = len(self.expected) - 1
        if every:
            return list(range(1, longest + 1))
        return sorted({*_lengths(longest), *(q.length for q in others
                                             if 0 < q.length <= longest)})


def _lengths(longest: int) -> list[int]:
    return sorted({longest, *(n for n in SPARSE_LENGTHS if n < longest)})


class _Step:
    """One step's plan as it is being chosen: every candidate's rows, the expected tokens
    and the best tokens per unit of cost found so far."""

    def __init__(self, slots: list[int], proposals: list[_Proposal], room: int,
                 cost: StepCost, unified: bool) -> None:
        self.proposals = proposals
        self.room, self.cost, self.unified = room, cost, unified
        self.slots = slots
        self.rows = [1] * len(slots)
        self.value = float(len(slots))
        self.best = self.value / cost.batch(self.slots, self.rows, unified=unified)

    def runs(self) -> list[list[_Proposal]]:
        """Proposals of two or more sequences in consecutive slots, where every sequence
        of those slots that decodes this step has one."""
        by_index = {p.index: p for p in self.proposals}
        runs: list[list[_Proposal]] = []
        current: list[_Proposal] = []
        for i, slot in enumerate(self.slots):
            adjacent = i > 0 and slot == self.slots[i - 1] + 1
            if not adjacent or i not in by_index:
                if len(current) > 1:
                    runs.append(current)
                current = []
            if i in by_index:
                current.append(by_index[i])
        if len(current) > 1:
            runs.append(current)
        return runs

    def try_lengths(self, group: list[_Proposal], lengths: list[int]) -> None:
        """Give every proposal of `group` one of `lengths` (the same), if one makes the
        step better than it is."""
        kept = [p.length for p in group]
        drafted = sum(p.length for p in self.proposals) - sum(kept)
        found_length = None
        for length in lengths:
            if drafted + length * len(group) > self.room:
                break
            rate, value = self._rate(group, [length] * len(group))
            if rate > self.best:
                self.best, found_length, found_value = rate, length, value
        if found_length is None:
            self._set(group, kept)
            return
        self._set(group, [found_length] * len(group))
        self.value = found_value

    def _rate(self, group: list[_Proposal], lengths: list[int]) -> tuple[float, float]:
        value = self.value + sum(p.expected[n] - p.expected[p.length]
                                 for p, n in zip(group, lengths, strict=True))
        for p, n in zip(group, lengths, strict=True):
            self.rows[p.index] = 1 + n
        return value / self.cost.batch(self.slots, self.rows, unified=self.unified), value

    def _set(self, group: list[_Proposal], lengths: list[int]) -> None:
        for p, n in zip(group, lengths, strict=True):
            p.length = n
            self.rows[p.index] = 1 + n


class Proposer(Protocol):
    """Drafts from outside a sequence's own context (a draft model): asked for every
    candidate's draft of a step at once, and told how each fared."""

    def plan(self, candidates: list[Candidate], room: int, *,
             unified: bool = False) -> list[list[int]]: ...

    def record(self, state: SequenceDraft, drafted: int, accepted: int) -> None: ...


class Speculator:
    def __init__(self, settings: SpeculativeSettings, metrics: EngineMetrics,
                 proposer: Proposer | None = None) -> None:
        self.settings = settings
        self.metrics = metrics
        self.proposer = proposer
        self._fruitless = 0  # looks in a row where no plan beat drafting nothing
        self._skipping = 0  # steps left before the next look

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def index(self, prompt: list[int]) -> NgramDrafter:
        """A prompt's n-gram index: built by the engine off the scheduler thread (a long
        prompt takes milliseconds every running stream would wait for)."""
        return NgramDrafter(prompt)

    def start(self, index: NgramDrafter, choices: int) -> list[SequenceDraft]:
        """Drafting states for the `choices` sequences of one prompt."""
        prompt_length = len(index.tokens)
        return [SequenceDraft(index if i == 0 else index.copy(), prompt_length)
                for i in range(choices)]

    def plan(self, candidates: list[Candidate], room: int, *,
             unified: bool = False) -> list[list[int]]:
        """Each candidate's draft ([] for most), candidates in slot order; `room`: the
        draft rows the batch has left."""
        if self.proposer is not None:
            return self.proposer.plan(candidates, room, unified=unified)
        if self._skipping and len(candidates) > 1:
            self._skipping -= 1
            return [[] for _ in candidates]
        drafts, promising = self._weigh(candidates, room, unified)
        if promising:
            self._fruitless = 0
        else:
            self._fruitless += 1
            self._skipping = min(self._fruitless // IDLE_LOOKS, MAX_SKIPPED)
        return drafts

    def _weigh(self, candidates: list[Candidate], room: int,
               unified: bool) -> tuple[list[list[int]], bool]:
        """Each candidate's draft: the plan that most raises the step's tokens per unit
        of cost, if it beats no drafts by GAIN; and whether any plan beat no drafts."""
        drafts: list[list[int]] = [[] for _ in candidates]
        cost = self.settings.cost
        slots = [c.slot for c in candidates]
        base = len(candidates) / cost.batch(slots, [1] * len(candidates), unified=unified)
        # A draft token must be accepted often enough to pay for its row at the rate
        # this step makes tokens without drafts.
        floor = cost.per_row * base
        proposals = [p for i, c in enumerate(candidates)
                     if (p := self._propose(i, c, room, floor)) is not None and p.worth(floor)]
        # No row costs less than `per_row`, and a draft's first token is its likeliest,
        # so no plan beats `base` by more than its best first token beats `floor`: where
        # that is short of GAIN (free prose, a large batch), weighing lengths is wasted.
        if not proposals or max(p.expected[1] for p in proposals) < floor * GAIN:
            return drafts, False
        step = _Step(slots, proposals, room, cost, unified)
        # Sequences of consecutive slots that all draft one length share one ubatch.
        for run in step.runs():
            step.try_lengths(run, _lengths(min(len(p.expected) - 1 for p in run)))
        # Then each proposal, the likeliest first, takes the length that most raises
        # the step's tokens per unit of cost given the others' choices so far.
        for p in sorted(proposals, key=lambda p: -p.expected[-1] / len(p.tokens)):
            step.try_lengths([p], p.options(proposals, every=len(candidates) <= 2))
        if step.best < base * GAIN:
            return drafts, step.best > base  # some plan gained, not enough
        for p in proposals:
            drafts[p.index] = p.tokens[:p.length]
        return drafts, True

    def _propose(self, index: int, candidate: Candidate, room: int,
                 floor: float) -> _Proposal | None:
        """The candidate's draft, None where its first token is not likelier than
        `floor` (then no length of it is worth its rows: `_Proposal.worth`)."""
        state = candidate.state
        limit = min(candidate.limit, room, self.settings.max_draft)
        if state is None or limit <= 0:
            return None
        match = self._follow(state, candidate.generated)
        if match is None:
            return None
        state.match = match
        if state.acceptance.chance(match) <= floor:
            return None
        expected = state.acceptance.expected(match, limit)
        if len(expected) < 2:
            return None
        tokens = candidate.screen(state.copy.draft(state.drafter.tokens, len(expected) - 1))
        if not tokens:
            return None
        return _Proposal(index, tokens, expected[:len(tokens) + 1])

    @staticmethod
    def _follow(state: SequenceDraft, generated: list[int]) -> int | None:
        """The run of the copy the sequence's next tokens are drafted from: the one it
        follows, unless a lookup finds a source that agrees with more of its context."""
        drafter, copy = state.drafter, state.copy
        drafter.sync(generated, state.prompt_length)
        copy.follow(drafter.tokens)
        if copy.standing < MATCH_CAP and (start := drafter.source()) is not None:
            match = drafter.match_length(start)
            if match > copy.standing:
                copy.start(start, match)
        return None if copy.cursor is None else copy.run

    def record(self, state: SequenceDraft, drafted: int, accepted: int) -> None:
        if self.proposer is not None:  # its drafts stand on no match: its own record
            self.proposer.record(state, drafted, accepted)
        else:
            state.acceptance.record(state.match, drafted, accepted)
        self.metrics.speculative_tokens_drafted += drafted
        self.metrics.speculative_tokens_accepted += accepted

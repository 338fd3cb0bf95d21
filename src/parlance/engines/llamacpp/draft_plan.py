"""Which sequences ask the draft model for how many tokens this step: the proposer
speculation.py's planner asks when the engine drafts with a model (`--draft-model`).

A draft model's guesses are not free as prompt lookup's are: every draft position is
one decode of the draft model (all drafting sequences together), before the target
verifies anything. So the lengths are chosen before a token is guessed, by what the
step is expected to make (each sequence's `DraftAcceptance`: how its recent drafts
fared) against what it costs: the target's batch with the draft rows (step_cost.py,
ubatches included) plus the draft model's own decodes, priced at the draft's cost
relative to the target's (by default the ratio of their weights' sizes: on a CPU a
decode step reads every weight). Lengths are kept only when the step's tokens per unit
of cost beat a step without drafts by `GAIN`; a sequence whose drafts keep failing
stops drafting, and a draft as costly as the target never pays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from parlance.engines.llamacpp.draft_model import DraftModel, weights_bytes
from parlance.engines.llamacpp.drafting import NEGLIGIBLE
from parlance.engines.llamacpp.model import LlamaModel
from parlance.engines.llamacpp.speculation import (
    GAIN,
    Candidate,
    SequenceDraft,
    SpeculativeSettings,
)
from parlance.engines.llamacpp.step_cost import StepCost


class DraftAcceptance:
    """One sequence's chance that a draft model's token is accepted, given the previous
    ones were: a prior worth `PRIOR_WEIGHT` tokens at `PRIOR`, plus what its own drafts
    showed, each older draft counting `DECAY` times less. The prior is the draft model
    one chose for agreeing with the target: a sequence tries it, and its record decides."""

    __slots__ = ("_hits", "_seen")

    PRIOR = 0.97
    PRIOR_WEIGHT = 2.0
    DECAY = 0.9

    def __init__(self) -> None:
        self._hits = 0.0
        self._seen = 0.0

    def chance(self) -> float:
        return (self._hits + self.PRIOR_WEIGHT * self.PRIOR) / (self._seen + self.PRIOR_WEIGHT)

    def expected(self, length: int) -> list[float]:
        """`e[k]`: the tokens a draft of k tokens is expected to have accepted (k = 0 …
        length), ending early where a further token would be accepted less than
        `NEGLIGIBLE` of the time."""
        chance, chain, out = self.chance(), 1.0, [0.0]
        for _ in range(length):
            chain *= chance
            if chain < NEGLIGIBLE:
                break
            out.append(out[-1] + chain)
        return out

    def record(self, drafted: int, accepted: int) -> None:
        """A draft of `drafted` tokens kept its first `accepted` (the tokens after the
        first rejected one say nothing)."""
        if drafted == 0:
            return
        self._hits = self._hits * self.DECAY + accepted
        self._seen = self._seen * self.DECAY + accepted + (accepted < drafted)


@dataclass(frozen=True, slots=True)
class DraftCost:
    """The draft model's decodes for a step, in one-row target steps: a decode per draft
    position of the sequences still drafting there (the first one also catches the
    streams up with the tokens the target just accepted), each priced as the target's
    decode of that shape times `ratio`."""

    ratio: float
    step: StepCost

    def __call__(self, slots: Sequence[int], lengths: Sequence[int], *,
                 unified: bool = False) -> float:
        total = 0.0
        for position in range(max(lengths, default=0)):
            going = [s for s, k in zip(slots, lengths, strict=True) if k > position]
            total += self.step.batch(going, [1] * len(going), unified=unified)
        return self.ratio * total


def choose_lengths(slots: Sequence[int], curves: Sequence[list[float]], cost: StepCost,
                   draft: DraftCost, room: int, *, unified: bool = False) -> list[int]:
    """Each sequence's draft length (0: none) for the step of the sequences in `slots`
    (ascending), `curves[i]` being sequence i's expected accepted tokens by length
    ([0.0]: it may not draft): the common cap K, each sequence drafting min(K, its
    curve's length) and all together at most `room` tokens, whose step makes the most
    tokens per unit of cost, if that beats no drafts by `GAIN`."""
    n = len(slots)
    base = n / cost.batch(slots, [1] * n, unified=unified)
    best, chosen = base * GAIN, [0] * n
    for cap in range(1, max((len(c) for c in curves), default=1)):
        lengths = [min(cap, len(c) - 1) for c in curves]
        if sum(lengths) > room:
            break
        value = n + sum(c[k] for c, k in zip(curves, lengths, strict=True))
        spent = (cost.batch(slots, [1 + k for k in lengths], unified=unified)
                 + draft(slots, lengths, unified=unified))
        if value / spent > best:
            best, chosen = value / spent, lengths
    return chosen


class ModelDrafts:
    """The `speculation.Proposer` of an engine with a draft model."""

    def __init__(self, draft: DraftModel, cost: StepCost, ratio: float,
                 max_draft: int) -> None:
        self.draft = draft
        self.cost = cost
        self.draft_cost = DraftCost(ratio, cost)
        self.max_draft = max_draft
        # slot -> the drafting state of the sequence there and its record
        self._records: dict[int, tuple[SequenceDraft, DraftAcceptance]] = {}

    @classmethod
    def of(cls, draft: DraftModel, target: LlamaModel,
           settings: SpeculativeSettings) -> ModelDrafts:
        ratio = settings.draft_cost
        if ratio is None:
            ratio = weights_bytes(draft.model) / max(1, weights_bytes(target))
        return cls(draft, settings.cost, ratio, settings.max_draft)

    def plan(self, candidates: list[Candidate], room: int, *,
             unified: bool = False) -> list[list[int]]:
        slots = [c.slot for c in candidates]
        # A draft token must be accepted often enough to pay for its row and its share
        # of the draft's decode at the rate this step makes tokens without drafts.
        base = len(candidates) / self.cost.batch(slots, [1] * len(slots), unified=unified)
        floor = (self.cost.per_row + self.draft_cost.ratio) * base
        curves = []
        for c in candidates:
            curve = [0.0]
            limit = min(c.limit, room, self.max_draft)
            if c.state is not None and limit > 0:
                curve = self._acceptance(c.slot, c.state).expected(limit)
                if not any(e > floor * k for k, e in enumerate(curve) if k):
                    curve = [0.0]
            curves.append(curve)
        lengths = choose_lengths(slots, curves, self.cost, self.draft_cost, room,
                                 unified=unified)
        if not any(lengths):
            return [[] for _ in candidates]
        wants = [(c.slot, _context(c) if k else [], k)
                 for c, k in zip(candidates, lengths, strict=True)]
        guessed = self.draft.propose(wants)
        return [c.screen(tokens) if tokens else []
                for c, tokens in zip(candidates, guessed, strict=True)]

    def record(self, state: SequenceDraft, drafted: int, accepted: int) -> None:
        for held, acceptance in self._records.values():
            if held is state:
                acceptance.record(drafted, accepted)
                return

    def _acceptance(self, slot: int, state: SequenceDraft) -> DraftAcceptance:
        """The record of the sequence in `slot`, new when another sequence took it."""
        found = self._records.get(slot)
        if found is None or found[0] is not state:
            found = self._records[slot] = (state, DraftAcceptance())
        return found[1]


def _context(candidate: Candidate) -> list[int]:
    """What the sequence holds: its prompt, then every token it generated (the last one
    is the pending token this step decodes)."""
    state = candidate.state
    assert state is not None
    return state.drafter.tokens[:state.prompt_length] + candidate.generated

"""Which sequences ask the draft model for how many tokens, without a model: each
sequence's acceptance record, the draft's own decodes priced with the target's step,
and the lengths that make the most tokens per unit of cost (none when nothing pays)."""

from __future__ import annotations

import pytest

from parlance.engines.llamacpp.draft_plan import DraftAcceptance, DraftCost, choose_lengths
from parlance.engines.llamacpp.step_cost import StepCost

COST = StepCost()


def test_a_sequence_starts_trusting_its_draft_and_its_record_decides():
    fresh = DraftAcceptance()
    assert fresh.chance() == pytest.approx(DraftAcceptance.PRIOR)
    trusted = DraftAcceptance()
    for _ in range(20):
        trusted.record(16, 16)
    assert trusted.chance() > 0.99
    assert len(trusted.expected(32)) == 33  # every length is worth weighing
    failing = DraftAcceptance()
    for _ in range(3):
        failing.record(8, 0)
    assert failing.chance() < 0.5
    assert len(failing.expected(32)) <= 3  # drafts of a few tokens at most


def test_the_tokens_after_a_rejected_one_say_nothing():
    a, b = DraftAcceptance(), DraftAcceptance()
    a.record(4, 2)
    b.record(30, 2)
    assert a.chance() == b.chance()
    before = a.chance()
    a.record(0, 0)
    assert a.chance() == before


def test_the_draft_decodes_once_per_position_for_the_sequences_still_drafting():
    draft = DraftCost(0.5, COST)
    assert draft([0, 1], [0, 0]) == 0
    assert draft([0], [3]) == pytest.approx(0.5 * 3 * COST(1))
    # Positions 1 and 2 for both (one decode of two rows each), 3 and 4 for one.
    assert draft([0, 1], [4, 2]) == pytest.approx(0.5 * (2 * COST(2) + 2 * COST(1)))


def certain(length: int) -> list[float]:
    return [float(k) for k in range(length + 1)]


def test_a_likely_draft_from_a_cheap_model_is_drafted_long():
    lengths = choose_lengths([0], [certain(16)], COST, DraftCost(0.05, COST), room=100)
    assert lengths == [16]


def test_a_draft_as_costly_as_the_model_never_pays():
    assert choose_lengths([0], [certain(32)], COST, DraftCost(1.0, COST), room=100) == [0]
    assert choose_lengths([0, 1, 2], [certain(32)] * 3, COST, DraftCost(1.0, COST),
                          room=100) == [0, 0, 0]


def test_unlikely_drafts_are_not_worth_their_rows():
    unlikely = DraftAcceptance()
    for _ in range(5):
        unlikely.record(8, 1)
    curve = unlikely.expected(8)
    assert choose_lengths([0], [curve], COST, DraftCost(0.05, COST), room=100) == [0]


def test_sequences_that_may_not_draft_get_none_and_the_rows_stay_within_room():
    lengths = choose_lengths([0, 1, 2], [certain(16), [0.0], certain(4)], COST,
                             DraftCost(0.05, COST), room=100)
    assert lengths[1] == 0
    assert lengths[0] >= lengths[2] > 0
    assert lengths[2] <= 4
    tight = choose_lengths([0, 1], [certain(16), certain(16)], COST, DraftCost(0.05, COST),
                           room=10)
    assert sum(tight) <= 10 and all(tight)

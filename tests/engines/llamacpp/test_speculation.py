"""Speculative decoding's pieces without a model: the prompt-lookup drafter, the
adaptive draft length, the row budget, and verification, whose output must follow
the target's distribution exactly (checked on synthetic distributions)."""

from __future__ import annotations

import numpy as np
import pytest

from parlance.engines.llamacpp.drafting import MAX_DRAFT, DraftLength, NgramDrafter
from parlance.engines.llamacpp.speculation import SpeculativeSettings, Speculator
from parlance.engines.llamacpp.verification import verify
from parlance.engines.metrics import EngineMetrics
from tests.support.statistics import chi_square, critical_value, frequencies, pooled

# -- the drafter ---------------------------------------------------------------------


def test_the_drafter_proposes_what_followed_the_latest_match_of_the_context_end():
    drafter = NgramDrafter([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2])
    # "1 2" occurred twice before; the latest was followed by 3 7 8 1 2
    assert drafter.propose(3) == [3, 7, 8]
    assert drafter.propose(0) == []


def test_the_longest_matching_ngram_wins_over_a_later_shorter_one():
    drafter = NgramDrafter([5, 6, 7, 40, 41, 9, 7, 50, 5, 6, 7])
    # "7" alone last continued with 50; "5 6 7" continued with 40 41
    assert drafter.propose(2) == [40, 41]


def test_a_context_whose_end_never_occurred_before_gets_no_draft():
    assert NgramDrafter([1, 2, 3, 4]).propose(4) == []
    assert NgramDrafter([]).propose(4) == []


def test_generated_tokens_extend_the_index_and_copies_are_independent():
    prompt = [10, 11, 12, 13, 14]
    leader = NgramDrafter(prompt)
    follower = leader.copy()
    leader.sync([10, 11], len(prompt))
    assert leader.propose(3) == [12, 13, 14]
    leader.sync([10, 11], len(prompt))  # nothing new: nothing changes
    assert leader.tokens == [*prompt, 10, 11]
    assert follower.propose(3) == []
    follower.sync([12], len(prompt))
    assert follower.propose(2) == [13, 14]


def test_min_n_bounds_the_shortest_lookup():
    drafter = NgramDrafter([1, 2, 3, 1], min_n=2)
    assert drafter.propose(2) == []
    assert NgramDrafter([1, 2, 3, 1]).propose(2) == [2, 3]


# -- the draft length -----------------------------------------------------------------


def test_the_draft_grows_while_accepted_whole_and_shrinks_to_what_was_accepted():
    length = DraftLength()
    start = length.wanted()
    length.record(start, start)
    assert length.wanted() == min(MAX_DRAFT, start * 2)
    for _ in range(4):
        length.record(length.length, length.length)
    assert length.wanted() == MAX_DRAFT
    length.record(MAX_DRAFT, 2)
    assert length.wanted() == 3
    drafted = start + 4 * MAX_DRAFT + MAX_DRAFT
    assert length.rate == pytest.approx((start + 4 * MAX_DRAFT + 2) / drafted)


def test_drafts_rejected_at_once_make_the_sequence_rest_longer_each_time():
    length = DraftLength()
    rests = []
    for _ in range(2):
        for _ in range(DraftLength.MISSES_TO_REST):
            length.record(max(1, length.wanted()), 0)
        steps = 0
        while length.wanted() == 0:
            steps += 1
        rests.append(steps)
    assert rests == [DraftLength.FIRST_REST, 2 * DraftLength.FIRST_REST]


# -- the row budget -------------------------------------------------------------------


def test_drafts_stay_within_the_step_budget_and_each_sequence_limit():
    metrics = EngineMetrics()
    speculator = Speculator(SpeculativeSettings(step_tokens=8), metrics)
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2]
    a, b, c = speculator.start(speculator.index(prompt), 3)
    drafts = speculator.plan([(a, 2, []), (b, 8, []), (c, 8, [])], rows=3)
    assert len(drafts[0]) <= 2
    assert sum(map(len, drafts)) <= 8 - 3
    assert all(d == [3, 4, 5, 6][:len(d)] for d in drafts)
    assert speculator.plan([(a, 8, [])], rows=8) == [[]]  # a full step: no drafts
    speculator.record(a, 2, 1)
    assert (metrics.speculative_tokens_drafted, metrics.speculative_tokens_accepted) == (2, 1)


def test_speculation_is_on_unless_off():
    assert Speculator(SpeculativeSettings(), EngineMetrics()).enabled
    assert not Speculator(SpeculativeSettings(mode="off"), EngineMetrics()).enabled


# -- verification ---------------------------------------------------------------------


def scripted(tokens):
    calls = []

    def sample(position):
        calls.append(position)
        return tokens[position]

    return sample, calls


def test_greedy_keeps_the_draft_prefix_equal_to_the_targets_picks_plus_one():
    sample, calls = scripted([5, 6, 9, 8])
    assert verify([5, 6, 7], sample) == 2
    assert calls == [0, 1, 2]  # two accepted, then the corrected token


def test_a_draft_accepted_whole_also_yields_the_bonus_token():
    sample, calls = scripted([5, 6, 7, 1])
    assert verify([5, 6, 7], sample) == 3
    assert calls == [0, 1, 2, 3]


def test_a_sequence_that_ends_inside_its_draft_stops_verification_there():
    sample, calls = scripted([5, None, 7])
    assert verify([5, 6, 7], sample) == 1
    assert calls == [0, 1]
    sample, calls = scripted([3])
    assert verify([], sample) == 0
    assert calls == [0]


TARGET = {0: 0.05, 1: 0.4, 2: 0.25, 3: 0.2, 4: 0.1}  # p(token) at every position


def draw(rng: np.random.Generator) -> int:
    return int(rng.choice(list(TARGET), p=list(TARGET.values())))


@pytest.mark.parametrize("drafted", [1, 0])  # a likely and an unlikely draft token
def test_verified_tokens_follow_the_target_distribution_whatever_the_draft(drafted):
    """Rejection sampling with a point-mass draft: the token emitted at the draft's
    first position is distributed as the target's p, and the draft is accepted with
    probability p(draft)."""
    rng = np.random.default_rng(7)
    trials = 4000
    firsts, accepted = [], 0
    for _ in range(trials):
        emitted: list[int] = []

        def sample(_position, out=emitted):
            out.append(draw(rng))
            return out[-1]

        accepted += verify([drafted], sample) > 0
        firsts.append(emitted[0])
    observed, expected = pooled(frequencies(firsts), TARGET, trials)
    assert chi_square(observed, expected) < critical_value(len(expected) - 1)
    p = TARGET[drafted]
    assert abs(accepted / trials - p) < 4 * (p * (1 - p) / trials) ** 0.5


def test_the_second_position_follows_the_target_too():
    """Tokens after an accepted draft token: the pair's joint distribution is the
    target's (independent positions here), whatever was drafted."""
    rng = np.random.default_rng(11)
    trials = 4000
    pairs = []
    for _ in range(trials):
        emitted: list[int] = []

        def sample(_position, out=emitted):
            out.append(draw(rng))
            return out[-1]

        if verify([1, 2], sample) == 0:
            emitted.append(draw(rng))  # the next step samples the position normally
        pairs.append(emitted[0] * 10 + emitted[1])
    joint = {a * 10 + b: pa * pb for a, pa in TARGET.items() for b, pb in TARGET.items()}
    observed, expected = pooled(frequencies(pairs), joint, trials)
    assert chi_square(observed, expected) < critical_value(len(expected) - 1)

"""Speculative decoding's pieces without a model: the prompt-lookup drafter, how
drafts fare by the match they come from, which sequences draft how much for what a
step costs, and verification, whose output must follow the target's distribution
exactly (checked on synthetic distributions)."""

from __future__ import annotations

import numpy as np
import pytest

from parlance.engines.llamacpp.copying import CONFIRM, Copy
from parlance.engines.llamacpp.drafting import Acceptance, NgramDrafter
from parlance.engines.llamacpp.speculation import (
    DEFAULT_SPECULATION,
    IDLE_LOOKS,
    MAX_SKIPPED,
    Candidate,
    SequenceDraft,
    SpeculativeSettings,
    Speculator,
)
from parlance.engines.llamacpp.verification import verify
from parlance.engines.metrics import EngineMetrics
from tests.support.statistics import chi_square, critical_value, frequencies, pooled

# -- the drafter ---------------------------------------------------------------------


def propose(drafter: NgramDrafter, limit: int) -> list[int]:
    """What a copy of the lookup's source drafts: the tokens that followed it."""
    start = drafter.source()
    if start is None:
        return []
    copy = Copy()
    copy.start(start, 0)
    return copy.draft(drafter.tokens, limit)


def test_the_drafter_proposes_what_followed_the_latest_match_of_the_context_end():
    drafter = NgramDrafter([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2])
    # "1 2" occurred twice before; the latest was followed by 3 7 8 1 2
    assert propose(drafter, 3) == [3, 7, 8]
    assert propose(drafter, 0) == []


def test_a_copy_reaching_the_end_of_the_context_repeats_what_it_copied():
    drafter = NgramDrafter([9, 5, 6, 5, 6, 5, 6])  # "5 6" over and over
    assert propose(drafter, 5) == [5, 6, 5, 6, 5]


def test_the_longest_matching_ngram_wins_over_a_later_shorter_one():
    drafter = NgramDrafter([5, 6, 7, 40, 41, 9, 7, 50, 5, 6, 7])
    # "7" alone last continued with 50; "5 6 7" continued with 40 41
    assert propose(drafter, 2) == [40, 41]


def test_a_context_whose_end_never_occurred_before_gets_no_draft():
    assert propose(NgramDrafter([1, 2, 3, 4]), 4) == []
    assert propose(NgramDrafter([]), 4) == []


def test_generated_tokens_extend_the_index_and_copies_are_independent():
    prompt = [10, 11, 12, 13, 14]
    leader = NgramDrafter(prompt)
    follower = leader.copy()
    leader.sync([10, 11], len(prompt))
    assert propose(leader, 3) == [12, 13, 14]
    leader.sync([10, 11], len(prompt))  # nothing new: nothing changes
    assert leader.tokens == [*prompt, 10, 11]
    assert propose(follower, 3) == []
    follower.sync([12], len(prompt))
    assert propose(follower, 2) == [13, 14]


def test_min_n_bounds_the_shortest_lookup():
    drafter = NgramDrafter([1, 2, 3, 1], min_n=2)
    assert propose(drafter, 2) == []
    assert propose(NgramDrafter([1, 2, 3, 1]), 2) == [2, 3]


def test_the_match_length_counts_how_far_back_the_source_agrees_with_the_context():
    drafter = NgramDrafter([7, 1, 2, 3, 4, 9, 9, 2, 3, 4])
    start = drafter.source()
    assert start == 5  # "2 3 4" last ended at index 5
    assert drafter.match_length(start) == 3  # 1 ≠ 9 before it
    assert drafter.match_length(start, cap=2) == 2
    copy = NgramDrafter([5, 6, 7, 8, 9, 1, 5, 6, 7, 8])
    assert copy.match_length(copy.source()) == 4


# -- how drafts fare, by the match they stand on ---------------------------------------


def test_a_token_on_a_longer_match_is_likelier_to_be_accepted():
    acceptance = Acceptance()
    chances = [acceptance.chance(m) for m in (1, 2, 3, 4, 8, 16, 32, 100)]
    assert chances == sorted(chances)
    assert chances[0] < 0.5 < chances[4]


def test_the_expected_tokens_of_a_draft_grow_ever_slower_and_stop_where_negligible():
    acceptance = Acceptance()
    expected = acceptance.expected(32, 20)
    gains = [b - a for a, b in zip(expected, expected[1:], strict=False)]
    assert expected[0] == 0 and len(expected) == 21
    assert all(later <= earlier for earlier, later in zip(gains, gains[1:], strict=False))
    assert gains[0] == pytest.approx(acceptance.chance(32))
    # From a match of one token the second draft token is already a long shot.
    assert len(acceptance.expected(1, 20)) <= 3


def test_accepted_tokens_raise_the_chance_and_a_rejection_lowers_it():
    acceptance = Acceptance()
    before = acceptance.chance(8)
    acceptance.record(8, drafted=4, accepted=4)
    raised = acceptance.chance(8)
    assert raised > before
    acceptance.record(8, drafted=4, accepted=0)
    assert acceptance.chance(8) < raised
    assert acceptance.chance(1) == Acceptance().chance(1)  # no draft stood on that


def test_each_accepted_token_puts_the_next_on_a_longer_match():
    acceptance = Acceptance()
    acceptance.record(3, drafted=6, accepted=2)  # on matches 3, 4 accepted; 5 rejected
    fresh = Acceptance()
    assert acceptance.chance(3) > fresh.chance(3)
    assert acceptance.chance(5) < fresh.chance(5)  # 4 and 5 share a bucket: one hit, one miss
    assert acceptance.chance(16) == fresh.chance(16)


# -- which sequences draft how much ------------------------------------------------------

COPIED = list(range(100, 160))  # a long span the answer copies
CONTEXT = [1, 2, *COPIED, 3, 4]


def candidate(slot: int, generated: list[int], *, limit: int = 64,
              draft: SequenceDraft | None = None, screen=lambda tokens: tokens) -> Candidate:
    state = draft or Speculator(DEFAULT_SPECULATION, EngineMetrics()).start(
        NgramDrafter(CONTEXT), 1)[0]
    return Candidate(slot, state, limit, generated, screen)


def plan(candidates: list[Candidate], room: int = 500, **kw) -> list[list[int]]:
    return Speculator(DEFAULT_SPECULATION, EngineMetrics()).plan(candidates, room, **kw)


def test_a_sequence_copying_a_long_span_drafts_its_next_tokens_the_more_the_longer():
    [early] = plan([candidate(0, COPIED[:10])])  # 10 tokens into the copy
    [later] = plan([candidate(0, COPIED[:40])])  # 40: a match of more than 32
    assert early == COPIED[10:10 + len(early)]
    assert later == COPIED[40:40 + len(later)]
    assert 2 <= len(early) < len(later)


def test_a_short_match_drafts_nothing():
    """One token in common with the context: a draft would cost a row it rarely repays
    (a second row in a step costs as much as the first)."""
    assert plan([candidate(0, [COPIED[0]])]) == [[]]
    assert plan([candidate(0, [])]) == [[]]  # the context's end never occurred before


def test_drafts_stay_within_each_limit_the_room_and_the_grammar():
    assert len(plan([candidate(0, COPIED[:20], limit=5)])[0]) <= 5
    assert len(plan([candidate(0, COPIED[:20])], room=6)[0]) <= 6
    kept = plan([candidate(0, COPIED[:20], screen=lambda tokens: tokens[:3])])[0]
    assert len(kept) <= 3


def test_beside_one_other_sequence_a_likely_draft_is_worth_its_extra_ubatch():
    drafts = plan([candidate(0, COPIED[:20]), candidate(1, [], draft=None)])
    assert drafts[0] and not drafts[1]


def test_in_a_batch_of_eight_a_lone_draft_is_not_worth_its_extra_ubatch():
    """Eight one-row sequences are one cheap ubatch; one sequence drafting alone adds a
    second pass over the weights for fewer tokens than it costs."""
    others = [Candidate(slot, None, 0, [], lambda tokens: tokens) for slot in range(1, 8)]
    assert plan([candidate(0, COPIED[:20]), *others]) == [[]] * 8


def test_a_run_of_sequences_all_copying_drafts_the_same_length_in_one_ubatch():
    drafts = plan([candidate(slot, COPIED[:20]) for slot in range(8)])
    assert len({len(d) for d in drafts}) == 1
    assert drafts[0]
    # With a gap in the slots they are two runs, each evaluated on its own.
    split = plan([candidate(slot, COPIED[:20]) for slot in (0, 1, 2, 3, 5, 6, 7, 8)])
    assert all(split)


def test_a_batch_whose_looks_keep_finding_nothing_is_looked_at_less_often():
    """Free prose over many streams never drafts; looking costs a step's planning each
    time, so after IDLE_LOOKS fruitless looks steps are skipped between looks (at most
    MAX_SKIPPED). A copy that turns up is still found within MAX_SKIPPED + 1 steps, with
    every token since taken in; one stream alone is looked at every step."""
    speculator = Speculator(DEFAULT_SPECULATION, EngineMetrics())
    start = speculator.start
    prose = [start(NgramDrafter(CONTEXT), 1)[0] for _ in range(8)]
    steps, looks = IDLE_LOOKS * (MAX_SKIPPED + 1) * 4, 0
    for step in range(1, steps + 1):
        batch = [Candidate(slot, state, 64, list(range(1000, 1000 + step)), lambda t: t)
                 for slot, state in enumerate(prose)]
        assert speculator.plan(batch, 500) == [[]] * 8
        looks += len(prose[0].drafter.tokens) == len(CONTEXT) + step  # taken in: a look
    assert steps / (MAX_SKIPPED + 1) <= looks < steps / 2
    # a lone stream is never skipped, whatever came before
    assert speculator.plan([candidate(0, COPIED[:20])], 500)[0]
    copying = [start(NgramDrafter(CONTEXT), 1)[0] for _ in range(8)]
    waited = 0
    while not any(drafts := speculator.plan(
            [Candidate(slot, state, 64, COPIED[:20 + waited], lambda t: t)
             for slot, state in enumerate(copying)], 500)):
        waited += 1
    assert waited <= MAX_SKIPPED
    assert drafts[0] == COPIED[20 + waited:20 + waited + len(drafts[0])]


def test_after_the_model_departs_from_a_copy_the_copy_resumes_where_it_broke_off():
    """A name changed in copied code: the draft is rejected where the model writes its
    own word; once its next tokens (`CONFIRM`) are found just past that point in the
    source, the copy goes on (a match of those tokens alone would draft nothing)."""
    speculator = Speculator(DEFAULT_SPECULATION, EngineMetrics())
    copying = candidate(0, COPIED[:20])
    [draft] = speculator.plan([copying], 500)
    assert len(draft) > 4 and copying.state is not None
    speculator.record(copying.state, len(draft), 3)  # COPIED[23] rejected: 999 instead
    departed = [*COPIED[:23], 999, *COPIED[24:24 + CONFIRM]]
    copying.generated = departed
    [resumed] = speculator.plan([copying], 500)
    assert resumed and resumed == COPIED[24 + CONFIRM:24 + CONFIRM + len(resumed)]
    assert plan([candidate(0, departed)]) == [[]]  # no rejection there: nothing to resume


# A function of 150 tokens that says a two-token name (7 8) five times.
FUNCTION = [t for k in range(5) for t in (*range(200 + 30 * k, 228 + 30 * k), 7, 8)]


def copied(context: list[int], answer: list[int]) -> tuple[int, int, int]:
    """Decode steps, draft tokens and kept ones when a sequence whose context is
    `context` writes `answer` (greedy: a draft keeps its prefix equal to the answer;
    the answer's first token comes from the prompt's step)."""
    speculator = Speculator(DEFAULT_SPECULATION, EngineMetrics())
    state = speculator.start(NgramDrafter(context), 1)[0]
    generated = answer[:1]
    steps = drafted = kept = 0
    while len(generated) < len(answer):
        limit = len(answer) - len(generated) - 1
        [draft] = speculator.plan([Candidate(0, state, limit, generated, lambda t: t)], 500)
        truth = answer[len(generated):]
        accepted = 0
        while accepted < min(len(draft), len(truth)) and draft[accepted] == truth[accepted]:
            accepted += 1
        generated = generated + truth[:accepted + 1]
        if draft:
            speculator.record(state, len(draft), accepted)
        steps, drafted, kept = steps + 1, drafted + len(draft), kept + accepted
    return steps, drafted, kept


def test_a_long_copy_is_drafted_in_a_few_long_steps():
    steps, drafted, kept = copied([1, *FUNCTION, 2], FUNCTION)
    assert steps <= len(FUNCTION) // 8
    assert kept >= 0.8 * drafted


def test_a_name_the_model_changes_is_drafted_changed_wherever_the_source_says_it():
    """The first time the model writes its own name the copy breaks; the source picks
    up just past the old name (a step for the departure, one for each token that
    confirms it), and from then on drafts say the new name: the four repetitions cost
    no step of their own. The request names the new name (a lookup
    of it lands there, on a short match)."""
    renamed = [99 if t == 7 else t for t in FUNCTION if t != 8]
    plain_steps, _, _ = copied([1, *FUNCTION, 2], FUNCTION)
    steps, drafted, kept = copied([1, 7, 8, 3, 99, 4, *FUNCTION, 2], renamed)
    assert steps <= plain_steps + 1 + CONFIRM
    assert drafted - kept <= 2 * 32  # one draft broken by the first rename, at most two


def test_what_a_draft_kept_is_recorded_for_the_sequence_and_the_metrics():
    metrics = EngineMetrics()
    speculator = Speculator(DEFAULT_SPECULATION, metrics)
    copying = candidate(0, COPIED[:20])
    speculator.plan([copying], 500)
    assert copying.state is not None
    before = copying.state.acceptance.chance(copying.state.match)
    speculator.record(copying.state, 6, 6)
    assert copying.state.acceptance.chance(copying.state.match) > before
    assert (metrics.speculative_tokens_drafted, metrics.speculative_tokens_accepted) == (6, 6)


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

"""What Claude Code and Codex send (recorded in `bench/sessions/`) keeps its prefix from
one request to the next once SmolLM2's template renders it: no per-request value (a
billing line, an id, a timestamp) may end the prefix a cache reuses."""

from __future__ import annotations

import pytest

from tests.support.agent_sessions import AGENTS, load_session, rendered_tokens
from tests.support.real_engine import shared_engine

pytestmark = pytest.mark.model


def shared(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


@pytest.mark.parametrize("agent", AGENTS)
def test_each_turn_starts_with_the_whole_previous_prompt(agent):
    requests = load_session(agent)
    tokens = rendered_tokens(shared_engine(), requests)
    first_session = [t for r, t in zip(requests, tokens, strict=True) if r["session"] == 0]
    assert len(first_session) == 3
    for before, now in zip(first_session, first_session[1:], strict=False):
        assert len(now) > len(before) and now[:len(before)] == before


@pytest.mark.parametrize("agent", AGENTS)
def test_a_new_session_shares_the_instructions_and_tools(agent):
    requests = load_session(agent)
    tokens = rendered_tokens(shared_engine(), requests)
    first = tokens[0]
    [new] = [t for r, t in zip(requests, tokens, strict=True) if r["session"] == 1]
    # They part at the user's first words; Claude Code sends ~1,500 tokens of its own
    # after them (its sub-agents), Codex a few.
    assert shared(first, new) >= 0.9 * len(first)

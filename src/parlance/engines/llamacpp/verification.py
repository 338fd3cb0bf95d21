"""Verifying a draft against the target model's own choices.

The draft is a point mass: one proposed token per position, no probabilities.
Speculative rejection sampling with such a draft accepts token x with probability
p(x) under the target's distribution at that position, and otherwise samples
from p with x removed and renormalised. Drawing y ~ p and keeping x exactly when
y == x does the same: P(keep) = p(x), and a y != x is distributed as p(y) / (1 -
p(x)). So verification samples each position with the sequence's own sampler
(temperature, top-k/p, penalties, grammar: the very distribution it samples from
without speculation, in the same order, drawing its random numbers one per
emitted token), and stops at the first token that differs from the draft. Greedy
is the case p = one-hot at the argmax: the longest prefix of the draft equal to
the argmax at each position, plus the one corrected (or bonus) token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def verify(draft: Sequence[int], sample: Callable[[int], int | None]) -> int:
    """How many draft tokens were accepted. `sample(i)` draws the target's token at
    draft position i (i = 0: the position after the token already decoded; each
    accepted draft token is then decoded context for the next), or None when the
    sequence ended there. It is called once per emitted token: accepted + 1 times,
    or fewer when the sequence ends."""
    accepted = 0
    while True:
        token = sample(accepted)
        if token is None or accepted == len(draft) or token != draft[accepted]:
            return accepted
        accepted += 1

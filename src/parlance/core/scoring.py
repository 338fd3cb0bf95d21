"""Scoring continuations: how likely a model finds each of a few given answers to a
prompt, without generating. Decisions (a probability per label) and rerank (an
instruct model's yes/no) are built on it.

A continuation is scored by teacher forcing: the sum of the log-probabilities of its
tokens, each given the prompt and the continuation's tokens before it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from parlance.core.request import GenerationRequest


@dataclass(frozen=True, slots=True)
class ScoreRequest:
    """`generation.prompts[i]` is scored against `continuations[i]` (the prompt rendered
    as a generation would render it: a chat prompt through the model's template with
    its generation prompt, so a continuation is the start of the answer)."""

    generation: GenerationRequest
    continuations: tuple[tuple[str, ...], ...]
    param: str = "questions"  # the request parameter errors about the prompts name


@dataclass(frozen=True, slots=True)
class PromptScores:
    logprobs: tuple[float, ...]  # one per continuation: the sum over its tokens
    prompt_tokens: int  # the prompt's tokens
    cached_tokens: int  # of which found already evaluated


@dataclass(frozen=True, slots=True)
class Scores:
    prompts: tuple[PromptScores, ...]

    @property
    def prompt_tokens(self) -> int:
        return sum(p.prompt_tokens for p in self.prompts)

    @property
    def cached_tokens(self) -> int:
        return sum(p.cached_tokens for p in self.prompts)


def probabilities(logprobs: Sequence[float]) -> list[float]:
    """The continuations' log-probabilities normalised over them alone (softmax), so
    they sum to 1 whatever mass the model put elsewhere."""
    peak = max(logprobs)
    if peak == -math.inf:  # no continuation is possible at all: no preference
        return [1.0 / len(logprobs)] * len(logprobs)
    weights = [math.exp(x - peak) for x in logprobs]
    total = math.fsum(weights)
    return [w / total for w in weights]

"""Speculative decoding inside the batching scheduler: which sequences draft how
many tokens this step, and what became of their drafts.

A draft rides in the same `llama_decode` as every other sequence's token, one
batch row (with logits) per drafted token, right after the sequence's pending
token; the scheduler verifies it (verification.py) and removes the rejected
cells. On a CPU a decode step costs little more for a few extra rows while the
batch is small (the weights are read once per step either way) and about one
token's work per row once it is large, where a rejected row is pure loss: drafts
are given out only up to `step_tokens` rows in all, to the sequences whose drafts
fared best first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from parlance.engines.llamacpp.drafting import DraftLength, NgramDrafter
from parlance.engines.metrics import EngineMetrics

SpeculativeMode = Literal["ngram", "off"]
SPECULATIVE_MODES: tuple[SpeculativeMode, ...] = ("ngram", "off")
# Rows of one decode step (every sequence's token plus the drafts) up to which drafts
# are added. bench/speculative.py measures what a step of this many rows costs
# against one; re-tune it there on the target machine.
STEP_TOKENS = 16


@dataclass(frozen=True, slots=True)
class SpeculativeSettings:
    mode: SpeculativeMode = "ngram"
    step_tokens: int = STEP_TOKENS

    @property
    def enabled(self) -> bool:
        return self.mode != "off"


NO_SPECULATION = SpeculativeSettings(mode="off")
DEFAULT_SPECULATION = SpeculativeSettings()


class SequenceDraft:
    """One sequence's drafting state: its context's n-gram index and draft length."""

    __slots__ = ("drafter", "length", "prompt_length")

    def __init__(self, drafter: NgramDrafter, prompt_length: int) -> None:
        self.drafter = drafter
        self.length = DraftLength()
        self.prompt_length = prompt_length


class Speculator:
    def __init__(self, settings: SpeculativeSettings, metrics: EngineMetrics) -> None:
        self.settings = settings
        self.metrics = metrics

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

    def plan(self, candidates: list[tuple[SequenceDraft, int, list[int]]],
             rows: int) -> list[list[int]]:
        """The draft of each candidate (its state, the most it may draft, the tokens it
        generated so far), within this step's row budget; `rows` are the tokens the
        step decodes anyway."""
        budget = self.settings.step_tokens - rows
        drafts: list[list[int]] = [[] for _ in candidates]
        if budget <= 0:
            return drafts
        order = sorted(range(len(candidates)), key=lambda i: -candidates[i][0].length.rate)
        for i in order:
            state, limit, generated = candidates[i]
            want = min(limit, budget, state.length.wanted())
            if want <= 0:
                continue
            state.drafter.sync(generated, state.prompt_length)
            drafts[i] = state.drafter.propose(want)
            budget -= len(drafts[i])
            if budget <= 0:
                break
        return drafts

    def record(self, state: SequenceDraft, drafted: int, accepted: int) -> None:
        state.length.record(drafted, accepted)
        self.metrics.speculative_tokens_drafted += drafted
        self.metrics.speculative_tokens_accepted += accepted

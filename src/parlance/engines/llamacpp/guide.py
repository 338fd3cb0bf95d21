"""How one request's output is parsed and constrained (`GuidePlan`), and the
state of that for one choice (`ChoiceGuide`).

- The `OutputParser` turns text into content, reasoning and tool-call events.
- A forced grammar (`response_format`, `tool_choice` required or named) constrains
  from the first token, or from the end of reasoning when the prompt opened it.
- A region grammar (`tool_choice: auto`) engages lazily: when the model writes a
  call marker, the text after it is fed to a fresh copy of the grammar and every
  following token is constrained until the call region is complete.
- A grammar that breaks on a token it allowed (llguidance hit one of its limits) is
  never dropped for unconstrained text: the choice reports it (`broken`), naming the
  client's parameter, and the engine fails the request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import llguidance
import numpy as np

from parlance.core.errors import InvalidRequest
from parlance.engines.llamacpp.constraint import TokenConstraint
from parlance.engines.parsing.output import Mode, OutputParser
from parlance.engines.parsing.syntax import ReasoningMarkers, ToolSyntax

log = logging.getLogger("parlance.engine")


@dataclass(frozen=True, slots=True)
class GuidePlan:
    syntax: ToolSyntax | None = None
    reasoning: ReasoningMarkers | None = None
    tool_names: frozenset[str] = frozenset()
    freeform: frozenset[str] = frozenset()  # tools that take raw text
    start_in_reasoning: bool = False
    forced: llguidance.LLMatcher | None = None
    region: llguidance.LLMatcher | None = None
    tokenizer: llguidance.LLTokenizer | None = None
    n_vocab: int = 0
    # After this many reasoning tokens the engine writes `reasoning_end` (the end marker's
    # tokens) itself, so the answer follows (Anthropic's `thinking.budget_tokens`).
    reasoning_budget: int | None = None
    reasoning_end: tuple[int, ...] = ()
    forced_param: str = "tools"  # the client's parameter the forced grammar comes from
    markup: tuple[str, ...] = ()  # the format's headers, dropped from content (harmony)
    header_close: str = ""  # a message's header runs from markup to this (harmony's)
    schemas: Mapping[str, Any] = field(default_factory=dict)  # tool -> parameters
    spelled: frozenset[int] = frozenset()  # special tokens the parser reads as markers
    # the family's turn-ending tokens (harmony's <|call|>, Llama's <|eom_id|>), stopped on
    # even where the GGUF does not mark them end-of-generation
    stop_tokens: frozenset[int] = frozenset()

    @property
    def needed(self) -> bool:
        return bool(self.syntax or self.reasoning or self.forced)

    def for_choice(self, index: int) -> ChoiceGuide:
        return ChoiceGuide(self, index)


class ChoiceGuide:
    def __init__(self, plan: GuidePlan, index: int) -> None:
        self.plan = plan
        self.parser = OutputParser(index, syntax=plan.syntax, reasoning=plan.reasoning,
                                   tool_names=plan.tool_names, freeform=plan.freeform,
                                   start_in_reasoning=plan.start_in_reasoning,
                                   markup=plan.markup, header_close=plan.header_close,
                                   schemas=plan.schemas)
        self._active: TokenConstraint | None = None
        self._forced_active = False
        self.broken: InvalidRequest | None = None  # the active grammar broke
        self._tail = ""  # raw text not yet searched for a marker
        self._output_started = False
        # A forced grammar starts with the output, or after the reasoning the prompt opened.
        self._forced_waits = plan.forced is not None and self.parser.mode is Mode.REASONING
        if plan.forced is not None and not self._forced_waits:
            self._engage(plan.forced, "", forced=True)

    @property
    def constrained(self) -> bool:
        """A grammar masks the next token."""
        return self._active is not None

    def mask(self, logits: np.ndarray) -> None:
        """Forbid, in this logits row, every token the active grammar rejects. A grammar
        that allows no token at all is broken: the choice must not sample on and end
        as if it had finished (it would pick the end of the text)."""
        active = self._active
        if active is not None and not active.apply(logits):
            self._active = None
            self.broken = self._dead_end()

    def _dead_end(self) -> InvalidRequest:
        param = self.plan.forced_param if self._forced_active else "tools"
        log.warning("a grammar allowed no token mid-answer (%s)", param)
        return InvalidRequest("The output could not be kept to the request's schema: its "
                              "grammar allows no next token (does the schema admit any "
                              "value at all?).", param=param, code="invalid_schema")

    def allows(self, token: int) -> bool:
        return self._active is None or self._active.allows(token)

    def valid_prefix(self, tokens: list[int]) -> int:
        """How many of `tokens`, in order, the active grammar accepts from here (all of
        them when none is active; the grammar's state does not change)."""
        return len(tokens) if self._active is None else self._active.valid_prefix(tokens)

    def over_budget(self, reasoning_tokens: int) -> bool:
        """The choice is still reasoning after its budget of reasoning tokens."""
        budget = self.plan.reasoning_budget
        return (budget is not None and reasoning_tokens >= budget
                and self.parser.mode is Mode.REASONING)

    def accept(self, token: int, text: str) -> bool:
        """Follow a sampled token and its text; True once a forced grammar is complete."""
        active = self._active
        if active is None:
            self._watch(text)
            return False
        active.accept(token)
        if active.failed:
            self._active = None  # never mask with a broken grammar, nor go on without it
            self.broken = self._broken(active)
        elif active.stopped:
            if self._forced_active:
                return True
            self._active = None
        return False

    def _broken(self, active: TokenConstraint) -> InvalidRequest:
        param = self.plan.forced_param if self._forced_active else "tools"
        problem = active.error.splitlines()[0] if active.error else "unknown"
        log.warning("a grammar broke mid-answer (%s): %s", param, problem)
        return InvalidRequest("The output could not be kept to the request's schema: the "
                              f"grammar engine failed on it mid-answer ({problem}).",
                              param=param, code="invalid_schema")

    def _watch(self, text: str) -> None:
        """Find, in the raw text, what engages a grammar: the end of the reasoning
        (a forced grammar waiting for it) or a call marker (the region grammar)."""
        plan = self.plan
        self._tail += text
        if self._forced_waits:
            close = plan.reasoning.close  # type: ignore[union-attr]
            at = self._tail.find(close)
            if at < 0:
                self._tail = _keep_end(self._tail, len(close) - 1)
                return
            self._engage(plan.forced, self._tail[at + len(close):], forced=True)  # type: ignore[arg-type]
            self._tail = ""
            return
        syntax = plan.syntax
        if plan.region is None or syntax is None:
            return
        if syntax.bare_json and not self._output_started:
            stripped = self._tail.lstrip()
            if stripped.startswith("{"):
                self._engage(plan.region, stripped, forced=False)
                self._tail = ""
                return
            self._output_started = bool(stripped)
        at = self._tail.find(syntax.open)
        if at >= 0:
            self._engage(plan.region, self._tail[at + len(syntax.open):], forced=False)
            self._tail = ""
            return
        self._tail = _keep_end(self._tail, len(syntax.open) - 1)

    def _engage(self, template: llguidance.LLMatcher, text: str, *, forced: bool) -> None:
        plan = self.plan
        constraint = TokenConstraint(template.deep_copy(), plan.tokenizer,  # type: ignore[arg-type]
                                     plan.n_vocab)
        self._forced_waits = False
        if constraint.accept_text(text) and not constraint.failed:
            self._active, self._forced_active = constraint, forced


def _keep_end(text: str, size: int) -> str:
    return text[-size:] if size > 0 else ""

"""The contract between a decisions dialect (OpenAI `/v1/decisions`, System One
`/v1/systemone`) and the one decisions endpoint (`server/endpoints/decisions.py`).
A decision is one answer, not a stream: the endpoint does the I/O (body, model,
engine) and the dialect reads the body and shapes the answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from parlance.core.decisions import Answer, Decision
from parlance.core.errors import ParlanceError
from parlance.core.scoring import Scores
from parlance.dialects.base import ErrorResponse


@dataclass(frozen=True, slots=True)
class DecisionCall:
    decision: Decision
    keys: tuple[str | None, ...]  # each question's name or id, as the client gave it


@dataclass(frozen=True, slots=True)
class Decided:
    model: str  # the id the client asked for (aliases are echoed as sent)
    answers: tuple[Answer, ...]  # in question order
    scores: Scores  # token counts

    @property
    def input_tokens(self) -> int:
        """Prompt tokens, the context shared by the questions counted once (the first
        question's prompt whole, then what each later one adds), cold or warm."""
        prompts = self.scores.prompts
        if not prompts:
            return 0
        return prompts[0].prompt_tokens + sum(p.prompt_tokens - p.cached_tokens
                                              for p in prompts[1:])


C = TypeVar("C", bound=DecisionCall)


class DecisionDialect(Protocol[C]):
    @property
    def body_model(self) -> type[BaseModel]: ...

    def parse(self, body: Any) -> C: ...

    def render(self, call: C, decided: Decided) -> dict[str, Any]: ...

    def render_error(self, error: ParlanceError) -> ErrorResponse: ...

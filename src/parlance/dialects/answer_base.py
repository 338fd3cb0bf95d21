"""The contract between a dialect whose calls the engine answers at once, without
generating, and the one endpoint that serves them (`server/endpoints/engine_answers.py`):
decisions (OpenAI `/v1/decisions`, System One `/v1/systemone`), rerank and
llama-server's token tools (`/tokenize`, `/detokenize`, `/apply-template`). The
dialect reads the body into an `Asked` (the model and what the engine is asked) and
shapes the answer; the endpoint does the I/O (body, model, engine)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from parlance.core.decisions import Answer, Decision
from parlance.core.errors import ParlanceError
from parlance.core.request import GenerationRequest
from parlance.core.rerank import RerankRequest
from parlance.core.scoring import Scores
from parlance.core.tokens import DetokenizeRequest, TokenizeRequest
from parlance.dialects.base import ErrorResponse, Incoming


@dataclass(frozen=True, slots=True)
class RenderPrompt:
    """The first prompt of a generation request as the engine would evaluate it."""

    request: GenerationRequest


# What the engine is asked; the answer of each: Decided, tuple[Token, ...], str, str,
# Reranked.
Ask = Decision | TokenizeRequest | DetokenizeRequest | RenderPrompt | RerankRequest


@dataclass(frozen=True, slots=True)
class Asked:
    model: str | None  # none: the default model
    ask: Ask
    # A name no served model has means the default model (System One's clients send
    # "jev-latest"; llama-server ignores the field) instead of a 404.
    any_model_name: bool = False


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


C = TypeVar("C")


class Answering(Protocol[C]):
    @property
    def body_model(self) -> type[BaseModel]: ...

    def parse(self, incoming: Incoming) -> C: ...

    def asked(self, call: C) -> Asked: ...

    def render(self, call: C, answer: Any) -> dict[str, Any]: ...

    def render_error(self, error: ParlanceError) -> ErrorResponse: ...

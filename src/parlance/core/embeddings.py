"""The neutral embeddings request and result every embeddings dialect maps to.

Embeddings are not a generation: no stream, no events, one answer. The engine pools
each input into one vector (the model's pooling) and normalizes it as asked.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


class Normalize(Enum):
    """What length each vector has when it leaves the engine."""

    UNIT = "unit"  # L2-normalized: what OpenAI's and Ollama's /api/embed clients expect
    # The model's own convention: raw for the models whose sentence-transformers pipeline
    # has no Normalize step (nomic-bert, BERT exports that say so), unit for the others.
    # Ollama's legacy /api/embeddings returns this.
    NATIVE = "native"


@dataclass(frozen=True, slots=True)
class EmbeddingInput:
    """One text to embed, or token ids the client already tokenized."""

    text: str | None = None
    token_ids: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    model: str | None
    inputs: tuple[EmbeddingInput, ...]
    # True: an input longer than the model takes is cut to fit (Ollama's default);
    # False: it is refused with ContextOverflow naming `param` (OpenAI).
    truncate: bool = False
    normalize: Normalize = Normalize.UNIT
    # The vector length the client requires: refused unless the model's vectors have it.
    dimensions: int | None = None
    param: str = "input"  # the request parameter errors about the inputs name


@dataclass(frozen=True, slots=True)
class Embeddings:
    vectors: tuple[list[float], ...]  # one per input, in order
    prompt_tokens: int  # tokens evaluated, after any truncation


def unit(vector: Sequence[float]) -> list[float]:
    """The vector scaled to length 1 (a zero vector stays zero)."""
    norm = math.sqrt(math.fsum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else list(vector)


def shortened(vector: Sequence[float], dimensions: int) -> list[float]:
    """The first `dimensions` values, scaled to length 1 again: how Matryoshka-trained
    models are shortened, and what Ollama does with `dimensions` for any model."""
    return unit(vector[:dimensions])

"""How many tokens a sequence may generate: one rule for every engine and dialect.

`max_tokens` is a ceiling, as llama-server, Ollama and LM Studio treat it: when the
prompt leaves less room in the context than it asks for, the sequence generates until
the context is full and finishes with `length` (agent CLIs send the model's advertised
output limit, 32k, whatever the prompt). Only a prompt that leaves no room for a single
token is refused. `strict` (`--strict-max-tokens`) refuses, as OpenAI does, any request
whose prompt and `max_tokens` together do not fit."""

from __future__ import annotations

from parlance.core.errors import ContextOverflow
from parlance.core.request import GenerationRequest


def output_budget(prompt_tokens: int, request: GenerationRequest, context_length: int, *,
                  strict: bool = False) -> int:
    """The tokens a sequence of `request` with this prompt may generate (ContextOverflow:
    none); `strict`: the engine's setting (the request may be strict by itself)."""
    max_tokens = request.max_tokens
    strict = strict or request.strict_max_tokens
    room = context_length - prompt_tokens
    if room < 1 or (strict and max_tokens is not None and max_tokens > room):
        raise context_overflow(context_length, prompt_tokens, max_tokens if strict else None)
    return room if max_tokens is None else min(max_tokens, room)


def context_overflow(context_length: int, prompt_tokens: int, max_tokens: int | None = None,
                     *, at_least: bool = False) -> ContextOverflow:
    """The refusal of a prompt (with `max_tokens`: of the two together) that does not
    fit; `at_least`: the prompt was counted without tokenizing it, from below."""
    needed = prompt_tokens + (max_tokens if max_tokens is not None else 1)
    detail = f" + {max_tokens} max tokens" if max_tokens is not None else ""
    some = "at least " if at_least else ""
    return ContextOverflow(
        f"This model's maximum context length is {context_length} tokens, but the request "
        f"needs {some}{needed} ({some}{prompt_tokens} prompt tokens{detail}).",
        param="max_tokens" if max_tokens is not None else "messages",
        code="context_length_exceeded",
    )

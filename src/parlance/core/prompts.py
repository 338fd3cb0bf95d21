"""What an engine tells the handler about each prompt it started: a neutral value, so
that dialects report it without knowing the engine seam."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PromptInfo:
    """The prompt as the engine saw it, for dialects that report offsets or echo, and
    its token ids (empty when the engine has none), which Ollama's `context` returns."""

    text: str
    n_tokens: int
    token_ids: tuple[int, ...] = ()

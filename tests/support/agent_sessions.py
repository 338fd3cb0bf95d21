"""The recorded agent sessions in `bench/sessions/` (see its README): loaded, adapted to
SmolLM2, and rendered to the tokens Parlance's llama.cpp engine would evaluate. Shared by
`bench/agent_turns.py` and the test that each recorded turn keeps the previous prefix."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

from parlance.dialects.anthropic import AnthropicMessages
from parlance.dialects.base import Incoming
from parlance.dialects.openai.responses import OpenAIResponses
from parlance.engines.llamacpp import LlamaCppEngine
from parlance.models.registry import DEFAULT_MODEL

SESSIONS = Path(__file__).resolve().parents[2] / "bench" / "sessions"
AGENTS = ("claude-code", "codex")


def load_session(agent: str) -> list[dict[str, Any]]:
    """Each request: `session` (0, then 1 for the new session), `path`, `headers`, `body`."""
    with gzip.open(SESSIONS / f"{agent}.json.gz", "rt") as f:
        return list(json.load(f)["requests"])


def replayed(request: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """The recorded body for SmolLM2: its name, greedy, `max_tokens` new tokens."""
    body = copy.deepcopy(request["body"])
    body.update(model=DEFAULT_MODEL, stream=True, temperature=0)
    if request["path"].startswith("/v1/messages"):
        body["max_tokens"] = max_tokens
    else:
        body["max_output_tokens"] = max_tokens
    return body


def rendered_tokens(engine: LlamaCppEngine, requests: list[dict[str, Any]]) -> list[list[int]]:
    """Each request as its dialect parses it and the engine renders and tokenizes it
    (nothing is evaluated)."""
    out = []
    for request in requests:
        dialect = (AnthropicMessages() if request["path"].startswith("/v1/messages")
                   else OpenAIResponses())
        generation = dialect.parse(Incoming(replayed(request, 16))).request
        prompt = generation.prompts[0]
        preparation = engine.preparation
        out.append(preparation.tokens(prompt, preparation.chat_text(prompt, generation),
                                      generation, bounded=False))
    return out

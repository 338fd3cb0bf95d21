"""Gemini's Model resource (`GET /v1beta/models`, `GET /v1beta/models/{model}`):
`name` is `models/<id>`; `supportedGenerationMethods` says which calls the model
answers (an embedding model only embeds)."""

from __future__ import annotations

from typing import Any

from parlance.core.errors import ParlanceError
from parlance.core.model_facts import ModelFacts
from parlance.dialects.base import ErrorResponse
from parlance.dialects.gemini import errors

GENERATES = ["generateContent", "streamGenerateContent", "countTokens"]
EMBEDS = ["embedContent", "batchEmbedContents", "countTokens"]


def model_object(model_id: str, facts: ModelFacts) -> dict[str, Any]:
    context = facts.defaults.get("ctx_size") or (
        facts.file.context_length if facts.file else None) or 0
    out: dict[str, Any] = {
        "name": f"models/{model_id}", "baseModelId": model_id, "version": "parlance",
        "displayName": model_id,
        "description": f"{model_id}, served locally by Parlance.",
        "inputTokenLimit": context, "outputTokenLimit": context,
        "supportedGenerationMethods": (EMBEDS if facts.capabilities.embeds_only
                                       else GENERATES),
    }
    defaults = facts.defaults
    for key, field in (("temperature", "temperature"), ("top_p", "topP"), ("top_k", "topK")):
        if isinstance(defaults.get(key), int | float):
            out[field] = defaults[key]
    if not facts.capabilities.embeds_only:
        out["thinking"] = facts.capabilities.thinks
    return out


def model_list(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """Every model on one page (no `nextPageToken`)."""
    return {"models": objects}


class GeminiModels:
    """`GET /v1beta/models` and `GET /v1beta/models/{model}`."""

    def model_object(self, model_id: str, facts: ModelFacts) -> dict[str, Any]:
        return model_object(model_id, facts)

    def model_list(self, objects: list[dict[str, Any]]) -> dict[str, Any]:
        return model_list(objects)

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return errors.render_error(error)

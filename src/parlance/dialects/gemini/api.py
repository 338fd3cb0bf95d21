"""Gemini's API as the server serves it: the model methods under `/v1beta` and `/v1`
(`models/{model}:generateContent`, `:streamGenerateContent`, `:countTokens`,
`:embedContent`, `:batchEmbedContents`) and the model list under `/v1beta` (`GET
/v1/models` is OpenAI's, and Gemini's for a request with Google's client headers).
Keys come in `x-goog-api-key` (what the SDKs and Gemini CLI send) or `?key=`."""

from __future__ import annotations

import re

from parlance.dialects import api
from parlance.dialects.api import ModelRoutes, Routes, Services
from parlance.dialects.gemini import CountTokens, GenerateContent, errors
from parlance.dialects.gemini.embed import BatchEmbedContents, EmbedContent
from parlance.dialects.gemini.models import GeminiModels

VERSIONS = ("/v1beta", "/v1")
METHODS = ("generateContent", "streamGenerateContent", "countTokens", "embedContent",
           "batchEmbedContents")
# Gemini's v1 methods, inside OpenAI's /v1: Gemini's envelope answers these paths
V1_METHODS = re.compile(r"/v1/models/[^/]+:(?:" + "|".join(METHODS) + ")")

# What the SDKs (and Gemini CLI through them) send with every request: a `GET
# /v1/models` carrying either is a Gemini client's (the Python SDK asks `v1`)
CLIENT_HEADERS = ("x-goog-api-client", "x-goog-api-key")

_CONTENTS = [{"role": "user", "parts": [{"text": "Hello!"}]}]


def routes(services: Services) -> Routes:
    generate, stream, count = GenerateContent(), GenerateContent(streaming=True), CountTokens()
    embed, batch = EmbedContent(), BatchEmbedContents()
    model = "{model}"
    return Routes(
        generation=tuple(pair for v in VERSIONS for pair in (
            (f"{v}/models/{model}:generateContent", generate),
            (f"{v}/models/{model}:streamGenerateContent", stream))),
        counting=tuple((f"{v}/models/{model}:countTokens", count) for v in VERSIONS),
        embeddings=tuple(pair for v in VERSIONS for pair in (
            (f"{v}/models/{model}:embedContent", embed),
            (f"{v}/models/{model}:batchEmbedContents", batch))),
        models=(ModelRoutes("/v1beta/models", "/v1beta/models/{model}", GeminiModels(),
                            headers=CLIENT_HEADERS),))


API = api.API(
    name="Gemini", package="gemini", prefixes=("/v1beta",), pattern=V1_METHODS,
    render_error=errors.render_error, routes=routes,
    key_headers=("x-goog-api-key",), key_query="key",
    examples={
        GenerateContent.body_model: {"contents": _CONTENTS},
        CountTokens.body_model: {"contents": _CONTENTS},
        EmbedContent.body_model: {"content": {"parts": [{"text": "Hello!"}]}},
        BatchEmbedContents.body_model: {"requests": [{"content": {"parts": [
            {"text": "Hello!"}]}}]},
    })

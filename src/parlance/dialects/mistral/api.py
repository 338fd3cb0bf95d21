"""Mistral's fill-in-the-middle as the server serves it: `/v1/fim/completions` (and
`/fim/completions`), in Mistral's error envelope."""

from __future__ import annotations

from parlance.dialects import api
from parlance.dialects.api import Routes, Services, with_unversioned
from parlance.dialects.mistral import PATHS, MistralFIM, render_error


def routes(services: Services) -> Routes:
    return Routes(generation=with_unversioned("/v1/fim/completions", MistralFIM()))


API = api.API(
    name="Mistral", package="mistral", prefixes=(*PATHS, "/fim"), render_error=render_error,
    routes=routes,
    examples={MistralFIM.body_model: {"model": "my-model", "prompt": "def fibonacci(n):",
                                      "suffix": "return result", "max_tokens": 64,
                                      "stop": ["\n\n"]}})

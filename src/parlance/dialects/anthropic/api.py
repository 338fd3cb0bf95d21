"""Anthropic's Messages API as the server serves it: `/v1/messages` and its token
count, under `/v1` and without it; keys also in `x-api-key`."""

from __future__ import annotations

from parlance.dialects import api
from parlance.dialects.anthropic import PATHS, AnthropicCount, AnthropicMessages, errors
from parlance.dialects.api import Routes, Services, with_unversioned


def routes(services: Services) -> Routes:
    return Routes(generation=with_unversioned("/v1/messages", AnthropicMessages()),
                  counting=with_unversioned("/v1/messages/count_tokens", AnthropicCount()))


API = api.API(
    name="Anthropic", package="anthropic", prefixes=PATHS, render_error=errors.render_error,
    routes=routes, key_headers=("x-api-key",),
    examples={AnthropicMessages.body_model: {
        "model": "my-model", "max_tokens": 64,
        "messages": [{"role": "user", "content": "Hello!"}]}})

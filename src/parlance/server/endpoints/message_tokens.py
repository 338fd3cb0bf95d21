"""`POST /v1/messages/count_tokens`: `{"input_tokens": N}`, counted as `start` would
evaluate the request (`generation.counting.prompt_tokens`, its `mcp_servers`' tools
included)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from parlance.dialects.anthropic import AnthropicMessages, render_error
from parlance.models.served import ServedModels
from parlance.server.body.reader import read_json
from parlance.server.calls.prompt_tokens import prompt_tokens
from parlance.server.endpoints.answering import answering
from parlance.server.settings import ServerSettings


class MessageTokens:
    def __init__(self, models: ServedModels, settings: ServerSettings,
                 dialect: AnthropicMessages) -> None:
        self.models = models
        self.settings = settings
        self.dialect = dialect
        self.count = answering(self._count, settings.api_keys, render_error)

    async def _count(self, request: Request) -> dict[str, Any]:
        call = await read_json(request, self.settings.max_body_bytes,
                               self.dialect.parse_for_count)
        return {"input_tokens": await prompt_tokens(request, self.models, self.settings, call)}

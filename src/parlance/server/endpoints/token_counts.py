"""The one token-counting endpoint behind every API's (Anthropic's `count_tokens`,
Gemini's `:countTokens`): the body parsed as the API parses a generation, counted as
`start` would evaluate it (`calls.prompt_tokens.prompt_tokens`, its tool servers'
tools included), answered in the API's shape and envelope."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from parlance.dialects.api import Counting
from parlance.models.served import ServedModels
from parlance.server.body.reader import read_incoming
from parlance.server.calls.prompt_tokens import prompt_tokens
from parlance.server.endpoints.answering import answering
from parlance.server.openapi.operation import Operation, counting
from parlance.server.settings import ServerSettings


class TokenCounts:
    def __init__(self, dialect: Counting, models: ServedModels, settings: ServerSettings,
                 tag: str) -> None:
        self.dialect = dialect
        self.models = models
        self.settings = settings
        self.tag = tag  # the API it belongs to
        self._answer = answering(self._count, settings.api_keys, dialect.render_error)

    def operation(self) -> Operation:
        """What `/openapi.json` says of this route: its dialect's."""
        return counting(self.dialect, self.tag)

    async def count(self, request: Request) -> Any:
        return await self._answer(request)

    async def _count(self, request: Request) -> dict[str, Any]:
        call = await read_incoming(request, self.settings.max_body_bytes, self.dialect.parse)
        tokens = await prompt_tokens(request, self.models, self.settings, call)
        return self.dialect.render_count(tokens)

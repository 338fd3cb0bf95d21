"""`POST /v1/messages/count_tokens`: the prompt tokens a Messages request would take,
counted by the engine exactly as `start` would evaluate them (the tools of its
`mcp_servers` included: the server asks them for their tools, as `start` would)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from starlette.requests import Request

from parlance.dialects.anthropic import AnthropicMessages, render_error
from parlance.integrations.toolbox import Toolbox
from parlance.models.served import ServedModels
from parlance.server.body import read_json
from parlance.server.endpoints import answering
from parlance.server.handler import ServerSettings


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
        model, _, _ = await self.models.acquire(call.request.model)
        counted = call.request
        if counted.tool_servers:
            toolbox = await Toolbox.open(counted.tool_servers, self.settings.integrations)
            try:
                counted = replace(counted, tools=(*counted.tools, *toolbox.specs()))
            finally:
                await toolbox.aclose()
        return {"input_tokens": await model.engine.count_tokens(counted)}

"""Counting a call's prompt tokens (Anthropic's `count_tokens`, Responses'
`input_tokens`) as `GenerationHandler.start` would evaluate them: the same model lease
and tool servers, and the same supervision (deadline, drain, a client that leaves) as
every call."""

from __future__ import annotations

from starlette.requests import Request

from parlance.dialects.base import Call
from parlance.models.served import ServedModel, ServedModels
from parlance.server.calls.lease import call_lease
from parlance.server.calls.supervision import Supervisor
from parlance.server.calls.tool_servers import open_tool_servers
from parlance.server.http.access_log import access_record
from parlance.server.settings import ServerSettings


async def prompt_tokens(request: Request, models: ServedModels, settings: ServerSettings,
                        call: Call) -> int:
    """The prompt tokens `call` would take, its tool servers' tools included (the
    servers are asked for them, as `start` would)."""
    supervisor = Supervisor.for_call(request.app, access_record(request),
                                     settings.request_timeout)
    async with call_lease(models, call) as lease:
        return await supervisor.answer(request.receive, _count(lease.model, settings, call))


async def _count(model: ServedModel, settings: ServerSettings, call: Call) -> int:
    call, toolbox = await open_tool_servers(call, settings.integrations)
    if toolbox is not None:
        await toolbox.aclose()  # only its tools' specs are counted
    return await model.engine.count_tokens(call.request)

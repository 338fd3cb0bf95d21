"""A call's own tool servers (MCP) on the server side: opened for the call and their
tools offered to the model beside the client's own. Generation and token counting
open them alike, so a count includes the tools a generation would offer."""

from __future__ import annotations

from dataclasses import replace

from parlance.core.errors import InvalidRequest
from parlance.dialects.base import Call
from parlance.integrations.settings import IntegrationSettings
from parlance.integrations.toolbox import Toolbox


async def open_tool_servers(call: Call, settings: IntegrationSettings
                            ) -> tuple[Call, Toolbox | None]:
    """The call offering its tool servers' tools, and their open toolbox for the caller
    to close (None: the call names no tool server)."""
    if not call.request.tool_servers:
        return call, None
    toolbox = await Toolbox.open(call.request.tool_servers, settings)
    try:
        return _with_tools(call, toolbox), toolbox
    except BaseException:
        await toolbox.aclose()
        raise


def _with_tools(call: Call, toolbox: Toolbox) -> Call:
    request = call.request
    tools = (*request.tools, *toolbox.specs())
    choice = request.tool_choice
    if choice.mode == "named" and choice.name not in {t.name for t in tools}:
        raise InvalidRequest(f"tool_choice names the tool '{choice.name}', which no tool "
                             "server of this request offers.", param="tool_choice")
    return replace(call, request=replace(request, tools=tools))

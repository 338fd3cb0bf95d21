"""The server-side tools of one request: its MCP servers opened, their tools listed
and filtered by `allowed_tools`, offered to the model as tool specs, and each call
checked (known name, arguments valid for the tool's schema) before it runs."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import anyio

from parlance.core.errors import ToolServerFailed, ToolServerUnreachable
from parlance.core.events import ToolRefused, ToolsListed
from parlance.core.tools import ToolProvider, ToolServerRef, ToolSpec
from parlance.engines.json_schema import SchemaCheck, SchemaUnreadable
from parlance.integrations.address_guard import check_public_url
from parlance.integrations.mcp_session import (
    Endpoint,
    McpFailure,
    McpSession,
    RemoteTool,
    ToolOutput,
)
from parlance.integrations.settings import IntegrationSettings


@dataclass(frozen=True, slots=True)
class ServerTool:
    tool: RemoteTool
    ref: ToolServerRef
    session: McpSession

    @property
    def provider(self) -> ToolProvider:
        return self.ref.provider

    def spec(self) -> ToolSpec:
        return ToolSpec(self.tool.name, self.tool.description, self.tool.input_schema or
                        {"type": "object", "properties": {}}, param=self.ref.param)


def _failed(provider: ToolProvider, message: str,
            param: str | None = None) -> ToolServerUnreachable:
    """A plugin (the operator's own server) that fails is the server's fault; a server
    the request gave by its URL that fails is the request's."""
    if provider.kind == "plugin":
        return ToolServerFailed(message, param=param)
    return ToolServerUnreachable(message, configured=False, param=param)


def _failure(ref: ToolServerRef, why: str) -> ToolServerUnreachable:
    label = ref.provider.label
    message = (f"Could not connect to the plugin '{label}': {why}"
               if ref.provider.kind == "plugin" else
               f"Unable to connect to remote MCP server '{label}' at url '{ref.url}': {why}")
    return _failed(ref.provider, message, ref.param)


async def _endpoint(ref: ToolServerRef, settings: IntegrationSettings) -> Endpoint:
    """Where `ref` lives, once the operator's rules allow it."""
    if ref.provider.kind == "plugin":
        server = settings.plugin(ref.provider.label)
        if server is None:
            known = ", ".join(f"mcp/{label}" for label in settings.configured) or "none"
            raise ToolServerUnreachable(
                f"No plugin '{ref.provider.label}' is configured on this server "
                f"(configured: {known}).", configured=True, param=ref.param)
        return Endpoint(url=server.url, headers=server.headers, command=server.command,
                        args=server.args, env=server.env)
    if not settings.allow_request_servers:
        raise ToolServerUnreachable(
            "This server does not allow per-request MCP servers (ephemeral_mcp); its "
            "operator can enable them with `parlance serve --allow-request-mcp`.",
            configured=False, param=ref.param)
    assert ref.url is not None
    await check_public_url(ref.provider.label, ref.url, settings.allowed_hosts, ref.param)
    return Endpoint(url=ref.url, headers=ref.headers, public_only=True,
                    allowed_hosts=settings.allowed_hosts)


def _allowed(ref: ToolServerRef, tool: RemoteTool) -> bool:
    return (ref.allowed_tools is None or tool.name in ref.allowed_tools
            or (ref.allow_read_only and tool.read_only))


class Toolbox:
    def __init__(self, tools: dict[str, ServerTool], sessions: list[McpSession],
                 settings: IntegrationSettings,
                 listings: tuple[ToolsListed, ...] = ()) -> None:
        self._tools = tools
        self._sessions = sessions
        self.settings = settings
        self.listings = listings  # what each server offers, in the request's order

    @classmethod
    async def open(cls, refs: tuple[ToolServerRef, ...],
                   settings: IntegrationSettings) -> Toolbox:
        """Connect to every server at once; all or nothing (`ToolServerUnreachable`)."""
        sessions: list[McpSession] = []
        try:
            endpoints = [await _endpoint(ref, settings) for ref in refs]
            sessions = [McpSession(endpoint) for endpoint in endpoints]
            outcomes = await asyncio.gather(
                *(s.open(settings.connect_timeout) for s in sessions), return_exceptions=True)
            for ref, outcome in zip(refs, outcomes, strict=True):
                if isinstance(outcome, McpFailure):
                    raise _failure(ref, str(outcome))
                if isinstance(outcome, BaseException):
                    raise outcome
        except BaseException:
            await _close(sessions)
            raise
        offered = [[ServerTool(tool, ref, session) for tool in session.tools
                    if _allowed(ref, tool)] for ref, session in zip(refs, sessions, strict=True)]
        tools: dict[str, ServerTool] = {}
        for server in offered:
            for tool in server:
                tools.setdefault(tool.tool.name, tool)
        listings = tuple(ToolsListed(ref.provider, tuple(t.spec() for t in server))
                         for ref, server in zip(refs, offered, strict=True))
        return cls(tools, sessions, settings, listings)

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(t.spec() for t in self._tools.values())

    def provider(self, name: str) -> ToolProvider | None:
        found = self._tools.get(name)
        return found.provider if found else None

    def awaits_approval(self, name: str) -> bool:
        """Whether a call to `name` waits for the client's approval before it runs."""
        found = self._tools.get(name)
        return found is not None and found.ref.approval.required(name, found.tool.read_only)

    def check(self, name: str, arguments: str) -> dict[str, Any] | ToolRefused:
        """The arguments to run `name` with, or why the call may not run."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolRefused("invalid_name", f"Cannot find tool with name {name}.")
        try:
            value = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            return ToolRefused("invalid_arguments",
                               f"Arguments for tool {name} are not valid JSON: {exc}.")
        if not isinstance(value, dict):
            return ToolRefused("invalid_arguments",
                               f"Arguments for tool {name} must be a JSON object.")
        try:  # linear in the arguments: the server's `pattern`s never backtrack
            problem = SchemaCheck(tool.tool.input_schema).breach(value)
        except SchemaUnreadable:
            problem = None  # a schema this check cannot read: let the server judge
        if problem is not None:
            where = problem.where.lstrip("/") or "arguments"
            return ToolRefused("invalid_arguments",
                               f"Invalid arguments for tool {name}: {where}: {problem.message}.")
        return value

    async def run(self, name: str, arguments: dict[str, Any]) -> ToolOutput:
        """The tool's raw output (an error result is output too: the model reads it);
        `ToolServerUnreachable` when the server fails us."""
        tool = self._tools[name]
        try:
            output = await tool.session.call(name, arguments, self.settings.call_timeout)
        except McpFailure as exc:
            raise _failed(tool.provider, f"The MCP server '{tool.provider.label}' failed "
                          f"while running {name}: {exc}") from exc
        return output

    async def aclose(self) -> None:
        await _close(self._sessions)


async def _close(sessions: list[McpSession]) -> None:
    """Close even while the caller is being cancelled (a client that left)."""
    with anyio.CancelScope(shield=True):
        await asyncio.gather(*(s.aclose() for s in sessions), return_exceptions=True)

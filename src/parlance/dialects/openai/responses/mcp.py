"""Remote MCP tools on `/v1/responses` (`tools: [{type: "mcp", ...}]`): the tool's
wire shape, the servers it names, and the approval round trip.

A server named by `server_url` is a per-request server (the operator must allow
them); one named by `server_label` alone is a server from the operator's
`mcp.json`. As on OpenAI, a call waits for the client's approval unless
`require_approval` says otherwise: the response then ends with an
`mcp_approval_request` item, and the client answers it with an
`mcp_approval_response` input item in its next request. An approved call runs
before the model continues; a declined one is shown to the model as declined.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field

from parlance.core.errors import InvalidRequest
from parlance.core.messages import Message, ToolCall
from parlance.core.tools import Approval, ApprovedCall, ToolServerRef
from parlance.dialects.shared.mcp_servers import server_ref
from parlance.dialects.shared.wire import WireModel


class ToolFilter(WireModel):
    """Tools matched by name, or (`read_only`) every tool the server marks read-only."""

    tool_names: list[str] | None = None
    read_only: bool | None = None


class ApprovalFilter(WireModel):
    always: ToolFilter | None = None
    never: ToolFilter | None = None


class McpTool(WireModel):
    type: Literal["mcp"]
    server_label: Annotated[str, Field(min_length=1)]
    server_url: Annotated[str, Field(min_length=1)] | None = None
    connector_id: str | None = None
    allowed_tools: list[str] | ToolFilter | None = None
    headers: dict[str, str] | None = None
    authorization: str | None = None
    require_approval: Literal["always", "never"] | ApprovalFilter | None = None
    server_description: str | None = None

    def echoed(self) -> dict[str, Any]:
        """The tool as the response object repeats it: never its credentials."""
        return self.model_dump(exclude_none=True, exclude={"headers", "authorization"})


class NamedMcp(WireModel):
    type: Literal["mcp"]
    server_label: str
    name: str | None = None


def _approval(rule: Literal["always", "never"] | ApprovalFilter | None) -> Approval:
    if rule is None or rule == "always":
        return Approval(default=True)  # OpenAI's default
    if rule == "never":
        return Approval(default=False)
    always, never = rule.always or ToolFilter(), rule.never or ToolFilter()
    return Approval(
        # only `always` given: the rest need no approval; otherwise the rest wait
        default=not (rule.always is not None and rule.never is None),
        always=frozenset(always.tool_names or ()), never=frozenset(never.tool_names or ()),
        always_read_only=bool(always.read_only), never_read_only=bool(never.read_only))


def tool_servers(tools: list[Any]) -> tuple[ToolServerRef, ...]:
    """The MCP servers among the request's tools, as server-side tool servers."""
    refs: list[ToolServerRef] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, McpTool):
            continue
        at = f"tools[{i}]"
        if tool.connector_id is not None:
            raise InvalidRequest(
                "Connectors (connector_id) are hosted by OpenAI and not available here; "
                "name an MCP server by server_url, or a server from this server's mcp.json "
                "by its server_label alone.", param=f"{at}.connector_id",
                code="unsupported_parameter")
        allowed = tool.allowed_tools
        names = allowed.tool_names or [] if isinstance(allowed, ToolFilter) else allowed
        refs.append(server_ref(
            tool.server_label, tool.server_url, param=at, label_param=f"{at}.server_label",
            taken=refs, allowed_tools=names, headers=tool.headers, bearer=tool.authorization,
            approval=_approval(tool.require_approval),
            allow_read_only=isinstance(allowed, ToolFilter) and bool(allowed.read_only)))
    return tuple(refs)


# -- approvals across turns ----------------------------------------------------------

def _answers(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The client's approval responses, by the id of the request each answers."""
    answers = {}
    for i, item in enumerate(items):
        if item.get("type") != "mcp_approval_response":
            continue
        request_id = item.get("approval_request_id")
        if not isinstance(request_id, str) or not isinstance(item.get("approve"), bool):
            raise InvalidRequest(
                "An mcp_approval_response needs approval_request_id (a string) and "
                "approve (true or false).", param=f"input[{i}]",
                code="missing_required_parameter")
        answers[request_id] = item
    return answers


def approved_calls(items: list[dict[str, Any]],
                   servers: tuple[ToolServerRef, ...]) -> tuple[ApprovedCall, ...]:
    """Calls the client approved that have not run yet (a call that ran left an
    `mcp_call` item naming its approval)."""
    answers = _answers(items)
    requests = {item.get("id"): item for item in items
                if item.get("type") == "mcp_approval_request"}
    ran = {item.get("approval_request_id") for item in items if item.get("type") == "mcp_call"}
    labels = {ref.provider.label for ref in servers}
    calls = []
    for request_id, answer in answers.items():
        asked = requests.get(request_id)
        if asked is None:
            raise InvalidRequest(f"No mcp_approval_request with id '{request_id}' in the "
                                 "conversation.", param="input")
        if not answer["approve"] or request_id in ran:
            continue
        if asked.get("server_label") not in labels:
            raise InvalidRequest(
                f"The approved call runs on the MCP server '{asked.get('server_label')}', "
                "which this request's tools do not name.", param="tools")
        calls.append(ApprovedCall(request_id, str(asked.get("name", "")),
                                  str(asked.get("arguments", "")), request_id))
    return tuple(calls)


def declined(items: list[dict[str, Any]]) -> dict[str, str]:
    """What the model reads for each call the client declined, by approval id."""
    return {request_id: "The user declined this tool call" +
            (f": {answer['reason']}." if answer.get("reason") else ".")
            for request_id, answer in _answers(items).items() if not answer["approve"]}


def call_messages(item: dict[str, Any],
                  refusals: dict[str, str]) -> tuple[ToolCall, Message] | None:
    """An MCP item as the model's call and the tool's answer; None for items the
    model does not see (tool lists, requests still waiting or about to run)."""
    kind = item.get("type")
    if kind == "mcp_call":
        answer = item.get("output")
        if answer is None:
            error = item.get("error")
            answer = error if isinstance(error, str) else json.dumps(error)
    elif kind == "mcp_approval_request" and item.get("id") in refusals:
        answer = refusals[item["id"]]
    else:
        return None
    call = ToolCall(str(item.get("id", "")), str(item.get("name", "")),
                    str(item.get("arguments", "")))
    return call, Message("tool", answer, name=call.name, tool_call_id=call.id)

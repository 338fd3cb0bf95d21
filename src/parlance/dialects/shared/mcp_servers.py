"""MCP servers a request names, as the neutral `ToolServerRef` the server-side tool
loop runs: shared by every dialect that lets a request name them (Responses `mcp`
tools, Anthropic's `mcp_servers`), so the labels, credentials and filters are read
the same way everywhere."""

from __future__ import annotations

from collections.abc import Iterable

from parlance.core.errors import InvalidRequest
from parlance.core.tools import Approval, ToolProvider, ToolServerRef


def server_ref(label: str, url: str | None, *, param: str, label_param: str,
               taken: Iterable[ToolServerRef], allowed_tools: Iterable[str] | None = None,
               headers: dict[str, str] | None = None, bearer: str | None = None,
               approval: Approval | None = None, allow_read_only: bool = False) -> ToolServerRef:
    """A per-request server (`url` given) or the operator's configured one (by its
    label alone). `bearer` becomes the Authorization header (never echoed: the ref
    keeps it only to connect). Labels must be unique among `taken`."""
    if any(ref.provider.label == label for ref in taken):
        raise InvalidRequest(f"Two MCP servers are named '{label}'; names must be unique.",
                             param=label_param)
    sent = dict(headers or {})
    if bearer:
        sent["Authorization"] = f"Bearer {bearer}"
    return ToolServerRef(ToolProvider("ephemeral_mcp" if url else "plugin", label), url,
                         None if allowed_tools is None else tuple(allowed_tools),
                         tuple(sent.items()), param=param, approval=approval or Approval(),
                         allow_read_only=allow_read_only)

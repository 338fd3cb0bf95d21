"""Per-request MCP servers may reach only public addresses (`parlance.net.guard`),
unless the operator allow-listed the host: LM Studio blocks such hosts outright, which
leaves users with a local MCP server no way in. This module words a refusal as the
MCP error a client is told about."""

from __future__ import annotations

from parlance.core.errors import ToolServerUnreachable
from parlance.net.guard import NON_PUBLIC, RefusedURL, check_url


async def check_public_url(label: str, url: str, allowed_hosts: tuple[str, ...],
                           param: str) -> None:
    try:
        await check_url(url, allowed_hosts)
    except RefusedURL as exc:
        why = str(exc)
        if why == NON_PUBLIC:
            why += (" Per-request MCP servers may only reach public addresses unless the "
                    "server's operator allow-lists the host (parlance serve --mcp-allow-host).")
        raise ToolServerUnreachable(
            f"Unable to connect to remote MCP server '{label}' at url '{url}'. {why}",
            configured=False, param=param) from exc

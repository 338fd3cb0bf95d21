"""Refuse request-named MCP URLs that reach into the server's own network.

A URL named by a client must resolve only to public addresses (no loopback,
private, link-local, multicast or reserved ranges), unless the operator
allow-listed its host: LM Studio blocks such hosts outright, which leaves users
with a local MCP server no way in. Every address the name resolves to is
checked, so a name with one public and one private address is refused.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from parlance.core.errors import ToolServerUnreachable


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def check_public_url(label: str, url: str, allowed_hosts: tuple[str, ...],
                           param: str) -> None:
    def refuse(why: str) -> ToolServerUnreachable:
        return ToolServerUnreachable(
            f"Unable to connect to remote MCP server '{label}' at url '{url}'. {why}",
            configured=False, param=param)

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise refuse("Only http(s) URLs are supported.")
    host = parts.hostname
    if host.lower() in (h.lower() for h in allowed_hosts):
        return
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, parts.port or (443 if parts.scheme == "https" else 80),
            type=socket.SOCK_STREAM)
    except OSError as exc:
        raise refuse(f"The host could not be resolved ({exc}).") from exc
    if not all(_is_public(info[4][0]) for info in infos):
        raise refuse("URL resolves to a non-public address. Per-request MCP servers may "
                     "only reach public addresses unless the server's operator allow-lists "
                     "the host (parlance serve --mcp-allow-host).")

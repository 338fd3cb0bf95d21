"""Refuse request-named MCP URLs that reach into the server's own network.

A URL named by a client must resolve only to public addresses (no loopback,
private, link-local, multicast or reserved ranges), unless the operator
allow-listed its host: LM Studio blocks such hosts outright, which leaves users
with a local MCP server no way in. Every address the name resolves to is
checked, so a name with one public and one private address is refused.

The check runs twice: once before connecting, for a clear error, and again on
every TCP connection the MCP client opens (`public_only_client`), which resolves
the name itself and connects to the address it checked. A name that resolves to
a public address for the first check and to a private one a moment later (DNS
rebinding) is therefore refused too.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpcore2
import httpx2

from parlance.core.errors import ToolServerUnreachable

NON_PUBLIC = "URL resolves to a non-public address."
_TIMEOUT = httpx2.Timeout(30.0, read=300.0)  # the MCP SDK's own client defaults


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def _listed(host: str, allowed_hosts: tuple[str, ...]) -> bool:
    return host.lower().strip("[]") in (h.lower().strip("[]") for h in allowed_hosts)


async def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (`OSError` when it does not)."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


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
    if _listed(host, allowed_hosts):
        return
    try:
        addresses = await resolve(host, parts.port or (443 if parts.scheme == "https" else 80))
    except OSError as exc:
        raise refuse(f"The host could not be resolved ({exc}).") from exc
    if not all(_is_public(address) for address in addresses):
        raise refuse(f"{NON_PUBLIC} Per-request MCP servers may only reach public addresses "
                     "unless the server's operator allow-lists the host (parlance serve "
                     "--mcp-allow-host).")


class PublicOnlyBackend(httpcore2.AsyncNetworkBackend):
    """Opens TCP connections only to public addresses (or allow-listed hosts),
    connecting to the very address it checked."""

    def __init__(self, allowed_hosts: tuple[str, ...]) -> None:
        self._allowed_hosts = allowed_hosts
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None,
                          ) -> httpcore2.AsyncNetworkStream:
        target = host
        if not _listed(host, self._allowed_hosts):
            try:
                addresses = await resolve(host, port)
            except OSError as exc:
                raise httpcore2.ConnectError(f"{host} could not be resolved ({exc})") from exc
            if not addresses or not all(_is_public(a) for a in addresses):
                raise httpcore2.ConnectError(f"{NON_PUBLIC} ({host})")
            target = addresses[0]
        return await self._inner.connect_tcp(target, port, timeout, local_address,
                                             socket_options)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None,
                                  ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("Unix sockets are not public addresses.")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def public_only_client(allowed_hosts: tuple[str, ...], headers: dict[str, str] | None = None,
                       timeout: httpx2.Timeout | None = None) -> httpx2.AsyncClient:
    """An HTTP client for a per-request MCP server. It ignores proxy settings from
    the environment: a proxy would make the address checked the proxy's."""
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    # httpx2 builds its connection pool without a way to pass a network backend
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(trust_env=False),
        network_backend=PublicOnlyBackend(allowed_hosts))
    return httpx2.AsyncClient(transport=transport, headers=headers, trust_env=False,
                              timeout=timeout or _TIMEOUT)

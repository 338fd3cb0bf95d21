"""Refuse client-named URLs that reach into the server's own network (SSRF).

A URL must resolve only to public addresses (`addresses.is_public_address`), unless
the operator allow-listed its host. Every address the name resolves to is checked,
so a name with one public and one private address is refused. Names are resolved by
the system resolver, which also reads `2130706433`, `0x7f.1` or `0177.0.0.1` as the
IPv4 address they denote; the check judges the address it returns.

The check runs twice: once before connecting (`check_url`), for a clear error, and
again on every TCP connection a `public_only_client` opens (redirects included): its
network backend resolves the name itself and connects to the address it checked, so
a name that resolves to a public address first and to a private one a moment later
(DNS rebinding) is refused too.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpcore2
import httpx2

from parlance.net.addresses import host_listed, is_public_address

NON_PUBLIC = "The URL resolves to a non-public address."
_TIMEOUT = httpx2.Timeout(30.0, read=300.0)  # the MCP SDK's own client defaults


class RefusedURL(ValueError):
    """A URL refused before any connection; the message says why."""


class NonPublicConnection(httpcore2.ConnectError):
    """A connection refused because its address is not public. httpx2 raises it as
    `httpx2.ConnectError`, with this as its `__cause__` (see `refused_at_connect`)."""


async def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (`OSError` when it does not)."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def check_url(url: str, allowed_hosts: tuple[str, ...]) -> None:
    """Raise `RefusedURL` unless `url` is http(s) and its host is allow-listed or
    resolves to public addresses only."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise RefusedURL("Only http(s) URLs are supported.")
    try:
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError as exc:
        raise RefusedURL("The URL's port is not valid.") from exc
    if host_listed(parts.hostname, allowed_hosts):
        return
    try:
        addresses = await resolve(parts.hostname, port)
    except OSError as exc:
        raise RefusedURL(f"The host could not be resolved ({exc}).") from exc
    if not all(is_public_address(address) for address in addresses):
        raise RefusedURL(NON_PUBLIC)


def refused_at_connect(exc: BaseException) -> bool:
    """Whether an httpx2 error is (caused by) a connection the guard refused."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, NonPublicConnection):
            return True
        seen = seen.__cause__
    return False


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
        if not host_listed(host, self._allowed_hosts):
            try:
                addresses = await resolve(host, port)
            except OSError as exc:
                raise httpcore2.ConnectError(f"{host} could not be resolved ({exc})") from exc
            if not addresses or not all(is_public_address(a) for a in addresses):
                raise NonPublicConnection(f"{NON_PUBLIC} ({host})")
            target = addresses[0]
        return await self._inner.connect_tcp(target, port, timeout, local_address,
                                             socket_options)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None,
                                  ) -> httpcore2.AsyncNetworkStream:
        raise NonPublicConnection("Unix sockets are not public addresses.")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


async def _http_only(request: httpx2.Request) -> None:
    """Refuse a request (a redirect, say) to anything but http(s)."""
    if request.url.scheme not in ("http", "https"):
        raise httpx2.UnsupportedProtocol("Only http(s) URLs are supported.", request=request)


def public_only_client(allowed_hosts: tuple[str, ...], headers: dict[str, str] | None = None,
                       timeout: httpx2.Timeout | None = None,
                       follow_redirects: bool = False) -> httpx2.AsyncClient:
    """An HTTP client whose every connection goes through `PublicOnlyBackend`. It
    ignores proxy settings from the environment: a proxy would make the address
    checked the proxy's."""
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    # httpx2 builds its connection pool without a way to pass a network backend
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(trust_env=False),
        network_backend=PublicOnlyBackend(allowed_hosts))
    return httpx2.AsyncClient(transport=transport, headers=headers, trust_env=False,
                              timeout=timeout or _TIMEOUT, follow_redirects=follow_redirects,
                              event_hooks={"request": [_http_only]})

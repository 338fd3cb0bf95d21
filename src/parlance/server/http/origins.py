"""What a web page may make a browser send here.

Any page can POST to this server with a "simple" request (a `text/plain` body needs no
preflight): unload models, start downloads, run chats. And a page whose name rebinds to
127.0.0.1 (DNS rebinding) can read the answers too: its requests carry its own name as
`Host`. So, as Ollama does:

- a request with an `Origin` is refused (403) unless the origin is a loopback one or the
  operator allowed it (`--allowed-origin`); an allowed origin gets CORS headers, and its
  preflight `OPTIONS` is answered here;
- when the server listens on a loopback address (or `--allowed-host` is given), a request
  whose `Host` is neither a loopback name nor an allowed host is refused (403);
- a page this server served itself (the web chat) sends its own origin: one whose
  authority is the request's `Host` passes when the operator named that host with
  `--allowed-host` (a name a rebound page cannot use: it is checked against the list).

Clients that send no `Origin` (SDKs, curl) are unaffected. A refusal uses the error envelope
of the API the path belongs to. WebSocket handshakes obey the same rules: browsers apply no
CORS to them, so a foreign page could otherwise open one and talk freely.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parlance.core.errors import Forbidden
from parlance.server.http.refusal import RenderFor, refuse
from parlance.server.settings import ServerSettings

ANY = "*"
ALLOW_METHODS = "GET, POST, DELETE, OPTIONS"
# What the OpenAI, Anthropic and LM Studio clients send; a preflight's own list is added.
ALLOW_HEADERS = ("authorization", "content-type", "x-api-key", "openai-beta",
                 "openai-organization", "openai-project", "anthropic-version",
                 "anthropic-beta", "anthropic-dangerous-direct-browser-access")
MAX_AGE = "3600"
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a header name


def is_loopback_name(host: str) -> bool:
    """`localhost`, `*.localhost`, 127.0.0.0/8 or ::1 (IPv6 with or without brackets)."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(authority: str) -> str:
    """The host of a `Host` header value (`name[:port]`, `[v6][:port]`), lowercased,
    without brackets, port or a final dot."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1:authority.find("]")] if "]" in authority else authority
    name, colon, port = authority.rpartition(":")
    return (name if colon and (port.isdigit() or not port) else authority).rstrip(".")


def _origin_key(origin: str) -> str:
    return origin.strip().rstrip("/").lower()


@dataclass(frozen=True, slots=True)
class CrossSitePolicy:
    origins: frozenset[str]  # allowed beside loopback ones
    any_origin: bool
    hosts: frozenset[str]  # allowed beside loopback names
    check_host: bool

    @classmethod
    def of(cls, settings: ServerSettings) -> CrossSitePolicy:
        hosts = frozenset(host_name(h) for h in settings.allowed_hosts)
        bound_to_loopback = settings.bind_host is not None and is_loopback_name(
            settings.bind_host)
        return cls(origins=frozenset(_origin_key(o) for o in settings.allowed_origins),
                   any_origin=ANY in settings.allowed_origins, hosts=hosts,
                   check_host=ANY not in hosts and (bound_to_loopback or bool(hosts)))

    def host_allowed(self, host: str) -> bool:
        if not self.check_host:
            return True
        name = host_name(host)
        return is_loopback_name(name) or name in self.hosts

    def origin_allowed(self, origin: str, host: str | None = None) -> bool:
        if self.any_origin or _origin_key(origin) in self.origins:
            return True
        try:
            parts = urlsplit(origin.strip())
        except ValueError:  # e.g. an unclosed [
            return False
        if (parts.scheme.lower() not in ("http", "https") or parts.hostname is None
                or parts.path.strip("/")):
            return False
        return is_loopback_name(parts.hostname) or self._same_named_host(parts.netloc, host)

    def _same_named_host(self, authority: str, host: str | None) -> bool:
        """The origin is this server under a name the operator allowed."""
        return (host is not None and authority.lower() == host.strip().lower()
                and host_name(host) in self.hosts)


class CrossSiteGuard:
    """ASGI middleware enforcing a `CrossSitePolicy`. A request without `Origin` goes
    through untouched (no per-message work on its stream)."""

    def __init__(self, app: ASGIApp, settings: ServerSettings, render: RenderFor) -> None:
        self.app = app
        self.render = render
        self.policy = CrossSitePolicy.of(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        refusal = self._refusal(headers.get("host"), origin)
        if refusal is not None:
            await refuse(scope, receive, send, self.render(scope["path"]), refusal)
            return
        if origin is None or scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await _preflight(origin, headers)(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                out["access-control-allow-origin"] = origin
                out.add_vary_header("Origin")
            await send(message)

        await self.app(scope, receive, send_with_cors)

    def _refusal(self, host: str | None, origin: str | None) -> Forbidden | None:
        if host is not None and not self.policy.host_allowed(host):
            return Forbidden(
                f"Requests for the host '{host}' are not allowed: this server answers only "
                "loopback names (a web page on another name could be rebound to this "
                "machine). Its operator can allow the name with `parlance serve "
                "--allowed-host`.", code="host_not_allowed")
        if origin is not None and not self.policy.origin_allowed(origin, host):
            return Forbidden(
                f"Requests from the web origin '{origin}' are not allowed. The server's "
                "operator can allow it with `parlance serve --allowed-origin`.",
                code="origin_not_allowed")
        return None


def _preflight(origin: str, request: Headers) -> Response:
    asked = [h.strip().lower()
             for h in request.get("access-control-request-headers", "").split(",")]
    allowed = dict.fromkeys([*ALLOW_HEADERS, *(h for h in asked if _TOKEN.fullmatch(h))])
    return Response(status_code=204, headers={
        "access-control-allow-origin": origin,
        "access-control-allow-methods": ALLOW_METHODS,
        "access-control-allow-headers": ", ".join(allowed),
        "access-control-max-age": MAX_AGE,
        "vary": "Origin, Access-Control-Request-Headers",
    })

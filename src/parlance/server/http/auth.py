"""API keys: `Authorization: Bearer <key>` (OpenAI SDKs) or `x-api-key` (Anthropic)."""

from __future__ import annotations

import hmac

from starlette.requests import HTTPConnection

from parlance.core.errors import AuthenticationFailed


def presented_key(request: HTTPConnection) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("x-api-key")


def authorize(request: HTTPConnection, keys: tuple[str, ...]) -> None:
    """An HTTP request or a WebSocket handshake (its headers)."""
    if not keys:
        return
    key = presented_key(request)
    if key is None:
        raise AuthenticationFailed(
            "You didn't provide an API key. Send it as 'Authorization: Bearer <key>' "
            "or 'x-api-key: <key>'.",
            code="missing_api_key")
    if not any(hmac.compare_digest(key.encode(), k.encode()) for k in keys):
        raise AuthenticationFailed("Incorrect API key provided.", code="invalid_api_key")

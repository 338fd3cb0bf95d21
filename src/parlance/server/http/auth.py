"""API keys: `Authorization: Bearer <key>` (OpenAI SDKs), or a header an API names
(`x-api-key` for Anthropic's, `x-goog-api-key` for Gemini's), or on an API's own paths
the query parameter it names (Gemini's `?key=`): `API.key_headers`, `API.key_query`."""

from __future__ import annotations

import hmac

from starlette.requests import HTTPConnection

from parlance.core.errors import AuthenticationFailed
from parlance.dialects import apis


def presented_key(request: HTTPConnection) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    for api in apis.APIS:
        for name in api.key_headers:
            if (key := request.headers.get(name)) is not None:
                return key
    for api in apis.APIS:
        if (api.key_query is not None and api.prefix_length(request.url.path)
                and (key := request.query_params.get(api.key_query)) is not None):
            return key
    return None


def _places() -> str:
    headers = [f"'{name}: <key>'" for api in apis.APIS for name in api.key_headers]
    return " or ".join(["'Authorization: Bearer <key>'", *headers])


def authorize(request: HTTPConnection, keys: tuple[str, ...]) -> None:
    """An HTTP request or a WebSocket handshake (its headers)."""
    if not keys:
        return
    key = presented_key(request)
    if key is None:
        raise AuthenticationFailed(
            f"You didn't provide an API key. Send it as {_places()}.",
            code="missing_api_key")
    if not any(hmac.compare_digest(key.encode(), k.encode()) for k in keys):
        raise AuthenticationFailed("Incorrect API key provided.", code="invalid_api_key")

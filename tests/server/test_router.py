"""The indexed router picks exactly the route Starlette's own loop picks: for every
path of the real route table (parameters filled in), every method, and a few paths
no route has, the same endpoint or the same 404/405."""

from __future__ import annotations

import re
from typing import Any
from unittest import mock

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route, Router, WebSocketRoute

from parlance.server.router import IndexedRouter
from parlance.server.routes import build_routes
from parlance.server.settings import ServerSettings
from parlance.store.responses import ResponseStore

METHODS = ("GET", "HEAD", "POST", "DELETE", "PUT")


def _table() -> list[Any]:
    """The real route table, each endpoint replaced by one that names its route."""

    def named(index: int) -> Any:
        async def endpoint(request: Request) -> PlainTextResponse:
            return PlainTextResponse(f"route {index} {request.path_params}")
        return endpoint

    async def socket(websocket: Any) -> None:
        await websocket.close()

    store = ResponseStore(None)
    real = build_routes(mock.MagicMock(), ServerSettings(), store, None)
    store.close()
    table: list[Any] = []
    for index, route in enumerate(real):
        if isinstance(route, WebSocketRoute):
            table.append(WebSocketRoute(route.path, socket))
        else:
            assert isinstance(route, Route)
            table.append(Route(route.path, named(index), methods=list(route.methods or ())))
    return table


def _paths(table: list[Any]) -> list[str]:
    filled = {re.sub(r"\{[^}]*\}", "abc", route.path) for route in table}
    fixed = {route.path for route in table if "{" not in route.path}
    return sorted(filled | fixed | {"/v1/responses/compact/", "/nowhere", "/v1/chat/completions/"})


@pytest.mark.parametrize("path", _paths(_table()))
async def test_the_indexed_router_picks_starlettes_route(path: str) -> None:
    table = _table()
    plain = Starlette(routes=table)
    indexed = Starlette(routes=table)
    indexed.router = IndexedRouter(table)
    assert isinstance(plain.router, Router)
    answers = []
    for app in (plain, indexed):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            answers.append([(r.status_code, r.text, r.headers.get("location"))
                            for r in [await client.request(m, path) for m in METHODS]])
    assert answers[0] == answers[1]
    assert any(status != 404 for status, _, _ in answers[0]) or path == "/nowhere"

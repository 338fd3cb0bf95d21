"""Every route the app serves is in `/openapi.json`, described: a route added to
`routes.py` without a description in `route_docs.py` (or a dialect) fails here."""

from __future__ import annotations

import httpx
from starlette.routing import Route, WebSocketRoute

from parlance.engines.fake import FakeEngine
from parlance.server.openapi.document import UNDOCUMENTED, openapi_path
from parlance.server.openapi.route_docs import PLAIN
from tests.support.fake_app import make_app


def served(app) -> set[tuple[str, str]]:
    """(method, OpenAPI path) of every HTTP route (HEAD is answered as GET is)."""
    return {(method, openapi_path(route.path)) for route in app.router.routes
            if isinstance(route, Route) for method in route.methods or () if method != "HEAD"}


async def document(app) -> dict:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as client:
        answer = await client.get("/openapi.json")
    assert answer.status_code == 200
    return answer.json()


async def test_every_route_is_in_the_document_and_described():
    app = make_app(FakeEngine())
    paths = (await document(app))["paths"]
    listed = {(method.upper(), path) for path, ops in paths.items() for method in ops}
    assert listed == served(app)
    undescribed = sorted(f"{method.upper()} {path}" for path, ops in paths.items()
                         for method, op in ops.items() if op.get(UNDOCUMENTED))
    assert not undescribed, f"describe these in server/openapi/route_docs.py: {undescribed}"


def test_the_table_describes_only_routes_that_exist():
    assert set(PLAIN) <= served(make_app(FakeEngine()))


def test_websocket_routes_share_documented_paths():
    """WebSocket mode has no OpenAPI form; its paths are documented as their POSTs."""
    app = make_app(FakeEngine())
    sockets = {r.path for r in app.router.routes if isinstance(r, WebSocketRoute)}
    assert sockets and {("POST", path) for path in sockets} <= served(app)

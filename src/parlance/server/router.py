"""Starlette's router with an index of its fixed paths.

Starlette tries each route's pattern in turn; with some 45 routes a chat request
is matched against 25 of them, on every request.
Here a fixed path (one no route parameter was needed to match) goes straight to
the routes whose pattern matches it, in their order, so the first full match and
the 405 for a wrong method are exactly Starlette's; other paths take its loop.
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Match, Route, Router, WebSocketRoute, get_route_path
from starlette.types import Receive, Scope, Send


class IndexedRouter(Router):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._by_path: dict[str, list[BaseRoute]] | None = None

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            candidates = self._index().get(get_route_path(scope))
            if candidates is not None and await self._first_match(candidates, scope, receive,
                                                                  send):
                return
        await super().app(scope, receive, send)

    def _index(self) -> dict[str, list[BaseRoute]]:
        """Each fixed path of the table, with every route that matches it (routes added
        after the first request are not indexed: they are not expected)."""
        if self._by_path is None:
            simple = all(isinstance(r, Route | WebSocketRoute) for r in self.routes)
            fixed = {r.path for r in self.routes if simple and "{" not in r.path}  # type: ignore[attr-defined]
            self._by_path = {path: [r for r in self.routes
                                    if r.path_regex.match(path)]  # type: ignore[attr-defined]
                             for path in fixed}
        return self._by_path

    async def _first_match(self, routes: list[BaseRoute], scope: Scope, receive: Receive,
                           send: Send) -> bool:
        """Starlette's loop over the candidates: the first full match, else the first
        partial one (a wrong method: 405); False when none matched (Starlette's own
        loop then decides: a redirect, or not found)."""
        scope.setdefault("router", self)
        partial = None
        for route in routes:
            match, child_scope = route.matches(scope)
            if match is Match.FULL:
                scope["route"] = route
                scope.update(child_scope)
                await route.handle(scope, receive, send)
                return True
            if match is Match.PARTIAL and partial is None:
                partial, partial_scope = route, child_scope
        if partial is not None:
            scope["route"] = partial
            scope.update(partial_scope)
            await partial.handle(scope, receive, send)
            return True
        return False

"""The OpenAPI 3.1 document of the routes an app serves: each route's methods, path
parameters, body (the dialect's wire model), answer media types and error envelope.
WebSocket routes have no OpenAPI form (Responses' WebSocket mode shares its paths with
the POST routes); HEAD is answered as GET is."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from starlette.routing import BaseRoute, Route

import parlance
from parlance.dialects import apis
from parlance.server.http.refusal import Render
from parlance.server.openapi.operation import Operation
from parlance.server.openapi.shapes import body_schemas, envelope_schema

Describe = Callable[[Route, str, str], Operation | None]
UNDOCUMENTED = "x-parlance-undocumented"
_PARAM = re.compile(r"{([^}:]+)(?::[^}]+)?}")  # Starlette's `{name}` or `{name:convertor}`


def openapi_path(path: str) -> str:
    """A Starlette path in OpenAPI's spelling (no convertors)."""
    return _PARAM.sub(r"{\1}", path)


def operations(routes: Sequence[BaseRoute], describe: Describe
               ) -> Iterable[tuple[str, str, Route, Operation | None]]:
    """(method, OpenAPI path, route, its description) for each HTTP method of each route."""
    for route in routes:
        if not isinstance(route, Route):
            continue
        path = openapi_path(route.path)
        for method in sorted(route.methods or ()):
            if method != "HEAD":
                yield method, path, route, describe(route, method, path)


def openapi_document(routes: Sequence[BaseRoute], describe: Describe, *,
                     refusals: Callable[[str], Render],
                     examples: Mapping[type[BaseModel], dict[str, Any]],
                     keys_required: bool) -> dict[str, Any]:
    """`refusals`: the envelope of a path's errors made before its endpoint runs (a
    body too large, a wrong method, a draining server); `examples`: a valid body of
    each model, shown with it."""
    listed = list(operations(routes, describe))
    refs, components = body_schemas(op.body for *_, op in listed
                                     if op is not None and op.body is not None)
    paths: dict[str, dict[str, Any]] = {}
    for method, path, route, op in listed:
        params = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                  for name in route.param_convertors]
        paths.setdefault(path, {})[method.lower()] = (
            _operation(op, params, refs, examples, keys_required,
                       envelopes=(*op.errors, refusals(route.path))) if op is not None
            else {"summary": "Undocumented", "parameters": params, UNDOCUMENTED: True,
                  "responses": {"default": {"description": "Not described"}}})
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "Parlance", "version": parlance.__version__,
                 "description": f"Every API Parlance speaks: {_names()}, each with its "
                                "own error envelope."},
        "paths": paths,
        "components": {"schemas": components},
    }
    if keys_required:
        schemes: dict[str, Any] = {"bearer": {"type": "http", "scheme": "bearer"}}
        for api in apis.APIS:  # the other places a key may come in (`http/auth.py`)
            for header in api.key_headers:
                schemes[header] = {"type": "apiKey", "in": "header", "name": header}
            if api.key_query is not None:
                schemes[f"{api.key_query}_query"] = {"type": "apiKey", "in": "query",
                                                       "name": api.key_query}
        document["components"]["securitySchemes"] = schemes
        document["security"] = [{name: []} for name in schemes]
    return document


def _names() -> str:
    names = [api.name for api in apis.APIS]
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]


def _operation(op: Operation, params: list[dict[str, Any]],
               refs: dict[type[BaseModel], dict[str, Any]],
               examples: Mapping[type[BaseModel], dict[str, Any]], keys_required: bool,
               envelopes: tuple[Render, ...]) -> dict[str, Any]:
    query = [{"name": q.name, "in": where, "required": False, "schema": q.schema}
             | ({"description": q.description} if q.description else {})
             for where, listed in (("query", op.query), ("header", op.headers))
             for q in listed]
    errors: list[dict[str, Any]] = []
    for schema in map(envelope_schema, envelopes):
        if schema not in errors:
            errors.append(schema)
    error = {"description": "An error, in this API's envelope", "content": {
        "application/json": {"schema": errors[0] if len(errors) == 1 else {"anyOf": errors}}}}
    responses: dict[str, Any] = {"4XX": error, "5XX": error}
    if op.succeeds:
        answer: dict[str, Any] = {"description": "OK"}
        if op.answer:
            answer["content"] = {media: {"schema": schema} for media, schema in op.answer.items()}
        responses = {"200": answer, **responses}
    out: dict[str, Any] = {"tags": [op.tag], "summary": op.summary,
                           "parameters": params + query,
                           "responses": responses}
    if op.description:
        out["description"] = op.description
    if op.body is not None:
        body: dict[str, Any] = {"schema": refs[op.body]}
        if op.body in examples:
            body["example"] = examples[op.body]
        out["requestBody"] = {"required": True, "content": {"application/json": body}}
    if op.public and keys_required:
        out["security"] = []
    return out

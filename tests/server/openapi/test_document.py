"""`/openapi.json`: a valid OpenAPI 3.1 document whose bodies are the dialects' wire
models, whose error schemas fit every error each route's envelope renders, and which
asks for a key exactly when the server has keys."""

from __future__ import annotations

import httpx
import pytest
from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for
from schemathesis.specs.openapi.definitions import OPENAPI_31  # the OAS 3.1 meta-schema
from starlette.routing import Route

from parlance.dialects.base import Dialect, StreamsByRoute
from parlance.engines.fake import FakeEngine
from parlance.server.generation.handler import GenerationHandler
from parlance.server.openapi.document import openapi_path
from parlance.server.openapi.route_docs import describe, examples
from parlance.server.routes import error_renderer
from tests.support.error_kinds import ALL_KINDS, instance
from tests.support.fake_app import make_app


async def fetch(app, path: str, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as client:
        return await client.get(path, headers=headers)


@pytest.fixture(scope="module")
def app():
    return make_app(FakeEngine())


@pytest.fixture
async def document(app) -> dict:
    return (await fetch(app, "/openapi.json")).json()


def resolved(document: dict, schema: dict) -> dict:
    ref = schema["$ref"].removeprefix("#/components/schemas/")
    return document["components"]["schemas"][ref]


def test_it_is_valid_openapi_3_1_with_valid_schemas(document):
    Draft202012Validator(OPENAPI_31).validate(document)
    for schema in document["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)
    assert document["openapi"] == "3.1.0"


def test_a_generation_body_is_the_model_its_dialect_parses_with(app, document):
    handlers = [(route, route.endpoint.__self__) for route in app.router.routes
                if isinstance(route, Route)
                and isinstance(getattr(route.endpoint, "__self__", None), GenerationHandler)]
    assert len(handlers) >= 8
    for route, handler in handlers:
        dialect: Dialect = handler.dialect
        op = document["paths"][openapi_path(route.path)]["post"]
        body = op["requestBody"]["content"]["application/json"]["schema"]
        assert resolved(document, body)["title"] == dialect.body_model.__name__
        streamed = {"sse": "text/event-stream", "ndjson": "application/x-ndjson"}
        answers = {"application/json"}
        if "stream" in dialect.body_model.model_fields:  # a body that may ask for a stream
            answers.add(streamed[dialect.framing])
        if isinstance(dialect, StreamsByRoute) and dialect.streaming:  # SSE or a JSON array
            answers.add("text/event-stream")
        assert set(op["responses"]["200"]["content"]) == answers
    compaction = document["paths"]["/v1/responses/compact"]["post"]["responses"]["200"]
    assert set(compaction["content"]) == {"application/json"}


def test_every_body_has_an_example_its_own_model_accepts(document):
    for path, ops in document["paths"].items():
        for op in ops.values():
            if "requestBody" not in op:
                continue
            body = op["requestBody"]["content"]["application/json"]
            assert "example" in body, (
                f"add an example for {path} to its API's examples (dialects/<api>/api.py)")
    for model, example in examples().items():
        model.model_validate(example)


def test_every_error_a_route_renders_fits_its_documented_schema(app, document):
    """Each kind of error, in each envelope a route answers in (its endpoint's, and its
    path's for refusals before the endpoint runs), against the schema the document
    derived from those envelopes."""
    checked = 0
    for route in app.router.routes:
        if not isinstance(route, Route):
            continue
        path = openapi_path(route.path)
        for method in route.methods - {"HEAD"}:
            op = describe(route, method, path)
            assert op is not None
            schema = document["paths"][path][method.lower()]["responses"]["4XX"][
                "content"]["application/json"]["schema"]
            validator = validator_for(schema)(schema)
            for render in (*op.errors, error_renderer(route.path)):
                for kind in ALL_KINDS:
                    validator.validate(render(instance(kind)).body)
                    checked += 1
    assert checked > 40 * len(ALL_KINDS)


def test_errors_come_as_4xx_and_5xx_and_a_path_with_no_endpoint_never_succeeds(document):
    for path, ops in document["paths"].items():
        for op in ops.values():
            assert {"4XX", "5XX"} <= set(op["responses"]), path
    assert set(document["paths"]["/v1/responses/{sub_path}"]["post"]["responses"]) == {
        "4XX", "5XX"}


async def test_no_key_asked_when_the_server_has_none(document):
    assert "security" not in document
    assert "securitySchemes" not in document["components"]


async def test_with_keys_a_key_is_asked_in_any_of_its_places_but_not_for_probes_and_docs():
    app = make_app(FakeEngine(), api_keys=("sk-test",))
    answer = await fetch(app, "/openapi.json")  # without the key
    assert answer.status_code == 200
    document = answer.json()
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearer"] == {"type": "http", "scheme": "bearer"}
    assert schemes["x-api-key"] == {"type": "apiKey", "in": "header", "name": "x-api-key"}
    assert schemes["x-goog-api-key"] == {"type": "apiKey", "in": "header",
                                         "name": "x-goog-api-key"}
    assert schemes["key_query"] == {"type": "apiKey", "in": "query", "name": "key"}
    assert document["security"] == [{name: []} for name in schemes]
    public = {path for path, ops in document["paths"].items()
              if ops.get("get", {}).get("security") == []}
    assert public == {"/", "/health", "/openapi.json", "/docs", "/docs/{asset}",
                      "/web/{name}"}
    assert (await fetch(app, "/docs")).status_code == 200
    assert (await fetch(app, "/v1/models")).status_code == 401
    assert (await fetch(app, "/v1/models", authorization="Bearer sk-test")).status_code == 200


def test_path_parameters_lose_their_convertors(document):
    op = document["paths"]["/v1/models/{model_id}"]["get"]
    assert op["parameters"] == [{"name": "model_id", "in": "path", "required": True,
                                 "schema": {"type": "string"}}]


def test_operations_are_grouped_by_the_api_they_belong_to(document):
    tags = {f"{method.upper()} {path}": op["tags"] for path, ops in document["paths"].items()
            for method, op in ops.items()}
    assert set().union(*map(set, tags.values())) == {
        "OpenAI", "Anthropic", "Ollama", "LM Studio", "Gemini", "System One", "llama-server",
        "Mistral", "Server"}
    assert tags["POST /v1/systemone"] == ["System One"]
    assert tags["POST /v1/decisions"] == ["OpenAI"]
    assert tags["POST /tokenize"] == tags["POST /apply-template"] == ["llama-server"]
    assert tags["POST /v1/chat/completions"] == tags["GET /v1/responses/{response_id}"] == [
        "OpenAI"]
    assert tags["POST /api/chat"] == tags["POST /api/embed"] == tags["GET /api/tags"] == [
        "Ollama"]
    assert tags["POST /api/v1/chat"] == tags["GET /api/v1/models"] == ["LM Studio"]
    assert tags["POST /api/v0/embeddings"] == ["LM Studio"]  # OpenAI's shape, LM Studio's API
    assert tags["POST /v1/messages"] == tags["POST /v1/messages/count_tokens"] == [
        "Anthropic"]
    assert tags["POST /v1beta/models/{model}:streamGenerateContent"] == tags[
        "GET /v1beta/models"] == tags["POST /v1/models/{model}:countTokens"] == ["Gemini"]


def test_the_parlance_headers_and_the_loads_stream_are_documented(app, document):
    generation = [openapi_path(route.path) for route in app.router.routes
                  if isinstance(route, Route)
                  and isinstance(getattr(route.endpoint, "__self__", None), GenerationHandler)]
    for path in generation:
        headers = {p["name"]: p for p in document["paths"][path]["post"]["parameters"]
                   if p["in"] == "header"}
        assert set(headers) == {"X-Parlance-Speculative", "X-Parlance-Progress"}, path
        assert headers["X-Parlance-Progress"]["schema"]["enum"] == ["on", "off"]
    progress = document["paths"]["/v1/responses"]["post"]["parameters"]
    assert any("parlance.prompt_progress" in p.get("description", "") for p in progress)
    load = document["paths"]["/api/v1/models/load"]["post"]
    assert set(load["responses"]["200"]["content"]) == {"application/json",
                                                         "text/event-stream"}
    assert "Accept: text/event-stream" in load["description"]

"""The API registry: adding an API is one package and one line in `dialects.apis.APIS`.
A throwaway API registered here (its line added to the tuple) gets its routes, with the
model in the URL; its envelope for every refusal on its paths, also those made before
its endpoint runs; its operations, tag and example in `/openapi.json`; its key header.
And no API package imports another (each package in the tuple, found from it)."""

from __future__ import annotations

from typing import Any

import grimp
import pytest

from parlance.core.accumulate import Completion
from parlance.core.errors import ParlanceError
from parlance.core.events import Event, TextDelta
from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest
from parlance.dialects import api, apis
from parlance.dialects.base import Call, CallFacts, ErrorResponse, Frame, Framing, Incoming
from parlance.dialects.shared.errors import status_of
from parlance.dialects.shared.wire import WireModel, parse_body
from parlance.engines.fake import FakeEngine
from tests.support.fake_app import make_app
from tests.support.real_engine import asgi_client


class ToyBody(WireModel):
    prompt: str
    stream: bool = False


def toy_error(error: ParlanceError) -> ErrorResponse:
    return ErrorResponse.of(error, status_of(error, {}), {"toy_error": error.message})


class ToyEncoder:
    def open(self) -> list[Frame]:
        return []

    def feed(self, event: Event) -> list[Frame]:
        return [Frame({"t": event.text})] if isinstance(event, TextDelta) else []

    def close(self) -> list[Frame]:
        return [Frame({"done": True})]

    def fail(self, error: ParlanceError) -> list[Frame]:
        return [Frame({"toy_error": error.message})]


class ToyChat:
    """Toy chat: a prompt in, text out."""

    framing: Framing = "sse"
    body_model = ToyBody

    def parse(self, incoming: Incoming) -> Call:
        body = parse_body(self.body_model, incoming.body)
        request = GenerationRequest(model=incoming.path["model"],
                                    prompts=(ChatInput((Message("user", body.prompt),)),))
        return Call(request, body.stream)

    def encoder(self, call: Call, served: CallFacts) -> ToyEncoder:
        return ToyEncoder()

    def render(self, call: Call, served: CallFacts, completion: Completion) -> dict[str, Any]:
        return {"text": completion.choice(0).text}

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return toy_error(error)


TOY = api.API(name="Toy", package="toy", prefixes=("/toy",), render_error=toy_error,
              routes=lambda services: api.Routes(generation=(
                  ("/toy/v1/{model}/chat", ToyChat()),)),
              examples={ToyBody: {"prompt": "Hello!"}}, key_headers=("x-toy-key",))


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apis, "APIS", (*apis.APIS, TOY))  # the one line


async def test_a_registered_api_is_served_documented_and_answers_in_its_envelope(registered):
    async with asgi_client(make_app(FakeEngine())) as http:
        answer = await http.post("/toy/v1/fake-model/chat", json={"prompt": "Hi"})
        assert answer.status_code == 200 and answer.json() == {"text": "Hello there!"}
        streamed = await http.post("/toy/v1/fake-model/chat", json={"prompt": "Hi",
                                                                     "stream": True})
        assert streamed.text.endswith('data: {"done":true}\n\n')
        for refused, status in [
                (await http.post("/toy/v1/fake-model/chat", json={}), 400),
                (await http.post("/toy/v1/no-such-model/chat", json={"prompt": "Hi"}), 404),
                (await http.post("/toy/v1/nothing/here", json={}), 404),  # no such route
                (await http.get("/toy/v1/fake-model/chat"), 405)]:  # before the endpoint
            assert refused.status_code == status
            assert set(refused.json()) == {"toy_error"}, refused.text
        document = (await http.get("/openapi.json")).json()
    op = document["paths"]["/toy/v1/{model}/chat"]["post"]
    assert op["tags"] == ["Toy"] and op["summary"] == "Toy chat: a prompt in, text out"
    assert op["requestBody"]["content"]["application/json"]["example"] == {"prompt": "Hello!"}
    assert {"name": "model", "in": "path", "required": True,
            "schema": {"type": "string"}} in op["parameters"]
    assert "Toy" in document["info"]["description"]


async def test_a_registered_api_names_where_its_key_may_come(registered):
    async with asgi_client(make_app(FakeEngine(), api_keys=("sk-toy",))) as http:
        bare = await http.post("/toy/v1/fake-model/chat", json={"prompt": "Hi"})
        assert bare.status_code == 401 and "x-toy-key" in bare.json()["toy_error"]
        keyed = await http.post("/toy/v1/fake-model/chat", json={"prompt": "Hi"},
                                headers={"x-toy-key": "sk-toy"})
        assert keyed.status_code == 200
        document = (await http.get("/openapi.json")).json()
    assert document["components"]["securitySchemes"]["x-toy-key"]["in"] == "header"


def test_every_path_goes_to_the_api_that_claims_it_most_closely():
    from parlance.server.routes import error_renderer

    owners = {path: next(a.name for a in apis.APIS if a.render_error is error_renderer(path))
              for path in ("/v1/chat/completions", "/v1/messages", "/messages/count_tokens",
                           "/api/chat", "/api/v1/chat", "/api/v0/embeddings", "/v1beta/x",
                           "/v1/models/m:generateContent", "/v1/models/m", "/elsewhere")}
    assert owners == {
        "/v1/chat/completions": "OpenAI", "/v1/messages": "Anthropic",
        "/messages/count_tokens": "Anthropic", "/api/chat": "Ollama",
        "/api/v1/chat": "LM Studio", "/api/v0/embeddings": "LM Studio",
        "/v1beta/x": "Gemini", "/v1/models/m:generateContent": "Gemini",
        "/v1/models/m": "OpenAI", "/elsewhere": "OpenAI"}


def test_every_api_has_its_own_name_package_and_examples():
    assert len({a.name for a in apis.APIS}) == len({a.package for a in apis.APIS}) == len(
        apis.APIS)
    for entry in apis.APIS:
        assert entry.examples, entry.name
        for model, example in entry.examples.items():
            model.model_validate(example)


def test_no_api_package_imports_another():
    """What they share lives in `dialects.shared`, `base`, `embedding_base` and `api`;
    `dialects.apis` sees them all, as the registry must."""
    graph = grimp.build_graph("parlance")
    packages = [f"parlance.dialects.{a.package}" for a in apis.APIS]
    for importer in packages:
        for imported in packages:
            if importer != imported:
                chain = graph.find_shortest_chain(importer=importer, imported=imported,
                                                  as_packages=True)
                assert chain is None, f"{importer} imports {imported}: {chain}"

"""Cross-site requests: a web page's simple POST from a foreign origin is refused and
does nothing; loopback and allowed origins pass with CORS headers (streams included),
preflights are answered; a foreign Host is refused when the server listens on loopback."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from parlance.cli.wiring import server_settings
from parlance.config import resolve_config
from parlance.engines.fake import FakeEngine
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from parlance.server.http.origins import CrossSiteGuard
from parlance.server.routes import error_renderer
from tests.support.fake_app import FAKE_SPEC, make_app

EVIL = "https://evil.example"
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}


def client_for(app, base_url: str = "http://127.0.0.1:8080") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base_url)


async def simple_post(client: httpx.AsyncClient, path: str, body: dict,
                      **headers: str) -> httpx.Response:
    """What a page can send without a preflight: a POST with a text/plain body."""
    return await client.post(path, content=json.dumps(body),
                             headers={"content-type": "text/plain", **headers})


@pytest.fixture
async def client(fake_engine: FakeEngine) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(make_app(fake_engine, bind_host="127.0.0.1")) as c:
        yield c


# -- origins ----------------------------------------------------------------------------------


async def test_a_foreign_page_cannot_unload_a_model() -> None:
    models = ServedModels([ServedModel(FAKE_SPEC, FakeEngine(), 1700000000)])
    async with client_for(create_app(models, ServerSettings())) as client:
        refused = await simple_post(client, "/api/v1/models/unload",
                                    {"instance_id": "fake-model"}, origin=EVIL)
        assert refused.status_code == 403
        assert refused.json() == {"error": {
            "type": "invalid_request", "code": "origin_not_allowed",
            "message": refused.json()["error"]["message"]}}
        assert EVIL in refused.json()["error"]["message"]
        assert "access-control-allow-origin" not in refused.headers
        assert [m.spec.id for m in models] == ["fake-model"]  # still loaded
        done = await client.post("/api/v1/models/unload", json={"instance_id": "fake-model"})
        assert done.status_code == 200 and list(models) == []  # control: no Origin, unloaded


async def test_a_foreign_page_cannot_run_a_chat(client, fake_engine) -> None:
    for path in ("/v1/chat/completions", "/chat/completions"):
        refused = await simple_post(client, path, CHAT, origin=EVIL)
        assert refused.status_code == 403
        error = refused.json()["error"]
        assert (error["type"], error["code"], error["param"]) == (
            "request_forbidden", "origin_not_allowed", None)
    assert fake_engine.requests == []


@pytest.mark.parametrize("path", ["/health", "/v1/models", "/api/v1/models", "/api/v1/nope"])
async def test_every_route_refuses_a_foreign_origin_in_its_own_envelope(client, path) -> None:
    refused = await client.get(path, headers={"origin": EVIL})
    assert refused.status_code == 403
    error = refused.json()["error"]
    lmstudio = path.startswith("/api/v1/")
    assert error["type"] == ("invalid_request" if lmstudio else "request_forbidden")
    assert ("param" in error) is not lmstudio  # OpenAI's envelope always has param


@pytest.mark.parametrize("origin", [
    "http://localhost:3000", "http://127.0.0.1", "https://127.9.9.9:8443", "http://[::1]:5173",
    "http://app.localhost", "HTTP://LOCALHOST:3000",
])
async def test_loopback_origins_pass_with_cors_headers(client, fake_engine, origin) -> None:
    answer = await simple_post(client, "/v1/chat/completions", CHAT, origin=origin)
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == origin
    assert "Origin" in answer.headers["vary"]
    assert len(fake_engine.requests) == 1


@pytest.mark.parametrize("origin", [
    "null", "http://localhost.evil.example", "http://127.0.0.1.nip.io", "file://",
    "http://[::1", "http://2130706433", "chrome-extension://abcdef",
])
async def test_origins_that_only_look_local_are_refused(client, origin) -> None:
    refused = await client.get("/health", headers={"origin": origin})
    assert refused.status_code == 403


async def test_no_origin_passes_without_cors_headers(client) -> None:
    answer = await client.post("/v1/chat/completions", json=CHAT)
    assert answer.status_code == 200
    assert "access-control-allow-origin" not in answer.headers


async def test_an_allowed_origin_gets_cors_and_its_preflight_answered(fake_engine) -> None:
    app = make_app(fake_engine, allowed_origins=("https://ui.example",))
    async with client_for(app) as client:
        preflight = await client.options("/v1/chat/completions", headers={
            "origin": "https://ui.example", "access-control-request-method": "POST",
            "access-control-request-headers": "Authorization, Content-Type, X-Stainless-OS"})
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == "https://ui.example"
        assert "POST" in preflight.headers["access-control-allow-methods"]
        allowed = preflight.headers["access-control-allow-headers"].split(", ")
        for header in ("authorization", "content-type", "x-api-key", "openai-beta",
                       "anthropic-version", "x-stainless-os"):
            assert header in allowed
        assert int(preflight.headers["access-control-max-age"]) > 0
        assert "Origin" in preflight.headers["vary"]

        answer = await client.post("/v1/chat/completions", json=CHAT,
                                   headers={"origin": "https://ui.example"})
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == "https://ui.example"

        refused = await client.options("/v1/chat/completions", headers={
            "origin": "https://other.example", "access-control-request-method": "POST"})
        assert refused.status_code == 403
        assert "access-control-allow-origin" not in refused.headers
        assert (await client.post("/v1/chat/completions", json=CHAT,
                                  headers={"origin": "https://other.example"})
                ).status_code == 403


async def test_star_allows_every_origin(fake_engine) -> None:
    async with client_for(make_app(fake_engine, allowed_origins=("*",))) as client:
        answer = await client.get("/health", headers={"origin": EVIL})
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == EVIL


async def test_a_stream_to_an_allowed_origin_carries_the_cors_header(client) -> None:
    origin = "http://localhost:3000"
    async with client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True},
                             headers={"origin": origin}) as answer:
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == origin
        assert answer.headers["content-type"].startswith("text/event-stream")
        lines = [line async for line in answer.aiter_lines() if line.startswith("data:")]
    assert lines[-1] == "data: [DONE]"


# -- hosts (DNS rebinding) --------------------------------------------------------------------


@pytest.mark.parametrize("host", [
    "evil.example", "evil.example:8080", "127.0.0.1.nip.io", "localhost.evil.example",
    "192.168.1.5:8080", "[::ffff:7f00:1]",
])
async def test_a_foreign_host_is_refused_on_loopback(client, fake_engine, host) -> None:
    refused = await simple_post(client, "/v1/chat/completions", CHAT, host=host)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "host_not_allowed"
    lmstudio = await client.get("/api/v1/models", headers={"host": host})
    assert lmstudio.status_code == 403 and lmstudio.json()["error"]["type"] == "invalid_request"
    assert fake_engine.requests == []


@pytest.mark.parametrize("host", [
    "localhost", "localhost:8080", "LOCALHOST.", "127.0.0.1", "127.1.2.3:80", "[::1]",
    "[::1]:8080", "ui.localhost:8080",
])
async def test_loopback_hosts_pass(client, host) -> None:
    assert (await client.get("/health", headers={"host": host})).status_code == 200


@pytest.mark.parametrize(("settings", "host", "status"), [
    ({"bind_host": "127.0.0.1", "allowed_hosts": ("parlance.lan",)}, "parlance.lan:8080", 200),
    ({"bind_host": "127.0.0.1", "allowed_hosts": ("parlance.lan",)}, "other.lan", 403),
    ({"bind_host": "127.0.0.1", "allowed_hosts": ("*",)}, "evil.example", 200),
    ({"bind_host": "::1"}, "evil.example", 403),
    ({"bind_host": "localhost"}, "evil.example", 403),
    ({"bind_host": "0.0.0.0"}, "192.168.1.5:8080", 200),  # listening on the network
    ({"bind_host": "0.0.0.0", "allowed_hosts": ("parlance.lan",)}, "192.168.1.5", 403),
    ({"bind_host": "0.0.0.0", "allowed_hosts": ("parlance.lan",)}, "PARLANCE.LAN", 200),
    ({}, "evil.example", 200),  # an embedded app, which does not know where it listens
])
async def test_host_check_follows_the_bind_address_and_allow_list(
    fake_engine, settings, host, status,
) -> None:
    async with client_for(make_app(fake_engine, **settings)) as client:
        assert (await client.get("/health", headers={"host": host})).status_code == status


async def test_parlance_serve_checks_hosts_by_default(tmp_path: Path, fake_engine) -> None:
    """The CLI's settings: bound to 127.0.0.1 unless --host says otherwise."""
    config, _ = resolve_config({"data_dir": str(tmp_path)}, {}, None)
    settings = server_settings(config)
    assert settings.bind_host == "127.0.0.1"
    models = ServedModels([ServedModel(FAKE_SPEC, fake_engine, 1700000000)])
    async with client_for(create_app(models, settings), "http://evil.example:8080") as client:
        assert (await client.get("/health")).status_code == 403
    config, _ = resolve_config(
        {"data_dir": str(tmp_path), "allowed_origin": ["https://ui.example"]},
        {"PARLANCE_ALLOWED_HOST": "a.lan, b.lan", "PARLANCE_DOWNLOAD_ALLOW_HOST": "nas.lan"},
        None)
    settings = server_settings(config)
    assert settings.allowed_origins == ("https://ui.example",)
    assert settings.allowed_hosts == ("a.lan", "b.lan")
    assert settings.download_allow_hosts == ("nas.lan",)


# -- WebSocket handshakes (browsers apply no CORS to them) ------------------------------------


def websocket_app(settings: ServerSettings) -> CrossSiteGuard:
    async def greet(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text("open")
        await websocket.close()

    return CrossSiteGuard(Starlette(routes=[WebSocketRoute("/v1/responses", greet)]), settings,
                          render=error_renderer)


@pytest.mark.parametrize(("headers", "code"), [
    ({"origin": EVIL}, "origin_not_allowed"),
    ({"host": "evil.example"}, "host_not_allowed"),
])
def test_a_websocket_handshake_obeys_the_same_rules(headers: dict, code: str) -> None:
    app = websocket_app(ServerSettings(bind_host="127.0.0.1"))
    url = "ws://127.0.0.1:8080/v1/responses"
    with TestClient(app) as client:
        with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect(
                url, headers=headers):
            pass
        assert denied.value.status_code == 403
        error = denied.value.json()["error"]
        assert (error["type"], error["code"]) == ("request_forbidden", code)
        for passing in ({}, {"origin": "http://localhost:3000"}):  # control
            with client.websocket_connect(url, headers=passing) as websocket:
                assert websocket.receive_text() == "open"


def test_a_server_without_denial_responses_gets_a_close() -> None:
    guard = websocket_app(ServerSettings())

    async def without_extensions(scope: Scope, receive: Receive, send: Send) -> None:
        await guard({**scope, "extensions": {}}, receive, send)

    with (TestClient(without_extensions) as client, pytest.raises(WebSocketDisconnect) as closed,
          client.websocket_connect("ws://127.0.0.1/v1/responses", headers={"origin": EVIL})):
        pass
    assert closed.value.code == 1008 and not isinstance(closed.value, WebSocketDenialResponse)


@pytest.mark.parametrize(("settings", "host", "origin", "status"), [
    # the page served under an allowed name posts with its own origin
    ({"bind_host": "0.0.0.0", "allowed_hosts": ("parlance.lan",)},
     "parlance.lan:8080", "http://parlance.lan:8080", 200),
    ({"bind_host": "0.0.0.0", "allowed_hosts": ("parlance.lan",)},
     "parlance.lan:8080", "http://parlance.lan:9999", 403),  # another port: another site
    ({"bind_host": "0.0.0.0", "allowed_hosts": ("parlance.lan",)},
     "parlance.lan", "http://evil.example", 403),
    # a name nobody allowed (a rebound page's own) is no same origin
    ({"bind_host": "0.0.0.0"}, "evil.example:8080", "http://evil.example:8080", 403),
    ({"bind_host": "0.0.0.0", "allowed_hosts": ("*",)},
     "evil.example:8080", "http://evil.example:8080", 403),
])
async def test_a_page_served_under_an_allowed_host_may_post_to_it(
    fake_engine, settings, host, origin, status,
) -> None:
    async with client_for(make_app(fake_engine, **settings)) as client:
        response = await client.post("/v1/chat/completions", headers={
            "host": host, "origin": origin}, json={
            "model": "fake-model", "messages": [{"role": "user", "content": "hi"}]})
        assert response.status_code == status, response.text

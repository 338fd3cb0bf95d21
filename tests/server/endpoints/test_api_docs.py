"""`GET /docs`: the vendored Swagger UI, loading nothing but the server's own files."""

from __future__ import annotations

import re

import httpx

from parlance.engines.fake import FakeEngine
from tests.support.fake_app import make_app


async def get(path: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=make_app(FakeEngine())),
                                 base_url="http://127.0.0.1") as client:
        return await client.get(path)


async def test_the_page_loads_only_files_the_server_serves():
    page = await get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "script-src" not in policy  # no inline script
    linked = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert linked and all(not re.match(r"[a-z]+:|//", link) for link in linked)
    for link in linked:
        asset = await get(f"/{link}")
        assert asset.status_code == 200, link
        assert asset.headers["content-type"].split(";")[0] in {"text/css", "text/javascript"}


async def test_the_viewer_reads_this_servers_document_and_asks_no_validator():
    script = (await get("/docs/docs.js")).text
    assert 'url: "openapi.json"' in script and "validatorUrl: null" in script


async def test_the_licence_and_version_are_shipped_with_the_bundle():
    assert "Apache License" in (await get("/docs/LICENSE")).text
    note = (await get("/docs/VENDORED.md")).text
    version = re.search(r"swagger-ui-dist@(\d+\.\d+\.\d+)", note)
    assert version is not None
    assert version.group(1) in (await get("/docs/swagger-ui-bundle.js")).text


async def test_any_other_file_is_not_found_in_openais_envelope():
    for name in ("index.html", "..%2Fdocument.py", "swagger-ui-bundle.js.map"):
        answer = await get(f"/docs/{name}")
        assert answer.status_code == 404
        # (a name with a slash, decoded, is no route at all: unknown_url)
        assert answer.json()["error"]["code"] in {"not_found", "unknown_url"}


async def test_the_viewers_files_carry_its_policy_and_are_not_sniffed():
    page = await get("/docs")
    script = await get("/docs/swagger-ui-bundle.js")
    assert script.headers["content-security-policy"] == page.headers["content-security-policy"]
    assert script.headers["x-content-type-options"] == "nosniff"
    assert script.headers["cache-control"].startswith("public, max-age=")


async def test_a_missing_file_is_the_same_404_as_the_web_pages():
    """One rule for every packaged file: the app's unknown URL, in the path's envelope."""
    docs, web = await get("/docs/nope.js"), await get("/web/nope.js")
    assert docs.status_code == web.status_code == 404
    assert docs.json()["error"]["code"] == web.json()["error"]["code"] == "unknown_url"


async def test_the_examples_name_a_model_this_server_has():
    """(issue 40 item 12: "Try it out" with `my-model` answered 404)"""
    document = (await get("/openapi.json")).json()
    chat = document["paths"]["/v1/chat/completions"]["post"]["requestBody"]
    example = chat["content"]["application/json"]["example"]
    assert example["model"] == "fake-model"
    assert "my-model" not in (await get("/openapi.json")).text
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=make_app(FakeEngine())),
                                 base_url="http://127.0.0.1") as client:
        tried = await client.post("/v1/chat/completions", json=example)
    assert tried.status_code == 200

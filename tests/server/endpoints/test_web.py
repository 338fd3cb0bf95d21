"""The web chat page's endpoint: browsers get the page at `/`, every other client the
plain liveness answer; the page's files are served with a same-origin-only policy, and
every module the page imports (or loads when a PDF is attached) is one of them."""

from __future__ import annotations

import re

from parlance.server.endpoints.web import POLICY, page_files

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


async def test_a_browser_gets_the_page(client):
    response = await client.get("/", headers={"accept": BROWSER})
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["content-security-policy"] == POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    assert '<script type="module" src="/web/app.js">' in response.text


async def test_clients_probing_the_root_keep_the_liveness_answer(client):
    for accept in (None, "*/*", "application/json"):
        headers = {} if accept is None else {"accept": accept}
        response = await client.get("/", headers=headers)
        assert response.status_code == 200 and response.text == "Parlance is running"
    head = await client.head("/", headers={"accept": BROWSER})
    assert head.status_code == 200 and "text/plain" in head.headers["content-type"]


async def test_the_page_files_are_served_with_their_types(client):
    script = await client.get("/web/app.js")
    assert script.status_code == 200
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert script.headers["content-security-policy"] == POLICY
    style = await client.get("/web/style.css")
    assert style.headers["content-type"] == "text/css; charset=utf-8"
    vendored = await client.get("/web/vendor/purify.es.js")
    assert vendored.status_code == 200 and "@license DOMPurify" in vendored.text
    module = await client.get("/web/vendor/pdfjs/pdf.worker.min.mjs")  # a module worker
    assert module.status_code == 200
    assert module.headers["content-type"] == "text/javascript; charset=utf-8"


async def test_nothing_else_is_served_from_the_package(client):
    for path in ("/web/nope.js", "/web/../endpoints/web.py", "/web/%2e%2e/__init__.py",
                 "/web/vendor/README.md", "/web/"):
        response = await client.get(path)
        assert response.status_code == 404, path
        assert "error" in response.json()
    assert (await client.post("/web/app.js")).status_code == 405


def test_every_module_the_page_imports_is_shipped():
    files = page_files()
    scripts = [name for name in files.names() if name.endswith(".js")]
    scripts += [name for name in files.names() if name.endswith(".mjs")]
    assert {"app.js", "api.js", "vendor/marked.esm.js", "vendor/purify.es.js",
            "vendor/pdfjs/pdf.min.mjs", "vendor/pdfjs/pdf.worker.min.mjs"} <= set(scripts)
    for name in scripts:
        folder = name.rpartition("/")[0]
        text = files.read(name).decode()
        imported = re.findall(r'^import[^"\n]*"(\./[^"]+)"', text, re.MULTILINE)
        loaded = re.findall(r'(?:import|new URL)\("(\./[^"]+)"', text)  # dynamic, a worker
        for target in imported + loaded:
            shipped = f"{folder}/{target[2:]}" if folder else target[2:]
            assert shipped in files, f"{name} imports {target}, which is not shipped"
    page = files.read("index.html").decode()
    for link in re.findall(r'(?:src|href)="/web/([^"]+)"', page):
        assert link in files, link

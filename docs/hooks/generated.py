"""Pages generated from the code at build time, so they never drift from it.

A page holds a marker, `<!-- generated: NAME -->`, that this mkdocs hook replaces with
Markdown built from the running code:

- `endpoints`: every HTTP route the server serves, from its own `/openapi.json` (an app
  on the scripted fake engine, asked in process: the document is built from the route
  table, so a new route appears here by itself), plus the WebSocket routes;
- `flags`: every `parlance serve` flag with its environment variable, default and help,
  from the `ServeConfig` fields the flags are generated from (`parlance.cli.reference`).

A route whose path no page documents, or a marker nobody knows, is a warning, and
`mkdocs build --strict` (in `make check`) fails on it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.generated")
MARKER = re.compile(r"<!--\s*generated:\s*([a-z-]+)\s*-->")

# Which docs page explains an API's routes, by its OpenAPI tag (the API's name), where one
# page explains them all; relative to docs/.
TAG_PAGES: dict[str, str] = {
    "Gemini": "apis/gemini.md",
    "System One": "apis/decisions.md",
    "Mistral": "apis/fim.md",
}
# Otherwise, which page explains a path (longest prefix wins).
PAGES: tuple[tuple[str, str], ...] = (
    ("/v1/chat/completions", "apis/openai-chat.md"),
    ("/chat/completions", "apis/openai-chat.md"),
    ("/v1/completions", "apis/openai-completions.md"),
    ("/completions", "apis/openai-completions.md"),
    ("/v1/responses", "apis/openai-responses.md"),
    ("/responses", "apis/openai-responses.md"),
    ("/v1/messages", "apis/anthropic.md"),
    ("/messages", "apis/anthropic.md"),
    ("/v1/embeddings", "apis/embeddings.md"),
    ("/embeddings", "apis/embeddings.md"),
    ("/api/v0/embeddings", "apis/embeddings.md"),
    ("/api/embed", "apis/embeddings.md"),
    ("/api/embeddings", "apis/embeddings.md"),
    ("/v1/decisions", "apis/decisions.md"),
    ("/decisions", "apis/decisions.md"),
    ("/infill", "apis/fim.md"),
    ("/rerank", "apis/rerank.md"),
    ("/reranking", "apis/rerank.md"),
    ("/v1/rerank", "apis/rerank.md"),
    ("/v1/reranking", "apis/rerank.md"),
    ("/v2/rerank", "apis/rerank.md"),
    ("/tokenize", "apis/tokenize.md"),
    ("/detokenize", "apis/tokenize.md"),
    ("/apply-template", "apis/tokenize.md"),
    ("/api/v1", "apis/lmstudio.md"),
    ("/api/", "apis/ollama.md"),
    ("/v1/models", "apis/index.md"),
    ("/health", "apis/index.md"),
    ("/metrics", "apis/index.md"),
    ("/openapi.json", "apis/index.md"),
    ("/docs", "apis/index.md"),
    ("/parlance/conversations", "web-chat.md"),
    ("/web/", "web-chat.md"),
    ("/", "web-chat.md"),
)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        make = GENERATORS.get(name)
        if make is None:
            log.warning("%s: no generator named %r", page.file.src_uri, name)
            return match.group(0)
        return make(page.file.src_uri)

    return MARKER.sub(fill, markdown)


# ---- endpoints ----------------------------------------------------------------------

def _served_app() -> Any:
    """The app `parlance serve` builds, on the scripted fake engine (no model needed)."""
    from parlance.engines.fake import FakeEngine
    from parlance.models.registry import ModelSpec
    from parlance.models.served import ServedModel, ServedModels
    from parlance.server import ServerSettings, create_app

    spec = ModelSpec(id="docs-model", locate=lambda: Path("/dev/null"))
    return create_app(ServedModels([ServedModel(spec, FakeEngine(), 0)]), ServerSettings())


def _get(app: Any, path: str) -> bytes:
    """One GET through the app, in process (a plain ASGI call: no HTTP client needed)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "headers": [(b"host", b"127.0.0.1")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    if sent[0].get("status") != 200:
        raise RuntimeError(f"GET {path}: status {sent[0].get('status')}")
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def _page_of(path: str) -> str | None:
    """The page of the longest prefix of `path` in PAGES ("/" matches itself only)."""
    matches = [(prefix, page) for prefix, page in PAGES
               if path == prefix
               or (prefix != "/" and path.startswith(prefix.rstrip("/") + "/"))]
    return max(matches, key=lambda match: len(match[0]))[1] if matches else None


def _link(target: str, here: str) -> str:
    """`target` (relative to docs/) as a link from the page `here`."""
    depth = here.count("/")
    return "../" * depth + target


_ANSWERS = {"application/json": "JSON", "text/event-stream": "SSE",
            "application/x-ndjson": "NDJSON", "text/plain": "text", "text/html": "HTML"}


def _answers(operation: dict[str, Any]) -> str:
    content = operation.get("responses", {}).get("200", {}).get("content", {})
    return ", ".join(dict.fromkeys(_ANSWERS.get(kind, kind) for kind in content)) or "—"


def _summary(text: str) -> str:
    """An operation's summary (its dialect's or route's own words), safe in a table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def endpoints_markdown(here: str) -> str:
    from starlette.routing import WebSocketRoute

    app = _served_app()
    document = json.loads(_get(app, "/openapi.json"))
    rows: dict[str, list[tuple[str, str, str, str]]] = {}
    for path, operations in document["paths"].items():
        for method, op in operations.items():
            tag = (op.get("tags") or ["Server"])[0]
            rows.setdefault(tag, []).append((method.upper(), path, _summary(op["summary"]),
                                             _answers(op)))
    for route in app.router.routes:  # no OpenAPI form: each shares a POST route's path
        if isinstance(route, WebSocketRoute):
            post = document["paths"].get(route.path, {}).get("post", {})
            tag = (post.get("tags") or ["Server"])[0]
            rows.setdefault(tag, []).append(
                ("WebSocket", route.path, f"WebSocket mode of `POST {route.path}`: "
                 "requests as messages, each answered with its stream's events",
                 "JSON messages"))
    # `/v1/x` and its alias `/x` (as llama.cpp allows) are one row
    lines: list[str] = []
    for tag in sorted(rows, key=lambda t: (t == "Server", t)):
        lines += [f"### {tag}", "", "| method | path | what | answers | docs |",
                  "|---|---|---|---|---|"]
        entries = rows[tag]
        paths = {(m, p) for m, p, *_ in entries}
        for method, path, summary, answers in entries:
            if not path.startswith("/v1/") and (method, "/v1" + path) in paths:
                continue
            shown = f"`{path}`"
            if path.startswith("/v1/") and (method, path.removeprefix("/v1")) in paths:
                shown += f" (also `{path.removeprefix('/v1')}`)"
            page = TAG_PAGES.get(tag) or _page_of(path)
            if page is None:
                log.warning("%s %s: no docs page explains it (add it to PAGES in %s)",
                            method, path, Path(__file__).name)
                cell = ""
            else:
                cell = f"[{Path(page).stem}]({_link(page, here)})"
            lines.append(f"| {method} | {shown} | {summary} | {answers} | {cell} |")
        lines.append("")
    return "\n".join(lines)


# ---- flags --------------------------------------------------------------------------

def flags_markdown(here: str) -> str:
    """The rows `parlance.cli.reference` makes from the `ServeConfig` fields the flags
    themselves are generated from."""
    from parlance.cli.reference import flags_markdown as from_fields

    return str(from_fields())


def families_markdown(here: str) -> str:
    """The model families' table, from the format registry (`parlance.engines.parsing.
    formats`) the engine itself detects, parses and forces with."""
    from parlance.engines.parsing.formats import family_table_markdown

    return family_table_markdown()


GENERATORS: dict[str, Callable[[str], str]] = {
    "endpoints": endpoints_markdown,
    "flags": flags_markdown,
    "families": families_markdown,
}

"""One running server, reached over its HTTP API (httpx2, a dependency already). Every
failure becomes a `ServerError` whose message fits on one line: no server at the URL, a
refused key, an unknown model: each in the server's own words where it gave any."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2

from parlance.console.errors import ServerError as ServerError  # (re-exported)
from parlance.console.wire import decoded

DEFAULT_URL = "http://127.0.0.1:8080"
URL_ENV = "PARLANCE_URL"
KEY_ENV = "PARLANCE_API_KEY"

# Connecting is quick or never; an answer may wait for a model to load (minutes on a
# busy machine), and a stream is read for as long as it runs.
TIMEOUT = httpx2.Timeout(connect=10.0, read=None, write=60.0, pool=10.0)
STREAM = {"accept": "text/event-stream"}


def server_url(flag: str | None) -> str:
    return (flag or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")


def api_key(flag: str | None) -> str | None:
    return flag or os.environ.get(KEY_ENV) or None


def error_message(body: Any) -> str | None:
    """The message of any of the server's error envelopes: OpenAI's and LM Studio's
    `{"error": {"message"}}`, Anthropic's (the same inside `type: error`), Ollama's
    `{"error": "…"}`."""
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, str):
        return error
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return None


class Server:
    """A server at `url`, presenting `key` (as `Authorization: Bearer`) when given."""

    def __init__(self, url: str, key: str | None = None) -> None:
        self.url = url.rstrip("/")
        headers = {"authorization": f"Bearer {key}"} if key else {}
        self.http = httpx2.Client(base_url=self.url, headers=headers, timeout=TIMEOUT)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, path: str) -> dict[str, Any]:
        """The JSON object the server answers a GET of `path` with."""
        with self._failures():
            return _answer(self._checked(self.http.get(path)), f"GET {path}")

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._failures():
            return _answer(self._checked(self.http.post(path, json=body)), f"POST {path}")

    def send(self, method: str, path: str, body: dict[str, Any]) -> None:
        """A request whose answer says nothing but its status (Ollama's copy, delete)."""
        with self._failures():
            self._checked(self.http.request(method, path, json=body))

    @contextmanager
    def lines(self, path: str, body: dict[str, Any]) -> Iterator[Iterator[dict[str, Any]]]:
        """A POST whose answer streams NDJSON (Ollama's pull): its objects as they come.
        Leaving the block closes the stream."""
        with self._failures(), self.http.stream("POST", path, json=body) as answer:
            self._checked(answer)
            yield (decoded(line, "a line") for line in answer.iter_lines() if line.strip())

    @contextmanager
    def events(self, path: str, body: dict[str, Any]) -> Iterator[Iterator[dict[str, Any]]]:
        """A POST asking for server-sent events: each event's JSON data, until `[DONE]`
        (an answer that came as one JSON object instead: that object). Leaving the block
        closes the connection, which stops the generation."""
        with self._failures(), self.http.stream("POST", path, json=body,
                                                headers=STREAM) as answer:
            self._checked(answer)
            if answer.headers.get("content-type", "").startswith("application/json"):
                answer.read()
                yield iter([_answer(answer, f"POST {path}")])
            else:
                yield _sse_data(answer.iter_lines())

    @contextmanager
    def _failures(self) -> Iterator[None]:
        try:
            yield
        except httpx2.ConnectError:
            raise ServerError(f"no Parlance server answers at {self.url} (start one with "
                              "`parlance serve`, or name another with --url or "
                              f"{URL_ENV})") from None
        except httpx2.TransportError as exc:
            raise ServerError(f"the connection to {self.url} failed: "
                              f"{exc or type(exc).__name__}") from None

    def _checked(self, answer: httpx2.Response) -> httpx2.Response:
        if answer.status_code < 400:
            return answer
        answer.read()
        try:
            said = error_message(answer.json())
        except ValueError:
            said = None
        said = said or answer.reason_phrase or "no reason given"
        if answer.status_code == 401:
            raise ServerError(f"the server at {self.url} needs a valid API key: {said} "
                              f"(pass it with --api-key or {KEY_ENV})")
        raise ServerError(f"{said} (HTTP {answer.status_code})")


def _answer(answer: httpx2.Response, request: str) -> dict[str, Any]:
    return decoded(answer.text, f"an answer to {request}")


def _sse_data(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    data: list[str] = []
    for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            text = "\n".join(data)
            data = []
            if text == "[DONE]":
                return
            yield decoded(text, "an event")

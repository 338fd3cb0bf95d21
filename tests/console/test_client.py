"""`console.client`: the server's error envelopes read as one message, SSE data, and an
answer that came whole where a stream was asked for."""

from __future__ import annotations

import json

import httpx2
import pytest
from rich.console import Console

from parlance.console import commands
from parlance.console.client import (
    DEFAULT_URL,
    Server,
    _sse_data,
    api_key,
    error_message,
    server_url,
)


@pytest.mark.parametrize(("body", "message"), [
    ({"error": {"message": "bad", "type": "invalid_request_error"}}, "bad"),  # OpenAI, LM Studio
    ({"type": "error", "error": {"type": "x", "message": "worse"}}, "worse"),  # Anthropic
    ({"error": "model 'x' not found"}, "model 'x' not found"),  # Ollama
    ({"status": "success"}, None),
    ([1, 2], None),
])
def test_every_envelope(body, message):
    assert error_message(body) == message


def test_sse_data_until_done():
    lines = ["event: x", f"data: {json.dumps({'a': 1})}", "", ": ping", "",
             "data: {\"b\":", "data: 2}", "", "data: [DONE]", "", "data: {\"c\": 3}", ""]
    assert list(_sse_data(iter(lines))) == [{"a": 1}, {"b": 2}]


def test_flags_then_environment_then_default(monkeypatch):
    monkeypatch.delenv("PARLANCE_URL", raising=False)
    monkeypatch.delenv("PARLANCE_API_KEY", raising=False)
    assert server_url(None) == DEFAULT_URL and api_key(None) is None
    monkeypatch.setenv("PARLANCE_URL", "http://h:1/")
    monkeypatch.setenv("PARLANCE_API_KEY", "k")
    assert server_url(None) == "http://h:1" and api_key(None) == "k"
    assert server_url("http://f:2") == "http://f:2" and api_key("j") == "j"


def test_a_load_answered_at_once_is_read_as_its_stream_would_be():
    """LM Studio itself answers a load with its JSON whatever Accept says."""
    asked = []

    def lmstudio(request: httpx2.Request) -> httpx2.Response:
        asked.append(request.headers["accept"])
        return httpx2.Response(200, json={
            "type": "llm", "instance_id": "qwen/qwen3-4b", "load_time_seconds": 2.5,
            "status": "loaded", "load_config": {"context_length": 8192}})

    server = Server("http://lmstudio.test")
    server.http = httpx2.Client(base_url=server.url, transport=httpx2.MockTransport(lmstudio))
    err = Console(record=True, width=100, force_terminal=False)
    with server:
        assert commands.load(server, "qwen/qwen3-4b", None, err) == 0
    shown = err.export_text()
    assert asked == ["text/event-stream"]
    assert "Loaded qwen/qwen3-4b in 2.50s, context 8192" in shown
    assert "Loading qwen/qwen3-4b: 100%" in shown

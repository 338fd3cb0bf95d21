"""`console.client`: the server's error envelopes read as one message, and SSE data."""

from __future__ import annotations

import json

import pytest

from parlance.console.client import DEFAULT_URL, _sse_data, api_key, error_message, server_url


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

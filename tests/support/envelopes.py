"""The error envelope each API's clients parse, as a checker for any refusal: OpenAI's
`{"error": {message, type, param, code}}` on every path but `/api/v1/*` and `/api/v0/*`,
where LM Studio's `{"error": {type, message, code?, param?}}` is answered, the other
`/api/*`, where Ollama's `{"error": "message"}` is, `/v1/messages*`, where
Anthropic's `{"type": "error", "error": {type, message}, "request_id"}` is, and
Gemini's paths, where Google's `{"error": {code, message, status}}` is."""

from __future__ import annotations

from typing import Any

import httpx

from parlance.dialects.gemini.api import API as GEMINI
from tests.support import anthropic_contract, gemini_contract, ollama_contract
from tests.support.lmstudio_contract import check_error

OPENAI_TYPES = {"invalid_request_error", "authentication_error", "tokens_exceeded_error",
                "rate_limit_error", "timeout_error", "external_connector_error",
                "server_error"}


def checked_error(path: str, response: httpx.Response) -> dict[str, Any]:
    """The error object of a refusal, after checking its envelope is the one `path`'s
    API speaks."""
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    if GEMINI.prefix_length(path.partition("?")[0]):
        return gemini_contract.check_error(body)
    if path.startswith("/v1/messages"):
        return anthropic_contract.check_error(body)
    if path.startswith("/api/") and not path.startswith(("/api/v1/", "/api/v0/")):
        return {"message": ollama_contract.check_error(body)}
    if path.startswith(("/v1/fim/", "/fim/")):  # Mistral's envelope
        assert body["object"] == "error" and body["message"], body
        return body
    assert isinstance(body, dict) and set(body) == {"error"}, body
    error = body["error"]
    if path.startswith(("/v1/systemone", "/systemone", "/tokenize", "/detokenize",
                        "/apply-template", "/infill", "/rerank", "/reranking",
                        "/v1/rerank", "/v1/reranking", "/v2/rerank")):  # llama-server's
        assert set(error) == {"code", "message", "type"}, error
        assert error["code"] == response.status_code and error["message"], error
        return error
    if path.startswith("/api/"):
        check_error(error)
        return error
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"], error
    assert error["type"] in OPENAI_TYPES, error
    assert error["param"] is None or isinstance(error["param"], str), error
    assert error["code"] is None or isinstance(error["code"], str), error
    return error

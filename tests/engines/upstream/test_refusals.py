"""Upstream refusals in every shape the servers behind us send, as typed errors."""

from __future__ import annotations

import pytest

from parlance.core.errors import (
    ContextOverflow,
    EngineFailure,
    InvalidRequest,
    NotImplementedHere,
    Overloaded,
)
from parlance.engines.upstream.refusals import classify, parse_body, upstream_message


@pytest.mark.parametrize("status, body", [
    # vLLM 0.9+
    (400, {"error": {"message": "This model's maximum context length is 4096 tokens. However, "
                     "you requested 5000 tokens (4000 in the messages, 1000 in the "
                     "completion).", "type": "BadRequestError", "param": None, "code": 400}}),
    # vLLM before 0.9
    (400, {"object": "error", "message": "'max_tokens' or 'max_completion_tokens' is too "
           "large: 9000. This model's maximum context length is 4096 tokens and your request "
           "has 14 input tokens (9000 > 4096 - 14).", "type": "BadRequestError", "code": 400}),
    # llama-server
    (400, {"error": {"code": 400, "message": "the request exceeds the available context size, "
                     "try increasing it", "type": "exceed_context_size_error",
                     "n_prompt_tokens": 5000, "n_ctx": 4096}}),
    # Parlance / OpenAI
    (400, {"error": {"message": "too long", "type": "invalid_request_error",
                     "param": "messages", "code": "context_length_exceeded"}}),
    # SGLang
    (400, {"object": "error", "message": "Requested token count exceeds the model's maximum "
           "context length of 4096 tokens.", "type": "BadRequestError", "code": 400}),
])
def test_context_overflow_in_every_shape(status, body):
    refusal = classify(status, body)
    assert refusal.client_fault
    assert isinstance(refusal.error, ContextOverflow)
    assert refusal.error.code == "context_length_exceeded"


def test_bad_request_keeps_the_upstreams_words_and_param():
    refusal = classify(400, {"error": {"message": "tools[0] is invalid", "param": "tools",
                                       "type": "invalid_request_error", "code": "bad_tool"}})
    assert refusal.client_fault and isinstance(refusal.error, InvalidRequest)
    assert (refusal.error.message, refusal.error.param, refusal.error.code) == (
        "tools[0] is invalid", "tools", "bad_tool")


def test_fastapi_validation_detail():
    refusal = classify(422, parse_body(b'{"detail":[{"loc":["body","n"],"msg":"bad"}]}'))
    assert isinstance(refusal.error, InvalidRequest) and "bad" in refusal.error.message


def test_not_supported_is_the_clients_answer():
    refusal = classify(501, {"error": {"message": "tools need --jinja",
                                       "type": "not_supported_error"}})
    assert refusal.client_fault and isinstance(refusal.error, NotImplementedHere)


def test_busy_replica_is_tried_elsewhere_and_keeps_retry_after():
    refusal = classify(429, {"error": {"message": "queue full"}}, retry_after="7")
    assert not refusal.client_fault
    assert isinstance(refusal.error, Overloaded) and refusal.error.retry_after == 7.0


@pytest.mark.parametrize("status", [401, 403, 404, 500, 502, 503])
def test_replica_faults_are_tried_elsewhere(status):
    refusal = classify(status, parse_body(b"<html>oops</html>"))
    assert not refusal.client_fault and isinstance(refusal.error, EngineFailure)


@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_a_replica_fault_says_its_status_never_what_the_body_held(status):
    body = {"error": {"message": "password=hunter2 at /srv/app/secret.py", "type": "x"}}
    refusal = classify(status, body)
    assert "hunter2" not in refusal.error.message and "secret" not in refusal.error.message
    assert str(status) in refusal.error.message
    assert upstream_message(body) == "password=hunter2 at /srv/app/secret.py"  # for the log

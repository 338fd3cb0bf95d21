"""Every kind of error, in every dialect's envelope: each `ParlanceError` subclass (found
by walking the class tree, so a new kind cannot be left out) renders with a status
from that API's set, in its envelope, with one of its error types. The envelopes are
every registered API's and its dialects' (`dialects.apis.APIS`), so a new API cannot be
left out either."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from openai.types.shared import ErrorObject

from parlance.core.errors import ParlanceError
from parlance.dialects.api import Services
from parlance.dialects.apis import APIS
from parlance.dialects.base import ErrorResponse
from parlance.dialects.shared.sealed import Sealer
from tests.support import anthropic_contract, lmstudio_contract, ollama_contract
from tests.support.error_kinds import ALL_KINDS, instance

# OpenAI's SDK raises a typed error for 400/401/403/404/409/422/429 and 5xx and retries
# 408; its MCP connector answers 424; 405, 413 and 501 are HTTP's own.
# 502: a gateway's own status when an upstream it relays failed (`UpstreamFailure`); each
# SDK reads any 5xx as a server error. 507: a model download with no room on disk
# (`InsufficientStorage`, only on the model-management routes), a 5xx to every SDK.
# 422: a model whose file llama.cpp cannot load (`ModelUnusable`), as vLLM answers it.
OPENAI_STATUSES = {400, 401, 403, 404, 405, 408, 413, 422, 424, 429, 500, 501, 502, 503, 507}
OPENAI_TYPES = {"invalid_request_error", "authentication_error", "request_forbidden",
                "tokens_exceeded_error", "rate_limit_error", "timeout_error",
                "external_connector_error", "server_error"}
# Anthropic documents 400/401/403/404/413/429/500/504/529, with any other 4xx an
# invalid_request_error; 405 and 503 are HTTP's own (a draining server)
ANTHROPIC_STATUSES = {400, 401, 403, 404, 405, 413, 422, 429, 500, 502, 503, 504, 507, 529}
ANTHROPIC_TYPE_OF = {400: "invalid_request_error", 401: "authentication_error",
                     403: "permission_error", 404: "not_found_error",
                     413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                     504: "timeout_error", 529: "overloaded_error"}
# Ollama documents 400/404/429/500/502 (401/413 for its cloud); its server answers a
# full queue with 503; 403, 405 and 504 are HTTP's own
OLLAMA_STATUSES = {400, 401, 403, 404, 405, 413, 422, 429, 500, 502, 503, 504, 507}
LMSTUDIO_STATUSES = {400, 401, 403, 404, 405, 408, 413, 422, 429, 500, 501, 502, 503, 507}

def check_openai(rendered: ErrorResponse) -> None:
    assert rendered.status in OPENAI_STATUSES
    assert set(rendered.body) == {"error"}
    assert set(rendered.body["error"]) == {"message", "type", "param", "code"}
    error = ErrorObject.model_validate(rendered.body["error"])
    assert error.type in OPENAI_TYPES and error.message


def check_anthropic(rendered: ErrorResponse) -> None:
    assert rendered.status in ANTHROPIC_STATUSES
    error = anthropic_contract.check_error(rendered.body)
    expected = ANTHROPIC_TYPE_OF.get(rendered.status) or (
        "api_error" if rendered.status >= 500 else "invalid_request_error")
    assert error["type"] == expected
    assert rendered.headers["request-id"] == rendered.body["request_id"]


def check_ollama(rendered: ErrorResponse) -> None:
    assert rendered.status in OLLAMA_STATUSES
    ollama_contract.check_error(rendered.body)


def check_lmstudio(rendered: ErrorResponse) -> None:
    assert rendered.status in LMSTUDIO_STATUSES
    assert set(rendered.body) == {"error"}
    lmstudio_contract.check_error(rendered.body["error"])


# Gemini's: google.rpc's codes as HTTP statuses (400/401/403/404/429/499/500/501/503/504);
# 405 and 413 are HTTP's own (a 413 named INVALID_ARGUMENT, a 405 FAILED_PRECONDITION)
GEMINI_STATUSES = {400, 401, 403, 404, 405, 408, 413, 422, 429, 500, 501, 502, 503, 504, 507}
GEMINI_NAMES = {"INVALID_ARGUMENT", "FAILED_PRECONDITION", "UNAUTHENTICATED",
                "PERMISSION_DENIED", "NOT_FOUND", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED",
                "INTERNAL", "UNIMPLEMENTED", "UNAVAILABLE"}


def check_gemini(rendered: ErrorResponse) -> None:
    assert rendered.status in GEMINI_STATUSES
    assert set(rendered.body) == {"error"}
    error = rendered.body["error"]
    assert set(error) == {"code", "message", "status"}
    assert error["code"] == rendered.status and error["message"]
    assert error["status"] in GEMINI_NAMES


# llama-server's own endpoints (System One, the token tools): the statuses of its
# System One wire-contract test, and HTTP's own
LLAMA_SERVER_STATUSES = {400, 401, 403, 404, 405, 408, 413, 422, 429, 500, 501, 502, 503,
                         504, 507}
LLAMA_SERVER_TYPES = {"invalid_request_error", "exceed_context_size_error",
                      "authentication_error", "not_found_error", "request_too_large_error",
                      "unprocessable_entity_error", "rate_limit_error", "not_supported_error",
                      "unavailable_error", "server_error"}


def check_llama_server(rendered: ErrorResponse) -> None:
    assert rendered.status in LLAMA_SERVER_STATUSES
    assert set(rendered.body) == {"error"}
    error = rendered.body["error"]
    assert set(error) == {"code", "message", "type"}
    assert error["code"] == rendered.status and error["message"]
    assert error["type"] in LLAMA_SERVER_TYPES


def check_mistral(rendered: ErrorResponse) -> None:
    assert 400 <= rendered.status < 600
    assert set(rendered.body) == {"object", "message", "type", "param", "code"}
    assert rendered.body["object"] == "error" and rendered.body["message"]


def check_any(rendered: ErrorResponse) -> None:
    """What every API's envelope holds to: an error status and a JSON object."""
    assert 400 <= rendered.status < 600
    assert isinstance(rendered.body, dict) and rendered.body


Renderer = Callable[[ParlanceError], ErrorResponse]
# Each API's own contract; an API not named here is held to `check_any` until it is
CHECKS: dict[str, Callable[[ErrorResponse], None]] = {
    "OpenAI": check_openai, "Anthropic": check_anthropic, "Ollama": check_ollama,
    "LM Studio": check_lmstudio, "Gemini": check_gemini, "System One": check_llama_server,
    "llama-server": check_llama_server, "Mistral": check_mistral}


def _renderers() -> dict[str, tuple[Renderer, Callable[[ErrorResponse], None]]]:
    """Every registered API's envelope, and every dialect of its routes' (`dialects.apis`)."""
    found: dict[str, tuple[Renderer, Callable[[ErrorResponse], None]]] = {}
    services = Services(Sealer.ephemeral())
    for entry in APIS:
        check = CHECKS.get(entry.name, check_any)
        found[entry.name] = (entry.render_error, check)
        made = entry.routes(services)
        speakers = [*made.generation, *made.embeddings, *made.counting, *made.answering]
        for path, speaker in speakers:
            found[f"{entry.name} {path}"] = (speaker.render_error, check)
        for listed in made.models:
            found[f"{entry.name} {listed.list_path}"] = (listed.listing.render_error, check)
    return found


DIALECTS = _renderers()


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda cls: cls.__name__)
def test_every_kind_renders_in_every_envelope(dialect, kind):
    render, check = DIALECTS[dialect]
    error = instance(kind)
    rendered = render(error)
    check(rendered)
    if error.retry_after is not None:
        assert int(rendered.headers["retry-after"]) >= 1


@pytest.mark.parametrize("kind", [cls for cls in ALL_KINDS if cls is not ParlanceError],
                         ids=lambda cls: cls.__name__)
def test_every_kind_names_itself_and_its_status(kind):
    """A kind falls back on nothing by accident: it, or the kind it refines, declares
    its name for the access log and its default status."""
    declaring = next(cls for cls in kind.__mro__ if "status" in vars(cls))
    assert declaring is not ParlanceError, f"{kind.__name__} declares no status"
    assert kind.kind != ParlanceError.kind, f"{kind.__name__} declares no kind"


def test_the_walk_finds_the_kinds_below_kinds():
    names = {cls.__name__ for cls in ALL_KINDS}
    assert {"ServerShuttingDown", "ToolServerFailed", "ContextOverflow"} <= names

"""Property: no request body, however malformed, gets a 5xx from any POST route. A
refusal comes in the route's own error envelope, a stream that starts ends by its
dialect's contract, and `/health` still answers afterwards.

Bodies: arbitrary bytes, arbitrary JSON values, and valid-shaped bodies (several per
route) with one field, declared by the route's wire model or present in the body at
any depth, replaced by raw JSON text: a value of another type, deep nesting, huge or
non-finite numbers, lone surrogates, NULs, huge lists, or removed. The app runs over
the fake engine without a models directory, and any attempt to open a network
connection fails the test (the download route must refuse before reaching out).

Also hostile input that is not a body: `starting_after` cursors of a Responses stream
replay, and GGUF headers a download could plant in the models directory (nesting
thousands deep, counts and lengths past the file, truncation, flipped bytes), read by
the header reader itself: a header or a ValueError, nothing else."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from parlance.dialects.anthropic.request import MessagesRequest
from parlance.dialects.api import Services
from parlance.dialects.apis import APIS
from parlance.dialects.gemini.embed import BatchEmbedRequest, EmbedContentRequest
from parlance.dialects.gemini.request import CountTokensRequest, GenerateContentRequest
from parlance.dialects.llamaserver.infill import InfillBody
from parlance.dialects.llamaserver.rerank import RerankBody
from parlance.dialects.llamaserver.tokens import DetokenizeBody, TokenizeBody
from parlance.dialects.lmstudio.models import DownloadRequest, LoadRequest, UnloadRequest
from parlance.dialects.lmstudio.request import ChatRequest as LMStudioChatRequest
from parlance.dialects.mistral import FIMBody
from parlance.dialects.ollama.embed import EmbedBody as OllamaEmbedBody
from parlance.dialects.ollama.embed import EmbeddingsBody as OllamaEmbeddingsBody
from parlance.dialects.ollama.models import (
    CopyRequest,
    DeleteRequest,
    PullRequest,
    ShowRequest,
)
from parlance.dialects.ollama.request import ChatRequest as OllamaChatRequest
from parlance.dialects.ollama.request import GenerateRequest as OllamaGenerateRequest
from parlance.dialects.openai.chat import ChatRequest
from parlance.dialects.openai.completions import CompletionRequest
from parlance.dialects.openai.decisions import DecisionsBody
from parlance.dialects.openai.embeddings import EmbeddingsBody
from parlance.dialects.openai.responses.compact import ResponsesCompaction
from parlance.dialects.openai.responses.request import ResponsesRequest
from parlance.dialects.shared.sealed import Sealer
from parlance.dialects.systemone import SystemOneBody
from parlance.engines.fake import FakeEngine
from parlance.models.gguf import GgufHeader, read_gguf_header
from tests.support.anthropic_contract import stream_events
from tests.support.envelopes import checked_error
from tests.support.fake_app import make_app
from tests.support.gemini_contract import stream_chunks
from tests.support.lmstudio_contract import checked_events
from tests.support.ollama_contract import check_stream
from tests.support.sse import sse_data

HOLE = "@@fuzzed@@"  # stands for the mutated value until the body is written out
REMOVED = object()
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}


@dataclass(frozen=True)
class PostRoute:
    path: str
    wire: type[BaseModel]  # its declared fields are mutated too, present in a body or not
    bodies: tuple[dict[str, Any], ...]
    examples: int = 200
    method: str = "POST"


CHAT_BODIES = (
    {"model": "fake-model", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
    {"model": "fake-alias", "stream": True, "n": 2, "seed": 1, "logit_bias": {"5": 1.0},
     "stop": ["x"], "tools": [TOOL], "tool_choice": "auto", "logprobs": True,
     "top_logprobs": 2, "stream_options": {"include_usage": True},
     "response_format": {"type": "json_schema",
                         "json_schema": {"name": "w", "schema": SCHEMA}},
     "messages": [{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "c1", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "Sunny"}]},
)
COMPLETION_BODIES = (
    {"model": "fake-model", "prompt": "Once", "max_tokens": 4},
    {"model": "fake-model", "prompt": [[1, 2, 3], [4, 5]], "n": 2, "echo": True,
     "logprobs": 2, "stream": True, "temperature": 0.5, "repeat_penalty": 1.1},
    {"model": "fake-model", "prompt": ["a", "b"], "suffix": "z", "best_of": 1, "top_k": 3},
)
RESPONSES_BODIES = (
    {"model": "fake-model", "input": "Hi", "max_output_tokens": 16},
    {"model": "fake-model", "stream": True, "instructions": "Be brief.", "store": False,
     "metadata": {"k": "v"}, "reasoning": {"effort": "low"}, "truncation": "auto",
     "text": {"format": {"type": "json_schema", "name": "w", "schema": SCHEMA}},
     "tools": [{"type": "function", "name": "get_weather", "parameters": SCHEMA}],
     "tool_choice": {"type": "function", "name": "get_weather"},
     "input": [{"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
               {"type": "function_call", "call_id": "c1", "name": "get_weather",
                "arguments": "{}"},
               {"type": "function_call_output", "call_id": "c1", "output": "Sunny"}]},
    {"model": "fake-model", "input": "Hi", "previous_response_id": "resp_0",
     "tools": [{"type": "mcp", "server_label": "x", "server_url": "http://127.0.0.1:9/mcp",
                "require_approval": "never"}]},
)
MESSAGES_BODIES = (
    {"model": "fake-model", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]},
    {"model": "claude-x", "max_tokens": 8, "stream": True, "system": [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
     "stop_sequences": ["x"], "temperature": 0.5, "top_k": 3,
     "thinking": {"type": "adaptive"}, "metadata": {"user_id": "u"},
     "tools": [{"name": "get_weather", "input_schema": SCHEMA}],
     "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
     "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "t1",
                                                      "name": "get_weather",
                                                      "input": {"city": "Rome"}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                "content": "Sunny", "is_error": False}]}]},
)
LMSTUDIO_BODIES = (
    {"model": "fake-model", "input": "Hi"},
    {"model": "fake-model", "stream": True, "system_prompt": "Be brief.", "store": False,
     "input": [{"type": "text", "content": "Hi"}, {"type": "message", "content": "there"}],
     "temperature": 0.2, "top_k": 3, "min_p": 0.1, "top_p": 0.9, "repeat_penalty": 1.1,
     "reasoning": "off", "max_output_tokens": 4, "tool_choice": "auto"},
    {"model": "fake-model", "input": "Hi", "previous_response_id": "resp_0",
     "context_length": 1024,
     "integrations": ["mcp/none", {"type": "ephemeral_mcp", "server_label": "x",
                                   "server_url": "http://127.0.0.1:9/mcp"}]},
)
OLLAMA_CHAT_BODIES = (
    {"model": "fake-model", "messages": [{"role": "user", "content": "Hi"}]},
    {"model": "fake-alias", "stream": False, "think": "low", "format": SCHEMA,
     "keep_alive": "1h30m", "logprobs": True, "top_logprobs": 2, "truncate": False,
     "options": {"temperature": 0.2, "top_k": 3, "top_p": 0.9, "min_p": 0.1, "seed": 7,
                 "num_predict": 4, "stop": ["x"], "repeat_penalty": 1.1,
                 "repeat_last_n": -1, "num_ctx": 512, "num_keep": 4},
     "tools": [TOOL],
     "messages": [{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "Weather?", "images": []},
                  {"role": "assistant", "content": "", "thinking": "Hm.", "tool_calls": [
                      {"function": {"index": 0, "name": "get_weather",
                                    "arguments": {"city": "Rome"}}}]},
                  {"role": "tool", "tool_name": "get_weather", "content": "Sunny"}]},
    {"model": "fake-model", "messages": [], "keep_alive": 0},
)
OLLAMA_GENERATE_BODIES = (
    {"model": "fake-model", "prompt": "Why?"},
    {"model": "fake-model", "prompt": "Why?", "system": "Be brief.", "stream": False,
     "think": True, "format": "json", "context": [1, 2, 3], "keep_alive": -1,
     "options": {"temperature": 0, "num_predict": 8}},
    {"model": "fake-model", "prompt": "def f(", "suffix": "return", "raw": False},
    {"model": "fake-model", "prompt": "[INST] hi [/INST]", "raw": True, "keep_alive": "5m"},
    {"model": "fake-model"},
)

EMBEDDINGS_BODIES = (
    {"model": "fake-model", "input": "Hi there"},
    {"model": "fake-alias", "input": ["a b", "c"], "encoding_format": "base64",
     "dimensions": 8, "user": "u"},
    {"input": [[1, 2, 3], [4]], "encoding_format": "float"},
)
OLLAMA_EMBED_BODIES = (
    {"model": "fake-model", "input": ["a b", "c"], "truncate": False, "dimensions": 4,
     "keep_alive": "1m", "options": {"num_ctx": 512}},
    {"model": "fake-model:latest", "input": ""},
)

GEMINI_CONTENTS = [{"role": "user", "parts": [{"text": "Hi"}]}]
GEMINI_BODIES = (
    {"contents": GEMINI_CONTENTS, "generationConfig": {"maxOutputTokens": 4}},
    {"contents": [*GEMINI_CONTENTS,
                  {"role": "model", "parts": [
                      {"text": "Hmm", "thought": True},
                      {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}},
                       "thoughtSignature": "skip_thought_signature_validator"}]},
                  {"role": "user", "parts": [{"functionResponse": {
                      "name": "get_weather", "response": {"output": "Sunny"}}}]}],
     "systemInstruction": {"parts": [{"text": "Be brief."}]},
     "tools": [{"functionDeclarations": [{"name": "get_weather", "parameters": {
         "type": "OBJECT", "properties": {"city": {"type": "STRING"}},
         "required": ["city"]}}]}],
     "toolConfig": {"functionCallingConfig": {"mode": "ANY",
                                              "allowedFunctionNames": ["get_weather"]}},
     "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "OFF"}],
     "generationConfig": {"temperature": 0.5, "topK": 40.0, "candidateCount": 2,
                          "stopSequences": ["x"], "responseLogprobs": True, "logprobs": 2,
                          "thinkingConfig": {"includeThoughts": True,
                                             "thinkingBudget": 64}}},
    {"contents": GEMINI_CONTENTS,
     "generationConfig": {"responseMimeType": "application/json",
                          "responseJsonSchema": SCHEMA}},
)
GEMINI_EMBED = {"content": {"parts": [{"text": "Hi"}]}, "outputDimensionality": 4,
                "taskType": "RETRIEVAL_QUERY"}
GEMINI = "/v1beta/models/fake-model"

DECISIONS_BODIES = (
    {"model": "fake-model", "input": "I was charged twice.",
     "questions": [{"type": "predicate", "instructions": "Charged twice?", "name": "twice"},
                   {"type": "choice", "instructions": "Team?",
                    "choices": [{"value": "billing"}, {"value": True, "description": "d"}]},
                   {"type": "score", "instructions": "Urgency?",
                    "levels": [{"label": "low"}, {"label": "high", "description": "d"}]}]},
    {"model": "fake-model", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "Hi"}]}],
     "questions": [{"type": "predicate", "instructions": "Greeting?"}]},
)
SYSTEMONE_BODIES = (
    {"state": "I was charged twice.", "questions": {
        "route": {"type": "choice", "instructions": "Team?",
                  "criteria": {"billing": None, "shipping": "parcels"}},
        "angry": {"type": "noul", "instructions": "Angry?",
                  "criteria": {"true": "yes", "false": "no"}},
        "urgency": {"type": "score", "instructions": {"ask": "Urgency?"},
                    "criteria": ["low", "high"]}}},
    {"model": "jev-latest", "state": {"ticket": [1, 2]},
     "questions": {"q": {"type": "noul", "instructions": "Angry?"}}},
)

ROUTES = (
    PostRoute("/v1/chat/completions", ChatRequest, CHAT_BODIES),
    PostRoute("/v1/completions", CompletionRequest, COMPLETION_BODIES),
    PostRoute("/v1/responses", ResponsesRequest, RESPONSES_BODIES),
    PostRoute("/api/v1/chat", LMStudioChatRequest, LMSTUDIO_BODIES),
    PostRoute("/v1/messages", MessagesRequest, MESSAGES_BODIES),
    PostRoute("/v1/messages/count_tokens", MessagesRequest, MESSAGES_BODIES[:1], examples=40),
    PostRoute("/v1/responses/input_tokens", ResponsesRequest, RESPONSES_BODIES[:2]),
    PostRoute("/api/v1/models/load", LoadRequest,
              ({"model": "fake-model", "context_length": 512, "echo_load_config": True},)),
    PostRoute("/api/v1/models/unload", UnloadRequest, ({"instance_id": "fake-model"},)),
    PostRoute("/api/v1/models/download", DownloadRequest,
              ({"model": "https://example.invalid/owner/repo/model.gguf"},)),
    PostRoute("/api/show", ShowRequest, ({"model": "fake-model:latest", "verbose": True},
                                         {"name": "fake-alias"}), examples=60),
    PostRoute("/api/pull", PullRequest, ({"model": "fake-model", "stream": False},
                                         {"model": "https://example.invalid/m.gguf"},
                                         {"name": "llama3.2", "insecure": True}), examples=60),
    PostRoute("/api/copy", CopyRequest, ({"source": "fake-model", "destination": "x"},),
              examples=60),
    PostRoute("/api/delete", DeleteRequest, ({"model": "fake-alias"},), examples=60,
              method="DELETE"),
    PostRoute("/api/chat", OllamaChatRequest, OLLAMA_CHAT_BODIES),
    PostRoute("/api/generate", OllamaGenerateRequest, OLLAMA_GENERATE_BODIES),
    PostRoute("/v1/embeddings", EmbeddingsBody, EMBEDDINGS_BODIES),
    PostRoute("/api/v0/embeddings", EmbeddingsBody, EMBEDDINGS_BODIES[:1], examples=40),
    PostRoute("/api/embed", OllamaEmbedBody, OLLAMA_EMBED_BODIES, examples=100),
    PostRoute("/api/embeddings", OllamaEmbeddingsBody,
              ({"model": "fake-model", "prompt": "Hi", "keep_alive": "5m"},), examples=60),
    # the un-prefixed aliases share the handlers: fewer examples
    PostRoute("/chat/completions", ChatRequest, CHAT_BODIES, examples=40),
    PostRoute("/completions", CompletionRequest, COMPLETION_BODIES, examples=40),
    PostRoute("/responses", ResponsesRequest, RESPONSES_BODIES, examples=40),
    PostRoute("/v1/responses/compact", ResponsesCompaction.body_model, (
        {"model": "fake-model", "input": [{"role": "user", "content": "Hi"}]},), examples=40),
    PostRoute(f"{GEMINI}:generateContent", GenerateContentRequest, GEMINI_BODIES),
    PostRoute(f"{GEMINI}:streamGenerateContent?alt=sse", GenerateContentRequest,
              GEMINI_BODIES),
    PostRoute(f"{GEMINI}:streamGenerateContent", GenerateContentRequest, GEMINI_BODIES,
              examples=60),
    PostRoute(f"{GEMINI}:countTokens", CountTokensRequest, (
        {"contents": GEMINI_CONTENTS},
        {"generateContentRequest": {"model": "models/fake-model", **GEMINI_BODIES[1]}}),
        examples=60),
    PostRoute(f"{GEMINI}:embedContent", EmbedContentRequest, (GEMINI_EMBED,), examples=60),
    PostRoute(f"{GEMINI}:batchEmbedContents", BatchEmbedRequest, (
        {"requests": [{**GEMINI_EMBED, "model": "models/fake-model"}, GEMINI_EMBED]},),
        examples=60),
    PostRoute("/v1/models/fake-model:generateContent", GenerateContentRequest,
              GEMINI_BODIES[:1], examples=40),
    PostRoute("/v1/decisions", DecisionsBody, DECISIONS_BODIES, examples=60),
    PostRoute("/v1/systemone", SystemOneBody, SYSTEMONE_BODIES, examples=60),
    PostRoute("/tokenize", TokenizeBody, ({"content": "a b", "with_pieces": True},
                                          {"content": ["a", 0], "add_special": True}),
              examples=40),
    PostRoute("/detokenize", DetokenizeBody, ({"tokens": [0]},), examples=40),
    PostRoute("/apply-template", ChatRequest, CHAT_BODIES[:1], examples=40),
    PostRoute("/rerank", RerankBody, (
        {"query": "q", "documents": ["a", {"text": "b"}], "top_n": 1,
         "return_documents": True, "instruction": "i"},), examples=60),
    PostRoute("/infill", InfillBody, (
        {"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": "c"}],
         "prompt": "d", "n_predict": 4, "n_cmpl": 2, "response_fields": ["content"]},
        {"input_prefix": "a", "input_suffix": "b", "stream": True}), examples=60),
    PostRoute("/v1/fim/completions", FIMBody, (
        {"model": "fake-model", "prompt": "a", "suffix": "b", "max_tokens": 4,
         "stop": "\n", "random_seed": 1},
        {"prompt": "a", "stream": True}), examples=60),
)

# -- bodies ---------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12,
)

NASTY = (
    "NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1e-999", "9" * 30, "-" + "9" * 400,
    "1" * 5000, "1." + "0" * 5000, str(2**63), str(2**64), "-1", "0", "-0.0", "1e308",
    '"\\ud800"', '"ok \\udfff"', '"\\udc00\\ud800"', '"\\u0000"', '"a\\u0000b"', '""',
    '"' + "x" * 300_000 + '"', "[" * 64 + "]" * 64, "[" * 65 + "]" * 65, "[" * 5000,
    "[" * 3000 + "]" * 3000, '{"a":' * 100 + "1" + "}" * 100,
    "[" + ",".join(["1"] * 20_000) + "]", "[" + ",".join(['"x"'] * 5000) + "]",
    "[" + ",".join(['{"role":"user","content":"hi"}'] * 3000) + "]",
    '{"\\ud800": 1}', '{"type": "text"}', "[null]", "[[]]", "{}", "[]", "true", "null",
)
fragments = (st.sampled_from(NASTY) | json_values.map(json.dumps)
             | st.text().map(json.dumps) | st.just(REMOVED))


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a body: each key of each object and each index of each list."""
    out = []
    items = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list) else ())
    for key, child in items:
        out.append((*prefix, key))
        out += paths(child, (*prefix, key))
    return out


def field_paths(route: PostRoute, body: dict[str, Any]) -> list[tuple[Any, ...]]:
    declared = {(info.alias or name,) for name, info in route.wire.model_fields.items()}
    return sorted(declared | set(paths(body)), key=repr)


def mutated(body: dict[str, Any], path: tuple[Any, ...], fragment: Any) -> bytes:
    copy = json.loads(json.dumps(body))
    parent = copy
    for key in path[:-1]:
        parent = parent[key]
    if fragment is REMOVED:
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
        else:
            del parent[path[-1]]
        return json.dumps(copy).encode()
    parent[path[-1]] = HOLE
    text = json.dumps(copy).replace(json.dumps(HOLE), fragment, 1)
    return text.encode("utf-8", "surrogatepass")  # (fragments are ASCII escapes anyway)


def one_field_mutated(route: PostRoute) -> st.SearchStrategy[bytes]:
    def for_body(body: dict[str, Any]) -> st.SearchStrategy[bytes]:
        return st.builds(mutated, st.just(body), st.sampled_from(field_paths(route, body)),
                         fragments)

    return st.sampled_from(route.bodies).flatmap(for_body)


def bodies(route: PostRoute) -> st.SearchStrategy[bytes]:
    return st.one_of(
        one_field_mutated(route),
        one_field_mutated(route),  # (twice: the most telling kind)
        json_values.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=64),
        st.sampled_from([b"", b"{", b"\xff\xfe{}", b'{"model": "fake-model"', b"\x00",
                         b'\xef\xbb\xbf{"model": "fake-model"}', b'{"a": "\xed\xa0\x80"}']),
    )


# -- the property ---------------------------------------------------------------------


def no_network(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a fuzzed request tried to open a network connection")


@pytest.fixture(scope="module", autouse=True)
def offline():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket, "create_connection", no_network)
        patch.setattr(socket.socket, "connect", no_network)
        patch.setattr(socket.socket, "connect_ex", no_network)
        yield


def check_pull(text: str) -> None:
    """Pull progress lines, ending in success or an error line."""
    lines = [json.loads(line) for line in text.splitlines()]
    assert all("status" in line for line in lines[:-1]), lines
    assert lines[-1] == {"status": "success"} or set(lines[-1]) == {"error"}, lines


async def exchange(path: str, body: bytes, method: str = "POST") -> None:
    app = make_app(FakeEngine())
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test",
                                 timeout=30) as client:
        response = await client.request(method, path, content=body,
                                        headers={"content-type": "application/json"})
        where = f"{path} {body[:300]!r}"
        assert response.status_code < 500, f"{where} -> {response.status_code} {response.text}"
        if response.status_code >= 400:
            checked_error(path, response)
        elif not response.content:  # Ollama's copy and delete: a bare 200
            assert path in ("/api/copy", "/api/delete"), where
        elif path == "/api/pull" and response.headers["content-type"] == "application/x-ndjson":
            check_pull(response.text)
        elif response.headers["content-type"] == "application/x-ndjson":
            check_stream(response.text, generate=path == "/api/generate")
        elif ":streamGenerateContent" in path:
            stream_chunks(response.text, sse=path.endswith("?alt=sse"))
        elif response.headers["content-type"].startswith("text/event-stream"):
            if path.startswith("/api/"):
                checked_events(response.text)
            elif path.startswith("/v1/messages"):
                assert stream_events(response.text)[-1]["type"] in ("message_stop", "error")
            elif path == "/infill":  # llama-server's: no [DONE], each choice's last stops
                last = sse_data(response.text)[-1]
                # (`response_fields` cut the last object too, as llama-server's)
                fields = json.loads(body).get("response_fields") or ["stop"]
                assert last.get("stop") is True or "error" in last or "stop" not in fields, \
                    where
            else:
                assert sse_data(response.text)[-1] == "[DONE]", where
        elif path == "/infill":  # an array for n_cmpl > 1, as llama-server answers
            assert isinstance(response.json(), dict | list), where
        else:
            assert isinstance(response.json(), dict), where
        health = await client.get("/health")
        assert (health.status_code, health.json()) == (200, {"status": "ok"}), where


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.path)
def test_malformed_bodies_never_get_a_5xx(route: PostRoute) -> None:
    @settings(max_examples=route.examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(body=bodies(route))
    def check(body: bytes) -> None:
        asyncio.run(exchange(route.path, body, route.method))

    check()


# -- hostile cursors ------------------------------------------------------------------

cursors = (st.integers() | st.integers(-70, 70).map(str) | st.text(max_size=12)
           | st.sampled_from(["", "-0", "+3", "0x1", "1e3", "1.0", " 2", "٣", "9" * 400]))


async def replayed_from(cursor: Any) -> None:
    """A stored response's stream and a finished background response's, from `cursor`:
    a refusal in the OpenAI envelope, or the events after it in order, then [DONE]."""
    app = make_app(FakeEngine())
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test",
                                 timeout=30) as client:
        body = {"model": "fake-model", "input": "Hi", "max_output_tokens": 4}
        stored = (await client.post("/v1/responses", json=body)).json()
        background = (await client.post("/v1/responses",
                                        json={**body, "background": True})).json()
        for _ in range(3000):
            if (await client.get(f"/v1/responses/{background['id']}")).json()[
                    "status"] == "completed":
                break
            await asyncio.sleep(0.01)
        for response_id in (stored["id"], background["id"]):
            path = f"/v1/responses/{response_id}"
            response = await client.get(path, params={"stream": "true",
                                                      "starting_after": str(cursor)})
            where = f"{path} starting_after={cursor!r}"
            assert response.status_code < 500, f"{where} -> {response.status_code}"
            if response.status_code >= 400:
                assert checked_error(path, response)["param"] == "starting_after", where
                continue
            frames = sse_data(response.text)
            assert frames[-1] == "[DONE]", where
            numbers = [frame["sequence_number"] for frame in frames[:-1]]
            assert numbers == list(range(int(cursor) + 1, int(cursor) + 1 + len(numbers)))


def test_hostile_cursors_never_replay_out_of_order_nor_get_a_5xx() -> None:
    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(cursor=cursors)
    def check(cursor: Any) -> None:
        asyncio.run(replayed_from(cursor))

    check()


# -- hostile GGUF headers -------------------------------------------------------------

U8, STR, ARR = 0, 8, 9
FIXED = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
         12: "d"}
HUGE = st.sampled_from([2**31, 2**32 - 1, 2**40, 2**62, 2**63, 2**64 - 1])
counts = st.integers(0, 4) | HUGE
value_types = st.sampled_from([ARR, ARR, ARR, ARR, STR, STR, *FIXED, 13, 2**32 - 1])


@st.composite
def payload(draw: Any, vtype: int, depth: int) -> bytes:
    """The bytes of one value of `vtype` (an array's elements carry no type of their own)."""
    if vtype in FIXED:
        size = struct.calcsize("<" + FIXED[vtype])
        return draw(st.binary(min_size=size, max_size=size))
    if vtype == STR:
        body = draw(st.binary(max_size=24))
        return struct.pack("<Q", draw(st.just(len(body)) | HUGE)) + body
    if vtype != ARR:
        return draw(st.binary(max_size=8))  # an unknown type: whatever follows
    if depth >= 3 or draw(st.booleans()):  # arrays of arrays nested d deep, one element each
        d = draw(st.integers(1, 30) | st.integers(30, 20_000))
        return struct.pack("<IQ", ARR, 1) * (d - 1) + struct.pack("<IQ", U8, 0)
    etype = draw(value_types)
    n = draw(st.integers(0, 4))
    told = draw(st.just(n) | HUGE)
    items = [draw(payload(etype, depth + 1)) for _ in range(n)]
    return struct.pack("<IQ", etype, told) + b"".join(items)


@st.composite
def gguf_files(draw: Any) -> bytes:
    kvs = []
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.binary(max_size=8))
        vtype = draw(value_types)
        kvs.append(struct.pack("<Q", len(key)) + key + struct.pack("<I", vtype)
                   + draw(payload(vtype, 0)))
    tensors = []
    for _ in range(draw(st.integers(0, 2))):
        dims = draw(st.lists(st.integers(0, 2**64 - 1), max_size=5))
        told = draw(st.just(len(dims)) | st.sampled_from([2**31, 2**32 - 1]))
        tensors.append(struct.pack("<Q", 1) + b"t" + struct.pack("<I", told)
                       + b"".join(struct.pack("<Q", d) for d in dims)
                       + struct.pack("<IQ", 2, draw(st.integers(0, 2**64 - 1))))
    n_tensors = draw(st.just(len(tensors)) | HUGE)
    n_kv = draw(st.just(len(kvs)) | HUGE)
    version = draw(st.sampled_from([3, 3, 3, 2, 2, 1, 2**32 - 1]))
    data = (b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + b"".join(kvs)
            + b"".join(tensors) + b"\0" * draw(st.integers(0, 64)))
    if draw(st.integers(0, 3)) == 0:
        data = data[:draw(st.integers(0, len(data)))]
    if data and draw(st.integers(0, 3)) == 0:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]
    return data


def test_hostile_gguf_headers_are_read_or_refused_never_anything_else() -> None:
    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=gguf_files())
    def check(data: bytes) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "planted.gguf"
            path.write_bytes(data)
            for whole in (False, True):
                try:
                    header = read_gguf_header(path, whole_arrays=whole)
                except ValueError:
                    continue
                assert isinstance(header, GgufHeader)

    check()


def test_every_registered_dialect_is_fuzzed() -> None:
    """Each dialect of each registered API (`dialects.apis.APIS`) at one of its paths at
    least, so a new API's routes cannot be left out of the corpus."""
    fuzzed = {route.path.partition("?")[0] for route in ROUTES}
    for entry in APIS:
        made = entry.routes(Services(Sealer.ephemeral()))
        speakers: dict[type, set[str]] = {}
        for path, speaker in (*made.generation, *made.embeddings, *made.counting,
                              *made.answering):
            speakers.setdefault(type(speaker), set()).add(path.replace("{model}", "fake-model"))
        for kind, paths in speakers.items():
            assert paths & fuzzed, f"fuzz one of {sorted(paths)} ({entry.name} {kind.__name__})"

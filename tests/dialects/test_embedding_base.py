"""The embeddings dialects without a server: what each body becomes, what each answer is."""

from __future__ import annotations

import base64
import math
import struct

import pytest

from parlance.core.embeddings import EmbeddingInput, Embeddings, Normalize, shortened, unit
from parlance.core.errors import ContextOverflow, InvalidRequest
from parlance.dialects.base import Incoming
from parlance.dialects.embedding_base import EmbedCallFacts
from parlance.dialects.ollama.embed import OllamaEmbed, OllamaEmbeddings
from parlance.dialects.openai.embeddings import OpenAIEmbeddings, vector_base64

SERVED = EmbedCallFacts("m", 0.25, 1.5)
RESULT = Embeddings(([0.6, 0.8, 0.0], [0.0, 0.0, 1.0]), 7)


def test_openai_inputs_of_every_shape():
    dialect = OpenAIEmbeddings()
    assert dialect.parse(Incoming({"input": "hi"})).request.inputs == (EmbeddingInput(text="hi"),)
    assert dialect.parse(Incoming({"input": [1, 2]})).request.inputs == (
        EmbeddingInput(token_ids=(1, 2)),)
    call = dialect.parse(Incoming({"input": [[1], [2, 3]], "dimensions": 3, "model": "x",
                          "encoding_format": "base64"}))
    assert call.request.inputs == (EmbeddingInput(token_ids=(1,)), EmbeddingInput(token_ids=(2, 3)))
    assert call.request.dimensions == 3 and call.request.model == "x" and call.base64
    assert call.request.truncate is False and call.request.normalize is Normalize.UNIT
    with pytest.raises(InvalidRequest):
        dialect.parse(Incoming({"input": ["a", 1]}))


def test_openai_render_float_and_base64():
    dialect = OpenAIEmbeddings()
    body = dialect.render(dialect.parse(Incoming({"input": "x"})), SERVED, RESULT)
    assert body == {"object": "list", "model": "m",
                    "data": [{"object": "embedding", "index": 0, "embedding": [0.6, 0.8, 0.0]},
                             {"object": "embedding", "index": 1, "embedding": [0.0, 0.0, 1.0]}],
                    "usage": {"prompt_tokens": 7, "total_tokens": 7}}
    packed = dialect.render(dialect.parse(Incoming({"input": "x", "encoding_format": "base64"})),
                            SERVED, RESULT)["data"][0]["embedding"]
    assert base64.b64decode(packed) == struct.pack("<3f", 0.6, 0.8, 0.0)
    assert vector_base64([1.0]) == base64.b64encode(b"\x00\x00\x80\x3f").decode()


def test_openai_overflow_is_a_400_not_chat_completions_403():
    rendered = OpenAIEmbeddings().render_error(ContextOverflow("too long", param="input",
                                                               code="context_length_exceeded"))
    assert rendered.status == 400
    assert rendered.body["error"] == {"message": "too long", "type": "invalid_request_error",
                                      "param": "input", "code": "context_length_exceeded"}


def test_ollama_embed_body_and_answer():
    dialect = OllamaEmbed()
    call = dialect.parse(Incoming({"model": "m", "input": ["a", "b"], "truncate": False,
                          "dimensions": 2, "keep_alive": "1m", "options": {"num_ctx": 64}}))
    assert call.request.truncate is False and call.dimensions == 2
    assert (call.keep_alive, call.context_length) == (60.0, 64)
    assert dialect.parse(Incoming({"model": "m", "input": "a"})).request.truncate is True
    assert dialect.parse(Incoming({"model": "m", "input": ""})).request.inputs == ()
    assert dialect.parse(Incoming({"model": "m", "dimensions": -3})).dimensions is None
    body = dialect.render(call, SERVED, RESULT)
    assert body["embeddings"] == [shortened([0.6, 0.8, 0.0], 2), [0.0, 0.0]]  # (a zero stays)
    assert math.isclose(math.hypot(*body["embeddings"][0]), 1.0)
    assert (body["total_duration"], body["load_duration"], body["prompt_eval_count"]) == (
        1_500_000_000, 250_000_000, 7)
    whole = dialect.render(dialect.parse(Incoming({"model": "m", "input": "a"})),
                           EmbedCallFacts("m", 0.0, 0.5), Embeddings(([1.0],), 0))
    assert set(whole) == {"model", "embeddings", "total_duration"}  # zeros omitted


def test_ollama_legacy_body_and_answer():
    dialect = OllamaEmbeddings()
    call = dialect.parse(Incoming({"model": "m", "prompt": "hi"}))
    assert call.request.normalize is Normalize.NATIVE and call.request.param == "prompt"
    assert call.request.truncate is False
    assert dialect.render(call, SERVED, RESULT) == {"embedding": [0.6, 0.8, 0.0]}
    assert dialect.parse(Incoming({"model": "m"})).request.inputs == ()
    overflow = dialect.render_error(ContextOverflow("needs 9 of 4", param="prompt"))
    assert overflow.status == 400
    assert overflow.body == {"error": "the input length exceeds the context length "
                                      "(needs 9 of 4)"}


def test_unit_and_shortened():
    assert unit([3.0, 4.0]) == [0.6, 0.8] and unit([0.0, 0.0]) == [0.0, 0.0]
    assert shortened([3.0, 4.0, 12.0], 2) == [0.6, 0.8]

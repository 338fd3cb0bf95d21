"""OpenAI's APIs as the server serves them: Chat Completions, Completions, Responses
(and its compaction) and embeddings, each under `/v1` and without it. OpenAI's envelope
also answers every path no API claims (the first entry of `dialects.apis.APIS`)."""

from __future__ import annotations

from parlance.dialects import api
from parlance.dialects.api import Routes, Services, with_unversioned
from parlance.dialects.openai import errors
from parlance.dialects.openai.chat import OpenAIChat
from parlance.dialects.openai.completions import OpenAICompletions
from parlance.dialects.openai.decisions import OpenAIDecisions
from parlance.dialects.openai.embeddings import OpenAIEmbeddings
from parlance.dialects.openai.responses import OpenAIResponses
from parlance.dialects.openai.responses.compact import ResponsesCompaction

_HELLO = [{"role": "user", "content": "Hello!"}]
_MODEL = "my-model"


def routes(services: Services) -> Routes:
    embeddings = OpenAIEmbeddings()
    return Routes(
        generation=(*with_unversioned("/v1/chat/completions", OpenAIChat()),
                    *with_unversioned("/v1/completions", OpenAICompletions()),
                    *with_unversioned("/v1/responses", OpenAIResponses(services.sealer)),
                    *with_unversioned("/v1/responses/compact",
                                      ResponsesCompaction(services.sealer))),
        embeddings=with_unversioned("/v1/embeddings", embeddings),
        answering=with_unversioned("/v1/decisions", OpenAIDecisions()))


API = api.API(
    name="OpenAI", package="openai", prefixes=("/v1",), render_error=errors.render_error,
    routes=routes,
    examples={
        OpenAIChat.body_model: {"model": _MODEL, "messages": _HELLO, "max_tokens": 64},
        OpenAICompletions.body_model: {"model": _MODEL, "prompt": "Once upon a time",
                                       "max_tokens": 64},
        OpenAIResponses.body_model: {"model": _MODEL, "input": "Hello!"},
        ResponsesCompaction.body_model: {"model": _MODEL, "input": _HELLO},
        OpenAIEmbeddings.body_model: {"model": _MODEL, "input": "Hello!"},
        OpenAIDecisions.body_model: {
            "model": _MODEL, "input": "I was charged twice for the same renewal.",
            "questions": [
                {"type": "predicate", "name": "duplicate_charge",
                 "instructions": "Was the customer charged more than once?"},
                {"type": "choice", "name": "category", "instructions": "Classify the ticket.",
                 "choices": [{"value": "billing"}, {"value": "technical"}]}]},
    })

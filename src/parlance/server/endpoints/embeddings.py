"""The one embeddings endpoint behind every embeddings dialect (OpenAI `/v1/embeddings`,
LM Studio `/api/v0/embeddings`, Ollama `/api/embed` and `/api/embeddings`).

Embeddings are one answer, not a stream, so they do not go through the generation
handler, but they take their model and are supervised as every call is: authorize,
read the body (`dialect.parse`), the model's lease (loading it just in time; a call's
`keep_alive` (Ollama) rules how long it stays loaded once idle), `engine.embed` under
the call's `Supervisor` (stopped at the request deadline or when the drain's grace
ends, abandoned when the client leaves), then `dialect.render`. Every refusal is in
the dialect's own envelope.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parlance.core.embeddings import Embeddings
from parlance.core.errors import ParlanceError
from parlance.dialects.embedding_base import EmbedCallFacts, EmbeddingDialect
from parlance.models.served import ServedModels
from parlance.server.body.reader import read_incoming
from parlance.server.calls.lease import call_lease
from parlance.server.calls.supervision import Supervisor
from parlance.server.http.access_log import access_record
from parlance.server.http.auth import authorize
from parlance.server.http.refusal import error_response
from parlance.server.openapi.operation import Operation, embedding
from parlance.server.settings import ServerSettings

NO_INPUTS = Embeddings((), 0)


class EmbeddingsEndpoint:
    def __init__(self, dialect: EmbeddingDialect[Any], models: ServedModels,
                 settings: ServerSettings, tag: str) -> None:
        self.dialect = dialect
        self.tag = tag  # the API it belongs to
        self.models = models
        self.settings = settings

    def operation(self) -> Operation:
        """What `/openapi.json` says of this route: its dialect's."""
        return embedding(self.dialect, self.tag)

    async def handle(self, request: Request) -> Response:
        arrived = time.perf_counter()
        record = access_record(request)
        supervisor = Supervisor.for_call(request.app, record, self.settings.request_timeout)
        try:
            authorize(request, self.settings.api_keys)
            call = await read_incoming(request, self.settings.max_body_bytes, self.dialect.parse)
            async with call_lease(self.models, call) as lease:
                record.model = lease.name
                result = NO_INPUTS
                if call.request.inputs:
                    result = await supervisor.answer(
                        request.receive, lease.model.engine.embed(call.request))
                    record.prompt_tokens = result.prompt_tokens
        except ParlanceError as exc:
            return error_response(self.dialect.render_error, exc)
        served = EmbedCallFacts(lease.name, lease.load_seconds, time.perf_counter() - arrived)
        return JSONResponse(self.dialect.render(call, served, result))

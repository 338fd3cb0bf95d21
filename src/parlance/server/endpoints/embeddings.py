"""The one embeddings endpoint behind every embeddings dialect (OpenAI `/v1/embeddings`,
LM Studio `/api/v0/embeddings`, Ollama `/api/embed` and `/api/embeddings`).

Embeddings are one answer, not a stream, so they do not go through the generation
handler: authorize, read the body (`dialect.parse`), get the model (loading it just in
time), `engine.embed` within the request deadline (cancelled when the client leaves),
then `dialect.render`. Every refusal is in the dialect's own envelope. A call's
`keep_alive` (Ollama) rules how long the model stays loaded once idle, as for
generation calls.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parlance.core.embeddings import Embeddings
from parlance.core.errors import ParlanceError, RequestTimeout
from parlance.dialects.embedding_base import EmbedCall, EmbeddingDialect, EmbedServed
from parlance.models.served import LoadOptions, ServedModel, ServedModels
from parlance.server.body.reader import read_json
from parlance.server.generation.supervision import race_disconnect
from parlance.server.http.access_log import access_record
from parlance.server.http.auth import authorize
from parlance.server.http.refusal import error_json
from parlance.server.settings import ServerSettings

NO_INPUTS = Embeddings((), 0)


class EmbeddingsEndpoint:
    def __init__(self, dialect: EmbeddingDialect[Any], models: ServedModels,
                 settings: ServerSettings) -> None:
        self.dialect = dialect
        self.models = models
        self.settings = settings

    async def handle(self, request: Request) -> Response:
        arrived = time.perf_counter()
        try:
            authorize(request, self.settings.api_keys)
            call = await read_json(request, self.settings.max_body_bytes, self.dialect.parse)
            name, load_seconds, result = await self._embed(request, call)
        except ParlanceError as exc:
            return error_json(self.dialect.render_error(exc))
        if result is None:
            return Response(status_code=499)  # the client left: nobody is listening
        served = EmbedServed(name, load_seconds, time.perf_counter() - arrived)
        return JSONResponse(self.dialect.render(call, served, result))

    async def _embed(self, request: Request, call: EmbedCall
                     ) -> tuple[str, float | None, Embeddings | None]:
        """(the id to echo, seconds this call waited for the model to load (None: it was
        loaded), the vectors; None when the client left before they were ready)."""
        wanted = call.request.model
        options = LoadOptions(context_length=call.context_length)
        if options != LoadOptions():  # load options no load could honour: a 400 now
            self.models.check(wanted, options)
        model, name, load_seconds = await self.models.acquire(wanted, None, options)
        self.models.keep(model, call.keep_alive)  # (None: the server's rule)
        access_record(request).model = name
        try:
            return name, load_seconds, await self._vectors(request, call, model)
        finally:
            self.models.release(name)  # its idle time (keep_alive) starts now

    async def _vectors(self, request: Request, call: EmbedCall,
                       model: ServedModel) -> Embeddings | None:
        if not call.request.inputs:
            return NO_INPUTS
        outcome: list[Embeddings | ParlanceError] = []

        async def work() -> None:  # (raises nothing: a task group would wrap it)
            try:
                async with asyncio.timeout(self.settings.request_timeout):
                    outcome.append(await model.engine.embed(call.request))
            except TimeoutError:
                outcome.append(RequestTimeout())
            except ParlanceError as exc:
                outcome.append(exc)

        if await race_disconnect(request, work()):
            return None
        result = outcome[0]
        if isinstance(result, ParlanceError):
            raise result
        access_record(request).prompt_tokens = result.prompt_tokens
        return result

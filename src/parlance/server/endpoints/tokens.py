"""llama-server's token tools: `POST /tokenize`, `/detokenize`, `/apply-template`. Each
is one answer: authorize, read the body, the model's lease (none named: the default
model, as llama-server serves its one model), the engine's tokenizer or template, the
dialect's shape. `/apply-template` reads an OpenAI chat completions body."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parlance.core.errors import ParlanceError
from parlance.dialects.llamaserver.tokens import ApplyTemplate, Detokenize, Tokenize
from parlance.dialects.openai.chat import OpenAIChat
from parlance.engines.base import Engine
from parlance.models.lease import ModelLease
from parlance.models.served import ServedModels
from parlance.server.body.reader import read_json
from parlance.server.generation.supervision import Supervisor
from parlance.server.http.access_log import access_record
from parlance.server.http.auth import authorize
from parlance.server.http.refusal import Render, error_response
from parlance.server.settings import ServerSettings

C = TypeVar("C")


class TokenEndpoints:
    def __init__(self, models: ServedModels, settings: ServerSettings) -> None:
        self.models = models
        self.settings = settings
        self.tokenizing = Tokenize()
        self.detokenizing = Detokenize()
        self.templating = ApplyTemplate()
        self.chat = OpenAIChat()

    async def tokenize(self, request: Request) -> Response:
        dialect = self.tokenizing
        return await self._answer(
            request, dialect.parse, lambda call: call.request.model,
            lambda engine, call: _tokens(engine, dialect, call), dialect.render_error)

    async def detokenize(self, request: Request) -> Response:
        dialect = self.detokenizing
        return await self._answer(
            request, dialect.parse, lambda call: call.model,
            lambda engine, call: _text(engine, dialect, call), dialect.render_error)

    async def apply_template(self, request: Request) -> Response:
        dialect = self.templating
        return await self._answer(
            request, self.chat.parse, lambda call: call.request.model or None,
            lambda engine, call: _prompt(engine, dialect, call), dialect.render_error)

    async def _answer(self, request: Request, parse: Callable[[Any], C],
                      model_of: Callable[[C], str | None],
                      work: Callable[[Engine, C], Awaitable[dict[str, Any]]],
                      render_error: Render) -> Response:
        record = access_record(request)
        supervisor = Supervisor.for_call(request.app, record, self.settings.request_timeout)
        try:
            authorize(request, self.settings.api_keys)
            call = await read_json(request, self.settings.max_body_bytes, parse)
            async with ModelLease(self.models, model_of(call)) as lease:
                record.model = lease.name
                body = await supervisor.answer(request.receive,
                                               work(lease.model.engine, call))
        except ParlanceError as exc:
            return error_response(render_error, exc)
        return JSONResponse(body)


async def _tokens(engine: Engine, dialect: Tokenize, call: Any) -> dict[str, Any]:
    return dialect.render(call, await engine.tokenize(call.request))


async def _text(engine: Engine, dialect: Detokenize, call: Any) -> dict[str, Any]:
    return dialect.render(await engine.detokenize(call))


async def _prompt(engine: Engine, dialect: ApplyTemplate, call: Any) -> dict[str, Any]:
    return dialect.render(await engine.render_prompt(call.request))

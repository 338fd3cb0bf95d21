"""The one endpoint of every call the engine answers at once without generating
(`dialects/answer_base.py`): decisions and llama-server's token tools. Authorize, read
the body (`dialect.parse`), the model's lease (loaded just in time), the engine's work
under the call's `Supervisor`, then `dialect.render`; every refusal in the dialect's
own envelope."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parlance.core.decisions import Decision, answers, score_request
from parlance.core.errors import ModelNotFound, ParlanceError
from parlance.core.rerank import Reranked, RerankRequest
from parlance.core.tokens import DetokenizeRequest, TokenizeRequest
from parlance.dialects.answer_base import Answering, Ask, Asked, Decided, RenderPrompt
from parlance.engines.base import Engine
from parlance.models.lease import ModelLease
from parlance.models.served import ServedModels
from parlance.server.body.reader import read_incoming
from parlance.server.calls.supervision import Supervisor
from parlance.server.http.access_log import access_record
from parlance.server.http.auth import authorize
from parlance.server.http.refusal import error_response
from parlance.server.openapi.operation import Operation, answering
from parlance.server.settings import ServerSettings

CALIBRATION = "X-Parlance-Calibration"  # on every decision's answer


class AnsweringEndpoint:
    def __init__(self, dialect: Answering[Any], models: ServedModels,
                 settings: ServerSettings, tag: str) -> None:
        self.dialect = dialect
        self.models = models
        self.settings = settings
        self.tag = tag  # the API it belongs to

    def operation(self) -> Operation:
        """What `/openapi.json` says of this route: its dialect's."""
        return answering(self.dialect, self.tag)

    async def handle(self, request: Request) -> Response:
        record = access_record(request)
        supervisor = Supervisor.for_call(request.app, record, self.settings.request_timeout)
        dialect = self.dialect
        try:
            authorize(request, self.settings.api_keys)
            call = await read_incoming(request, self.settings.max_body_bytes, dialect.parse)
            asked = dialect.asked(call)
            async with ModelLease(self.models, self._model(asked)) as lease:
                record.model = lease.name
                answer = await supervisor.answer(
                    request.receive, perform(lease.model.engine, asked.ask, lease.name))
        except ParlanceError as exc:
            return error_response(dialect.render_error, exc)
        headers = {}
        if isinstance(answer, Decided):
            record.prompt_tokens = answer.scores.prompt_tokens
            # neither shape has a field for it: a model's own beliefs, never a decision
            # model's trained head (the bound llama.cpp predates them)
            headers[CALIBRATION] = "uncalibrated"
        elif isinstance(answer, Reranked):
            record.prompt_tokens = answer.prompt_tokens
        return JSONResponse(dialect.render(call, answer), headers=headers)

    def _model(self, asked: Asked) -> str | None:
        if asked.any_model_name and asked.model:
            try:
                self.models.spec(asked.model)
            except ModelNotFound:
                return None
        return asked.model or None


async def perform(engine: Engine, ask: Ask, model: str) -> Any:
    """The engine's answer to one ask (see `answer_base.Ask`)."""
    if isinstance(ask, Decision):
        scores = await engine.score(score_request(ask))
        return Decided(model, answers(ask, scores.prompts), scores)
    if isinstance(ask, TokenizeRequest):
        return await engine.tokenize(ask)
    if isinstance(ask, DetokenizeRequest):
        return await engine.detokenize(ask)
    if isinstance(ask, RerankRequest):
        return await engine.rerank(ask)
    if isinstance(ask, RenderPrompt):
        return await engine.render_prompt(ask.request)
    raise TypeError(f"no engine work answers {type(ask).__name__}")

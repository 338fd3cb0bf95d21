"""The one decisions endpoint behind both decision dialects (OpenAI `/v1/decisions`,
System One `/v1/systemone`): authorize, read the body (`dialect.parse`), the model's
lease (loaded just in time), `engine.score` of the decision's questions under the
call's `Supervisor`, then `dialect.render`. Every refusal is in the dialect's own
envelope. System One's `model` names a model only when one by that name is served
(llama-server ignores it; clients send "jev-latest"): otherwise the default model
answers."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parlance.core.decisions import answers, score_request
from parlance.core.errors import ModelNotFound, ParlanceError
from parlance.dialects.decision_base import Decided, DecisionCall, DecisionDialect
from parlance.models.lease import ModelLease
from parlance.models.served import ServedModels
from parlance.server.body.reader import read_json
from parlance.server.generation.supervision import Supervisor
from parlance.server.http.access_log import access_record
from parlance.server.http.auth import authorize
from parlance.server.http.refusal import error_response
from parlance.server.settings import ServerSettings


class DecisionsEndpoint:
    def __init__(self, dialect: DecisionDialect[Any], models: ServedModels,
                 settings: ServerSettings, *, any_model_name: bool = False) -> None:
        self.dialect = dialect
        self.models = models
        self.settings = settings
        self.any_model_name = any_model_name  # an unknown `model` means the default one

    async def handle(self, request: Request) -> Response:
        record = access_record(request)
        supervisor = Supervisor.for_call(request.app, record, self.settings.request_timeout)
        try:
            authorize(request, self.settings.api_keys)
            call: DecisionCall = await read_json(request, self.settings.max_body_bytes,
                                                 self.dialect.parse)
            async with self._lease(call) as lease:
                record.model = lease.name
                scores = await supervisor.answer(
                    request.receive, lease.model.engine.score(score_request(call.decision)))
                record.prompt_tokens = scores.prompt_tokens
        except ParlanceError as exc:
            return error_response(self.dialect.render_error, exc)
        decided = Decided(lease.name, answers(call.decision, scores.prompts), scores)
        return JSONResponse(self.dialect.render(call, decided))

    def _lease(self, call: DecisionCall) -> ModelLease:
        name: str | None = call.decision.model or None
        if self.any_model_name and name is not None:
            try:
                self.models.spec(name)
            except ModelNotFound:
                name = None
        return ModelLease(self.models, name)

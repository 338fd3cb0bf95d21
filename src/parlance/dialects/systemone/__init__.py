"""TypeSafe's System One (`POST /v1/systemone`), as llama-server serves it (its wire
contract test pins the key sets): `state` (a string; anything else is given to the
model as JSON text) and `questions`, an object of id → question (`noul`, `choice`
with `criteria` {key: description|null}, `score` with `criteria` [levels, lowest
first]). `model` is optional and echoed as the served id. Answers come back under the
same ids in request order; `usage` is `{input_tokens, output_tokens: 0}`.

Semantic faults are 422 `unprocessable_entity_error`, a body that is no JSON 400;
the envelope is llama-server's `{"error": {"code", "message", "type"}}`. Images are
a 422 (no model here reads them; llama-server's 501 would read as a server fault).
Any model answers, not only decision GGUFs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from parlance.core.decisions import YES, Answer, Decision, Kind, Option, Question, predicate
from parlance.core.decisions import scale as score_question
from parlance.core.errors import (
    InvalidRequest,
    ParlanceError,
    PayloadTooLarge,
)
from parlance.dialects.answer_base import Asked, Decided
from parlance.dialects.base import ErrorResponse, Incoming
from parlance.dialects.shared.llama_server import UNPROCESSABLE, render_error

__all__ = ["PATHS", "SystemOne", "SystemOneBody", "SystemOneCall", "render_error"]

PATHS = ("/v1/systemone", "/systemone")  # where refusals come in this envelope
MAX_QUESTIONS = 4096  # llama-server's limit (413 beyond)
MAX_OPTIONS = 255
MIN_LEVELS, MAX_LEVELS = 2, 10
MAX_DEPTH = 32
DEFAULT_MODEL = ""  # none named: the default model answers

class SystemOneBody(BaseModel):
    """Read by hand below (each fault has llama-server's wording); this names the fields
    for the OpenAPI document."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    state: str | dict[str, Any] | list[Any]
    questions: dict[str, dict[str, Any]]
    images: list[str] | None = None


@dataclass(frozen=True, slots=True)
class SystemOneCall:
    decision: Decision
    keys: tuple[str, ...]  # the question ids, in order
    legends: tuple[tuple[str, ...], ...] = ()  # a score question's level strings


def fault(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param, code=UNPROCESSABLE)


def _depth(value: Any, depth: int = 1) -> int:
    if isinstance(value, dict):
        return max((_depth(v, depth + 1) for v in value.values()), default=depth)
    if isinstance(value, list):
        return max((_depth(v, depth + 1) for v in value), default=depth)
    return depth


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _instructions(qid: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | dict | list) or not value:
        raise fault(f'"instructions" of question "{qid}" must be a non-empty string, object '
                    "or array", f"questions.{qid}.instructions")
    return _text(value)


def _question(qid: str, raw: Any) -> tuple[Question, tuple[str, ...]]:
    if not isinstance(raw, dict):
        raise fault(f'question "{qid}" must be an object', f"questions.{qid}")
    kind = raw.get("type")
    if kind not in ("choice", "score", "noul"):
        raise fault('"type" must be one of: choice, score, noul', f"questions.{qid}.type")
    instructions = _instructions(qid, raw.get("instructions"))
    criteria = raw.get("criteria")
    where = f"questions.{qid}.criteria"
    if kind == "noul":
        if criteria is None:
            return predicate(instructions), ()
        if not isinstance(criteria, dict):
            raise fault('"criteria" of a noul question must be an object', where)
        yes, no = criteria.get("true"), criteria.get("false")
        return predicate(instructions, None if yes is None else _text(yes),
                         None if no is None else _text(no)), ()
    if kind == "score":
        if (not isinstance(criteria, list) or not MIN_LEVELS <= len(criteria) <= MAX_LEVELS
                or not all(isinstance(c, str) for c in criteria)):
            raise fault(f'"criteria" must be an array of {MIN_LEVELS} to {MAX_LEVELS} levels',
                        where)
        return score_question(instructions, criteria), tuple(criteria)
    if not isinstance(criteria, dict) or not criteria:
        raise fault('"criteria" of a choice question must be an object with at least one '
                    "option", where)
    if len(criteria) > MAX_OPTIONS:
        raise fault(f'"criteria" has {len(criteria)} options, at most {MAX_OPTIONS} are '
                    "supported", where)
    if any(not key.strip() for key in criteria):
        raise fault("an option's key must not be empty", where)
    options = tuple(Option(key, None if d is None else _text(d)) for key, d in criteria.items())
    return Question(Kind.CHOICE, instructions, options), ()


class SystemOne:
    body_model = SystemOneBody

    def parse(self, incoming: Incoming) -> SystemOneCall:
        body = incoming.body
        if not isinstance(body, dict):
            raise InvalidRequest("The request body must be a JSON object.")
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise fault('"model" must be a string', "model")
        state = body.get("state")
        if state is None:
            raise fault('"state" must be provided', "state")
        if _depth(state) > MAX_DEPTH:
            raise fault('"state" is nested too deeply', "state")
        for field in ("images", "files"):
            if body.get(field) not in (None, []):
                raise fault(f'"{field}" cannot be read: this server\'s models do not read '
                            "images", field)
        if body.get("videos") not in (None, []):
            raise fault('"videos" is not supported', "videos")
        questions = body.get("questions")
        if not isinstance(questions, dict) or not questions:
            raise fault('"questions" must be a non-empty object', "questions")
        if len(questions) > MAX_QUESTIONS:
            raise PayloadTooLarge(f'"questions" holds {len(questions)}, the maximum is '
                                  f"{MAX_QUESTIONS}")
        parsed = [_question(qid, raw) for qid, raw in questions.items()]
        decision = Decision(model or DEFAULT_MODEL, _text(state),
                            tuple(q for q, _ in parsed))
        return SystemOneCall(decision, tuple(questions), tuple(legend for _, legend in parsed))

    def asked(self, call: SystemOneCall) -> Asked:
        return Asked(call.decision.model, call.decision, any_model_name=True)

    def render(self, call: SystemOneCall, decided: Decided) -> dict[str, Any]:
        answers = {key: _answer(answer, legend) for key, legend, answer
                   in zip(call.keys, call.legends, decided.answers, strict=True)}
        return {"model": decided.model, "answers": answers,
                "usage": {"input_tokens": decided.input_tokens, "output_tokens": 0}}

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return render_error(error)


def _answer(answer: Answer, legend: tuple[str, ...]) -> dict[str, Any]:
    question, p = answer.question, answer.probabilities
    if question.kind is Kind.PREDICATE:
        yes = next(i for i, o in enumerate(question.options) if o.label == YES)
        return {"type": "noul", "noul": p[yes]}
    keyed = {o.label: pi for o, pi in zip(question.options, p, strict=True)}
    if question.kind is Kind.CHOICE:
        return {"type": "choice", "choice": question.options[answer.best].label,
                "probabilities": keyed, "confidence": answer.confidence}
    return {"type": "score", "score": answer.expected,
            "legend": {str(i): level for i, level in enumerate(legend)},
            "probabilities": keyed, "confidence": answer.confidence}

"""OpenAI's Decisions API (`POST /v1/decisions`, beta since 2026-10-06), shapes from the
openai SDKs' types (`decision_create_params.py`, `decision.py`).

`input` is a string or user messages of `input_text` parts; `questions` an ordered
array of `predicate`, `choice` (typed values: `"true"` is not `true`) and `score`
(levels, lowest first). Answers come back in question order with `name` (null when
not given). Images are a 400 (no model here reads them). A body whose `questions`
is an object is System One's shape: refused naming `/v1/systemone`.
Errors: OpenAI's envelope.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from parlance.core.decisions import YES, Answer, Decision, Kind, Option, Question, predicate
from parlance.core.errors import InvalidRequest, ParlanceError
from parlance.dialects.answer_base import Asked, Decided
from parlance.dialects.base import ErrorResponse, Incoming
from parlance.dialects.openai import errors
from parlance.dialects.shared.wire import WireModel, parse_body

MAX_QUESTIONS = 2000  # the answers' maxItems in OpenAI's reference
MAX_CHOICES = 255
MIN_LEVELS, MAX_LEVELS = 2, 10
NonEmpty = Annotated[str, Field(min_length=1)]


class TextPart(WireModel):
    type: Literal["input_text"]
    text: str


class ImagePart(WireModel):
    type: Literal["input_image"]
    image_url: str | None = None
    detail: str | None = None


class InputMessage(WireModel):
    role: Literal["user"]
    content: str | list[Annotated[TextPart | ImagePart, Field(discriminator="type")]]
    type: Literal["message"] | None = None


class ChoiceValue(WireModel):
    value: str | bool
    description: str | None = None


class Level(WireModel):
    label: NonEmpty
    description: str | None = None


class PredicateQuestion(WireModel):
    type: Literal["predicate"]
    instructions: NonEmpty
    name: str | None = None


class ChoiceQuestion(WireModel):
    type: Literal["choice"]
    instructions: NonEmpty
    name: str | None = None
    choices: list[ChoiceValue]


class ScoreQuestion(WireModel):
    type: Literal["score"]
    instructions: NonEmpty
    name: str | None = None
    levels: list[Level]


AnyQuestion = Annotated[PredicateQuestion | ChoiceQuestion | ScoreQuestion,
                        Field(discriminator="type")]


class DecisionsBody(WireModel):
    model: str
    input: str | list[InputMessage]
    questions: list[AnyQuestion]
    safety_identifier: str | None = None


@dataclass(frozen=True, slots=True)
class OpenAIDecisionCall:
    decision: Decision
    names: tuple[str | None, ...]  # each question's name, as the client gave it
    # Per question, what its answer names: a choice's values as typed, a score's level
    # labels (a predicate: none).
    values: tuple[tuple[str | bool, ...], ...] = ()


def _values(q: PredicateQuestion | ChoiceQuestion | ScoreQuestion) -> tuple[str | bool, ...]:
    if isinstance(q, ChoiceQuestion):
        return tuple(c.value for c in q.choices)
    if isinstance(q, ScoreQuestion):
        return tuple(lv.label for lv in q.levels)
    return ()


def value_label(value: str | bool) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else value


def context_text(value: str | list[InputMessage]) -> str:
    if isinstance(value, str):
        return value
    texts = []
    for message in value:
        if isinstance(message.content, str):
            texts.append(message.content)
            continue
        for part in message.content:
            if isinstance(part, ImagePart):
                raise InvalidRequest("This server's models do not read images; 'input' "
                                     "may hold input_text parts only.", param="input",
                                     code="unsupported_value")
            texts.append(part.text)
    return "\n\n".join(texts)


def question(index: int, q: PredicateQuestion | ChoiceQuestion | ScoreQuestion) -> Question:
    if isinstance(q, PredicateQuestion):
        return predicate(q.instructions)
    if isinstance(q, ChoiceQuestion):
        labels = [value_label(c.value) for c in q.choices]
        if not 2 <= len(labels) <= MAX_CHOICES or len(set(labels)) != len(labels):
            raise InvalidRequest(f"A choice question needs 2 to {MAX_CHOICES} distinct "
                                 f"choices (true and \"true\" are the same label here).",
                                 param=f"questions[{index}].choices")
        if any(not label.strip() for label in labels):
            raise InvalidRequest("A choice's value must not be empty.",
                                 param=f"questions[{index}].choices")
        return Question(Kind.CHOICE, q.instructions,
                        tuple(Option(label, c.description)
                              for label, c in zip(labels, q.choices, strict=True)))
    if not MIN_LEVELS <= len(q.levels) <= MAX_LEVELS:
        raise InvalidRequest(f"A score question needs {MIN_LEVELS} to {MAX_LEVELS} levels.",
                             param=f"questions[{index}].levels")
    return Question(Kind.SCORE, q.instructions,
                    tuple(Option(str(i), f"{lv.label}: {lv.description}" if lv.description
                                 else lv.label) for i, lv in enumerate(q.levels)))


class OpenAIDecisions:
    body_model = DecisionsBody

    def parse(self, incoming: Incoming) -> OpenAIDecisionCall:
        body = incoming.body
        if isinstance(body, dict) and isinstance(body.get("questions"), dict):
            raise InvalidRequest("'questions' is an object: that is System One's body; send "
                                 "it to /v1/systemone. OpenAI's Decisions take an array.",
                                 param="questions")
        req = parse_body(self.body_model, body)
        if not req.questions or len(req.questions) > MAX_QUESTIONS:
            raise InvalidRequest(f"'questions' must hold 1 to {MAX_QUESTIONS} questions.",
                                 param="questions")
        context = context_text(req.input)
        questions = tuple(question(i, q) for i, q in enumerate(req.questions))
        return OpenAIDecisionCall(Decision(req.model, context, questions),
                                  tuple(q.name for q in req.questions),
                                  tuple(_values(q) for q in req.questions))

    def asked(self, call: OpenAIDecisionCall) -> Asked:
        return Asked(call.decision.model, call.decision)

    def render(self, call: OpenAIDecisionCall, decided: Decided) -> dict[str, Any]:
        answers = [_answer(name, values, answer) for name, values, answer
                   in zip(call.names, call.values, decided.answers, strict=True)]
        tokens = decided.input_tokens
        return {
            "model": decided.model,
            "answers": answers,
            "usage": {"input_tokens": tokens,
                      "input_tokens_details": {"cached_tokens": decided.scores.cached_tokens,
                                               "cache_write_tokens": 0},
                      "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": tokens},
        }

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return errors.render_error(error)


def _answer(name: str | None, values: tuple[str | bool, ...],
            answer: Answer) -> dict[str, Any]:
    question, p = answer.question, answer.probabilities
    if question.kind is Kind.PREDICATE:
        yes = next(i for i, o in enumerate(question.options) if o.label == YES)
        return {"type": "predicate", "name": name, "probability": p[yes]}
    if question.kind is Kind.CHOICE:
        return {"type": "choice", "name": name, "choice": values[answer.best],
                "confidence": answer.confidence,
                "probabilities": [{"value": v, "probability": pi}
                                  for v, pi in zip(values, p, strict=True)]}
    return {"type": "score", "name": name, "score": answer.expected,
            "confidence": answer.confidence,
            "probabilities": [{"label": label, "value": i, "probability": pi}
                              for i, (label, pi) in enumerate(zip(values, p, strict=True))]}

"""OpenAI's Decisions API (`POST /v1/decisions`, beta since 2026-10-06), shapes from the
openai SDKs' types (`decision_create_params.py`, `decision.py`).

`input` is a string or an array of items (messages of any role, with text and JSON
parts; function and custom tool calls and their outputs), all read by the model as
text; `questions` an ordered array (1–400) of `predicate`, `choice` (typed values:
`"true"` is not `true`) and `score` (levels, lowest first), whose `instructions` are a
string or parts. Answers come back in question order with `name` (null when
not given). Images are a 400 (no model here reads them). A body whose `questions`
is an object is System One's shape: refused naming `/v1/systemone`.
Errors: OpenAI's envelope.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from parlance.core.decisions import YES, Answer, Decision, Kind, Option, Question, predicate
from parlance.core.errors import InvalidRequest, ParlanceError
from parlance.dialects.answer_base import Asked, Decided
from parlance.dialects.base import ErrorResponse, Incoming
from parlance.dialects.openai import errors
from parlance.dialects.shared.wire import WireModel, parse_body

MAX_QUESTIONS = 400  # "Ask 1–400 questions" (the SDK's DecisionCreateParams)
MAX_CHOICES = 255
MIN_LEVELS, MAX_LEVELS = 2, 10
NonEmpty = Annotated[str, Field(min_length=1)]


class Part(WireModel):
    """A content part: text (`input_text`, an assistant's `output_text`, `refusal`), JSON
    data rendered as text (`input_json`), or an image (refused: no model here reads
    them). Prompt-cache breakpoints are accepted and ignored (the engine caches every
    prefix)."""

    type: Literal["input_text", "output_text", "refusal", "input_json", "input_image"]
    text: str | None = None
    refusal: str | None = None
    data: dict[str, Any] | list[dict[str, Any]] | None = None
    image_url: str | None = None


ItemType = Literal["message", "function_call", "function_call_output", "custom_tool_call",
                   "custom_tool_call_output"]


class InputItem(WireModel):
    """A message (user, developer, system or assistant), or a function or custom tool
    call or its output, which the model reads as text."""

    type: ItemType = "message"
    role: Literal["user", "developer", "system", "assistant"] | None = None
    content: str | list[Part] | None = None
    name: str | None = None
    arguments: str | None = None
    input: str | None = None
    call_id: str | None = None
    output: str | list[Part] | None = None


class ChoiceValue(WireModel):
    value: str | bool
    description: str | None = None


class Level(WireModel):
    label: NonEmpty
    description: str | None = None


Instructions = NonEmpty | Annotated[list[Part], Field(min_length=1)]


class PredicateQuestion(WireModel):
    type: Literal["predicate"]
    instructions: Instructions
    name: str | None = None


class ChoiceQuestion(WireModel):
    type: Literal["choice"]
    instructions: Instructions
    name: str | None = None
    choices: list[ChoiceValue]


class ScoreQuestion(WireModel):
    type: Literal["score"]
    instructions: Instructions
    name: str | None = None
    levels: list[Level]


AnyQuestion = Annotated[PredicateQuestion | ChoiceQuestion | ScoreQuestion,
                        Field(discriminator="type")]


class DecisionsBody(WireModel):
    model: str
    input: str | Annotated[list[InputItem], Field(min_length=1)]
    questions: list[AnyQuestion]
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None  # accepted; the engine caches every prefix
    prompt_cache_options: dict[str, Any] | None = None


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


def part_text(part: Part, param: str) -> str:
    if part.type == "input_image":
        raise InvalidRequest("This server's models do not read images.", param=param,
                             code="unsupported_value")
    if part.type == "input_json":
        return json.dumps(part.data, ensure_ascii=False)
    value = part.refusal if part.type == "refusal" else part.text
    if value is None:
        raise InvalidRequest(f"A '{part.type}' part needs its "
                             f"{'refusal' if part.type == 'refusal' else 'text'}.",
                             param=param)
    return value


def content_text(value: str | list[Part] | None, param: str) -> str:
    if value is None:
        raise InvalidRequest("This item needs its content.", param=param)
    if isinstance(value, str):
        return value
    return "\n".join(part_text(p, param) for p in value)


_ROLES = {"user": "User", "developer": "Developer", "system": "System",
          "assistant": "Assistant"}


def item_text(item: InputItem, index: int) -> str:
    """One input item as the model reads it: a message's text after its role, a call
    with its arguments, an output."""
    where = f"input[{index}]"
    if item.type == "message":
        if item.role is None:
            raise InvalidRequest("A message needs its role.", param=f"{where}.role")
        return f"{_ROLES[item.role]}: {content_text(item.content, f'{where}.content')}"
    if item.type in ("function_call", "custom_tool_call"):
        if not item.name:
            raise InvalidRequest("A call needs its name.", param=f"{where}.name")
        given = item.arguments if item.type == "function_call" else item.input
        return f"Tool call {item.name}: {given or ''}"
    return f"Tool output: {content_text(item.output, f'{where}.output')}"


def context_text(value: str | list[InputItem]) -> str:
    if isinstance(value, str):
        return value
    if len(value) == 1 and value[0].type == "message" and value[0].role == "user":
        return content_text(value[0].content, "input[0].content")
    return "\n\n".join(item_text(item, i) for i, item in enumerate(value))


def instructions_text(value: str | list[Part], index: int) -> str:
    if isinstance(value, str):
        return value
    return "\n".join(part_text(p, f"questions[{index}].instructions") for p in value)


def question(index: int, q: PredicateQuestion | ChoiceQuestion | ScoreQuestion) -> Question:
    instructions = instructions_text(q.instructions, index)
    if isinstance(q, PredicateQuestion):
        return predicate(instructions)
    if isinstance(q, ChoiceQuestion):
        labels = [value_label(c.value) for c in q.choices]
        if not 2 <= len(labels) <= MAX_CHOICES or len(set(labels)) != len(labels):
            raise InvalidRequest(f"A choice question needs 2 to {MAX_CHOICES} distinct "
                                 f"choices (true and \"true\" are the same label here).",
                                 param=f"questions[{index}].choices")
        if any(not label.strip() for label in labels):
            raise InvalidRequest("A choice's value must not be empty.",
                                 param=f"questions[{index}].choices")
        return Question(Kind.CHOICE, instructions,
                        tuple(Option(label, c.description)
                              for label, c in zip(labels, q.choices, strict=True)))
    if not MIN_LEVELS <= len(q.levels) <= MAX_LEVELS:
        raise InvalidRequest(f"A score question needs {MIN_LEVELS} to {MAX_LEVELS} levels.",
                             param=f"questions[{index}].levels")
    return Question(Kind.SCORE, instructions,
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

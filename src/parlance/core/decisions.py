"""Decisions: typed answers (yes/no, one of N labels, a level on a scale) with a
probability per label, read from the model instead of generated. Both wire shapes
(OpenAI `/v1/decisions`, System One `/v1/systemone`) parse into a `Decision`.

Each question is rendered with the model's chat template after the shared context,
and every label is scored as the start of the answer (core/scoring.py): the sum of
its tokens' log-probabilities, normalised over the labels. The labels the model reads
are the answers themselves (a choice's values, "Yes"/"No", a level's number), not
letters, so no option is favoured for its position in a lettered list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams
from parlance.core.scoring import PromptScores, ScoreRequest, probabilities
from parlance.core.tools import ReasoningEffort, ReasoningRequest

YES, NO = "Yes", "No"
SYSTEM = ("You answer a question about the context the user gives. Reply with exactly one "
          "of the allowed answers and nothing else.")


class Kind(Enum):
    PREDICATE = "predicate"  # yes or no (System One: "noul")
    CHOICE = "choice"
    SCORE = "score"  # a level on a scale, lowest first


@dataclass(frozen=True, slots=True)
class Option:
    label: str  # what the model answers (and is scored on)
    description: str | None = None


@dataclass(frozen=True, slots=True)
class Question:
    kind: Kind
    instructions: str
    options: tuple[Option, ...]  # predicate: Yes, No; score: "0".."N-1" in order


@dataclass(frozen=True, slots=True)
class Decision:
    model: str
    context: str
    questions: tuple[Question, ...]


@dataclass(frozen=True, slots=True)
class Answer:
    question: Question
    probabilities: tuple[float, ...]  # one per option, summing to 1

    @property
    def best(self) -> int:
        return max(range(len(self.probabilities)), key=self.probabilities.__getitem__)

    @property
    def expected(self) -> float:
        """A score question's expected level (0-based)."""
        return sum(i * p for i, p in enumerate(self.probabilities))

    @property
    def confidence(self) -> float:
        """Choice: how far the best label stands above a uniform guess, 0..1 (the
        formula TypeSafe publishes). Score: 1 less the expected distance from the
        most likely level, relative to a uniform spread's (llama-server's)."""
        p, n = self.probabilities, len(self.probabilities)
        if self.question.kind is Kind.SCORE:
            mode = self.best
            spread = sum(abs(i - (n - 1) / 2) for i in range(n)) / n
            distance = sum(pi * abs(i - mode) for i, pi in enumerate(p))
            return min(1.0, max(0.0, 1 - distance / spread)) if spread else 1.0
        if n < 2:  # one label to choose: nothing else it could have been
            return 1.0
        return max(0.0, (max(p) - 1 / n) / (1 - 1 / n))


def predicate(instructions: str, yes: str | None = None, no: str | None = None) -> Question:
    return Question(Kind.PREDICATE, instructions, (Option(YES, yes), Option(NO, no)))


def scale(instructions: str, levels: Sequence[str | None]) -> Question:
    """Levels lowest first; the model answers with a level's number."""
    return Question(Kind.SCORE, instructions,
                    tuple(Option(str(i), d) for i, d in enumerate(levels)))


def question_text(question: Question) -> str:
    """The question as the user turn's end: instructions, then the allowed answers."""
    lines = [f"Question: {question.instructions}"]
    if question.kind is Kind.PREDICATE:
        meanings = [f"{o.label} means: {o.description}" for o in question.options
                    if o.description]
        lines += meanings
        lines.append(f"Answer {YES} or {NO}.")
    else:
        lines.append("Allowed answers:" if question.kind is Kind.CHOICE
                     else "Levels (answer with the level's number):")
        lines += [f"{o.label}: {o.description}" if o.description else o.label
                  for o in question.options]
        lines.append("Answer with one of: " + ", ".join(o.label for o in question.options)
                     + ".")
    return "\n".join(lines)


def messages(context: str, question: Question) -> tuple[Message, ...]:
    """The conversation a question is asked in: the context first, so that every
    question of a decision shares it as a prefix the engine evaluates once."""
    user = f"Context:\n{context}\n\n{question_text(question)}"
    return (Message(role="system", content=SYSTEM), Message(role="user", content=user))


def score_request(decision: Decision) -> ScoreRequest:
    """Every question as a prompt, its options' labels as the continuations; thinking
    off (the answer must come first)."""
    generation = GenerationRequest(
        model=decision.model,
        prompts=tuple(ChatInput(messages(decision.context, q)) for q in decision.questions),
        sampling=SamplingParams(temperature=0.0),
        reasoning=ReasoningRequest(ReasoningEffort.NONE, best_effort=True),
    )
    return ScoreRequest(generation,
                        tuple(tuple(o.label for o in q.options) for q in decision.questions))


def answers(decision: Decision, scores: Sequence[PromptScores]) -> tuple[Answer, ...]:
    return tuple(Answer(q, tuple(probabilities(s.logprobs)))
                 for q, s in zip(decision.questions, scores, strict=True))

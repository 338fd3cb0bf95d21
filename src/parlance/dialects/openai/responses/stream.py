"""The `/v1/responses` event stream: `event:` + `data:` frames numbered by
`sequence_number` from 0; `response.created`, then `response.in_progress` (or
`response.queued` first for a background response, until its generation starts),
then each output item opened and closed in turn, exactly one terminal event
(`response.completed`, `response.incomplete` at the output cap, `response.failed`, or
`response.incomplete` for a cancelled response), then `data: [DONE]`.

A client that opts in (`Call.progress`, the X-Parlance-Progress header) is also sent
`parlance.prompt_progress` (`done` of `total` prompt tokens evaluated, numbered with the
rest) while each model call's prompt is evaluated: a type of Parlance's own, which no
client that did not ask ever sees. A background response never has it: its frames are
kept for anyone who follows it."""

from __future__ import annotations

from typing import Any

from parlance.core.errors import Cancelled, ParlanceError
from parlance.core.events import Event, Finish, FinishReason, PromptProgress, Usage
from parlance.dialects.base import DONE, CallFacts, Frame
from parlance.dialects.openai.responses.request import ResponsesCall
from parlance.dialects.openai.responses.result import (
    output_builder,
    response_object,
    terminal_event,
)
from parlance.dialects.shared.sealed import Sealer

PROMPT_PROGRESS = "parlance.prompt_progress"


class ResponsesEncoder:
    def __init__(self, call: ResponsesCall, served: CallFacts, sealer: Sealer) -> None:
        self._call = call
        self._model = served.model
        self._builder = output_builder(call, sealer)
        self._sequence = 0
        self._usage: Usage | None = None
        self._reason: FinishReason | None = None
        self._queued = call.body.background  # until its first event
        self._progress = call.progress and not call.body.background
        self.final: dict[str, Any] | None = None  # the terminal response, once sent

    def _frame(self, kind: str, fields: dict[str, Any]) -> Frame:
        frame = Frame({"type": kind, "sequence_number": self._sequence, **fields}, event=kind)
        self._sequence += 1
        return frame

    def _frames(self, events: list[tuple[str, dict[str, Any]]]) -> list[Frame]:
        return [self._frame(kind, fields) for kind, fields in events]

    def snapshot(self, status: str, error: ParlanceError | None = None) -> dict[str, Any]:
        return response_object(self._call, self._model, status=status,
                               output=self._builder.items, usage=self._usage, error=error)

    def open(self) -> list[Frame]:
        """A background response is queued until its generation's first event."""
        if self._queued:
            start = self.snapshot("queued")
            return [self._frame("response.created", {"response": start}),
                    self._frame("response.queued", {"response": start})]
        start = self.snapshot("in_progress")
        return [self._frame("response.created", {"response": start}),
                self._frame("response.in_progress", {"response": start})]

    def idle(self) -> Frame | None:
        """`response.in_progress` again while no output has begun (the prompt is being
        evaluated): a lifecycle event the SDKs take as a fresh snapshot of the same
        response (openai-python's stream state accepts created/queued/in_progress
        alike), and an event for clients whose idle timer counts events (Codex).
        Once output has begun, or while queued, there is none."""
        if self._queued or self._builder.items or self.final is not None:
            return None
        return self._frame("response.in_progress", {"response": self.snapshot("in_progress")})

    def _running(self) -> list[Frame]:
        if not self._queued:
            return []
        self._queued = False
        return [self._frame("response.in_progress", {"response": self.snapshot("in_progress")})]

    def feed(self, event: Event) -> list[Frame]:
        return self._running() + self._feed(event)

    def _feed(self, event: Event) -> list[Frame]:
        match event:
            case Usage():
                self._usage = event
                return []
            case Finish(reason=reason):
                self._reason = reason
                return self._frames(self._builder.close(
                    incomplete=reason is FinishReason.LENGTH))
            case PromptProgress(done=done, total=total) if self._progress:
                return [self._frame(PROMPT_PROGRESS, {"done": done, "total": total})]
        return self._frames(self._builder.feed(event))

    def close(self) -> list[Frame]:
        incomplete = self._reason is FinishReason.LENGTH
        return self._end("incomplete" if incomplete else "completed")

    def fail(self, error: ParlanceError) -> list[Frame]:
        """`Cancelled` (a background response's cancel) ends it as cancelled, not failed."""
        if isinstance(error, Cancelled):
            return self._end("cancelled")
        return self._end("failed", error)

    def _end(self, status: str, error: ParlanceError | None = None) -> list[Frame]:
        """Close the open item, then the one terminal event, then [DONE]."""
        frames = self._running()
        frames += self._frames(self._builder.close(incomplete=status != "completed"))
        self.final = self.snapshot(status, error)
        terminal = self._frame(terminal_event(status), {"response": self.final})
        return [*frames, terminal, Frame(DONE)]

    def outcome(self) -> dict[str, Any]:
        """What is stored: the terminal response, or, for a stream that never reached
        its end (the client left), the response so far as `cancelled`."""
        if self.final is not None:
            return self.final
        self._builder.close(incomplete=True)
        return self.snapshot("cancelled")

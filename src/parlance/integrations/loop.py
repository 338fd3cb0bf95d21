"""The server-side tool loop, as one `Generation`: the model's calls to server-side
tools are checked and run, their results go back into the conversation, and the
model is called again, until it answers without calling a tool.

Downstream it looks like one generation: call indices keep counting across rounds,
each call is followed by its `ToolResult` or `ToolRefused`, intermediate finishes
are swallowed, and one `Usage` sums every round. After `max_rounds` rounds that
called tools, the last round may not call any, so the model must answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

from parlance.core.accumulate import Accumulator, ChoiceResult
from parlance.core.errors import ParlanceError
from parlance.core.events import (
    Event,
    Failed,
    Finish,
    FinishReason,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    ToolRefused,
    ToolResult,
    Usage,
)
from parlance.core.messages import Message, ToolCall
from parlance.core.request import ChatInput, GenerationRequest
from parlance.core.tools import ToolChoice
from parlance.engines.base import Generation
from parlance.integrations.mcp_session import ToolOutput
from parlance.integrations.toolbox import Toolbox

Start = Callable[[GenerationRequest], Awaitable[Generation]]


def merged(total: Usage | None, more: Usage) -> Usage:
    if total is None:
        return more
    return Usage(total.prompt_tokens + more.prompt_tokens,
                 total.completion_tokens + more.completion_tokens,
                 total.first_token_seconds if total.first_token_seconds is not None
                 else more.first_token_seconds,
                 (total.decode_seconds or 0.0) + (more.decode_seconds or 0.0),
                 total.reasoning_tokens + more.reasoning_tokens,
                 total.cached_tokens + more.cached_tokens)


class ToolLoop:
    """`first` is the first round, already started; None when calls the client
    approved must run before the model is called at all (`begin` decides)."""

    @classmethod
    async def begin(cls, request: GenerationRequest, toolbox: Toolbox,
                    start: Start) -> ToolLoop:
        """The loop for `request`. Its first round starts now, so that what can be
        refused before a response begins is; with approved calls to run first, the
        loop starts it itself once they have run."""
        first = None if request.approved_calls else await start(request)
        return cls(first, request, toolbox, start)

    def __init__(self, first: Generation | None, request: GenerationRequest,
                 toolbox: Toolbox, start: Start) -> None:
        self.prompts = first.prompts if first is not None else ()
        self._current = first
        self._request = request
        self._toolbox = toolbox
        self._start = start
        self._cancelled = False
        self._running: asyncio.Task[ToolOutput] | None = None

    def cancel(self) -> None:
        self._cancelled = True
        if self._current is not None:
            self._current.cancel()
        if self._running is not None:
            self._running.cancel()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        for listing in self._toolbox.listings:
            yield listing
        offset, rounds, usage = 0, 0, None
        request = self._request
        if self._current is None:
            approved = [ToolCall(c.call_id, c.name, c.arguments) for c in request.approved_calls]
            for i, call in enumerate(request.approved_calls):
                yield ToolCallStart(call.call_id, call.name, call_index=i,
                                    provider=self._toolbox.provider(call.name),
                                    approved_by=call.approval_id)
                yield ToolCallArgs(call.arguments, call_index=i)
                yield ToolCallEnd(call_index=i)
            outputs: list[str] = []
            async for event in self._execute(list(enumerate(approved)), outputs):
                yield event
            if len(outputs) < len(approved):
                return  # failed or cancelled
            offset = len(approved)
            request = self._next_request(request, "", approved, outputs, rounds)
            try:
                self._current = await self._start(request)
            except ParlanceError as exc:
                yield Failed(exc)
                return
        while True:
            round_ = Accumulator()
            finish: Finish | None = None
            async for event in self._current:
                match event:
                    case Usage():
                        usage = merged(usage, event)
                        continue
                    case Finish():
                        finish = event
                        continue
                    case Failed():
                        yield event
                        return
                round_.feed(event)
                yield self._renumbered(event, offset)
            said = round_.result.choice(0)
            if finish is None or self._cancelled:
                return  # cancelled: the stream just ends
            if finish.reason is not FinishReason.TOOL_CALLS or not self._server_side(said):
                yield finish
                if usage is not None:
                    yield usage
                return
            calls = [ToolCall(c.call_id, c.name, c.arguments) for c in said.tool_calls]
            ready = [(offset + i, call) for i, call in enumerate(calls)
                     if not self._toolbox.awaits_approval(call.name)]
            outputs = []
            async for event in self._execute(ready, outputs):
                yield event
            if len(outputs) < len(ready):
                return  # failed or cancelled
            if len(ready) < len(calls):  # some calls wait for the client's approval
                yield finish
                if usage is not None:
                    yield usage
                return
            offset += len(calls)
            rounds += 1
            request = self._next_request(request, said.text, calls, outputs, rounds)
            try:
                self._current = await self._start(request)
            except ParlanceError as exc:
                yield Failed(exc)
                return

    async def _execute(self, calls: list[tuple[int, ToolCall]],
                       outputs: list[str]) -> AsyncIterator[Event]:
        """Run each (call_index, call) in turn, reporting its `ToolResult` or
        `ToolRefused` and keeping what the model will read in `outputs`; a failure
        ends the run with `Failed`, a cancellation silently (outputs stay short)."""
        for call_index, call in calls:
            try:
                outcome = await self._run(call.name, call.arguments)
            except ParlanceError as exc:
                yield Failed(exc)
                return
            except asyncio.CancelledError:
                if self._cancelled:
                    return
                raise
            if isinstance(outcome, ToolRefused):
                yield replace(outcome, call_index=call_index)
                outputs.append(outcome.reason)
            else:
                yield ToolResult(outcome.text, call_index=call_index, is_error=outcome.is_error)
                outputs.append(f"Error: {outcome.text}" if outcome.is_error else outcome.text)

    def _server_side(self, calls: ChoiceResult) -> bool:
        """False when the model called a tool the client runs itself: the client
        gets the calls and the turn ends, as without server-side tools."""
        client_tools = {t.name for t in self._request.tools} - {
            s.name for s in self._toolbox.specs()}
        return not any(call.name in client_tools for call in calls.tool_calls)

    def _renumbered(self, event: Event, offset: int) -> Event:
        match event:
            case ToolCallStart():
                return replace(event, call_index=event.call_index + offset,
                               provider=self._toolbox.provider(event.name),
                               awaits_approval=self._toolbox.awaits_approval(event.name))
            case ToolCallArgs() | ToolCallEnd():
                return replace(event, call_index=event.call_index + offset)
        return event

    async def _run(self, name: str, arguments: str) -> ToolOutput | ToolRefused:
        checked = self._toolbox.check(name, arguments)
        if isinstance(checked, ToolRefused):
            return checked
        self._running = asyncio.ensure_future(self._toolbox.run(name, checked))
        try:
            return await self._running
        finally:
            self._running = None

    def _next_request(self, request: GenerationRequest, text: str, calls: list[ToolCall],
                      outputs: list[str], rounds: int) -> GenerationRequest:
        prompt = request.prompts[0]
        assert isinstance(prompt, ChatInput)
        said = Message("assistant", text, tool_calls=tuple(calls))
        results = [Message("tool", output, name=c.name, tool_call_id=c.id)
                   for c, output in zip(calls, outputs, strict=True)]
        choice = request.tool_choice
        if rounds >= self._toolbox.settings.max_rounds:
            choice = ToolChoice("none")
        elif choice.forced and rounds:
            choice = ToolChoice("auto")  # a forced call was made; now the model may answer
        return replace(request, prompts=(ChatInput((*prompt.messages, said, *results)),),
                       tool_choice=choice, approved_calls=())

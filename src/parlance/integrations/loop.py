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
                 total.reasoning_tokens + more.reasoning_tokens)


class ToolLoop:
    def __init__(self, first: Generation, request: GenerationRequest, toolbox: Toolbox,
                 start: Start) -> None:
        self.prompts = first.prompts
        self._current = first
        self._request = request
        self._toolbox = toolbox
        self._start = start
        self._cancelled = False
        self._running: asyncio.Task[str] | None = None

    def cancel(self) -> None:
        self._cancelled = True
        self._current.cancel()
        if self._running is not None:
            self._running.cancel()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        offset, rounds, usage = 0, 0, None
        request = self._request
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
            calls = round_.result.choice(0)
            if finish is None or self._cancelled:
                return  # cancelled: the stream just ends
            if finish.reason is not FinishReason.TOOL_CALLS or not self._server_side(calls):
                yield finish
                if usage is not None:
                    yield usage
                return
            outputs = []
            for i, call in enumerate(calls.tool_calls):
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
                    yield replace(outcome, call_index=offset + i)
                    outputs.append(outcome.reason)
                else:
                    yield ToolResult(outcome, call_index=offset + i)
                    outputs.append(outcome)
            offset += len(calls.tool_calls)
            rounds += 1
            request = self._next_request(request, calls, outputs, rounds)
            try:
                self._current = await self._start(request)
            except ParlanceError as exc:
                yield Failed(exc)
                return

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
                               provider=self._toolbox.provider(event.name))
            case ToolCallArgs() | ToolCallEnd():
                return replace(event, call_index=event.call_index + offset)
        return event

    async def _run(self, name: str, arguments: str) -> str | ToolRefused:
        checked = self._toolbox.check(name, arguments)
        if isinstance(checked, ToolRefused):
            return checked
        self._running = asyncio.ensure_future(self._toolbox.run(name, checked))
        try:
            return await self._running
        finally:
            self._running = None

    def _next_request(self, request: GenerationRequest, calls: ChoiceResult,
                      outputs: list[str], rounds: int) -> GenerationRequest:
        prompt = request.prompts[0]
        assert isinstance(prompt, ChatInput)
        said = Message("assistant", calls.text, tool_calls=tuple(
            ToolCall(c.call_id, c.name, c.arguments) for c in calls.tool_calls))
        results = [Message("tool", output, name=c.name, tool_call_id=c.call_id)
                   for c, output in zip(calls.tool_calls, outputs)]
        choice = request.tool_choice
        if rounds >= self._toolbox.settings.max_rounds:
            choice = ToolChoice("none")
        elif choice.forced:
            choice = ToolChoice("auto")  # a forced call was made; now the model may answer
        return replace(request, prompts=(ChatInput((*prompt.messages, said, *results)),),
                       tool_choice=choice)

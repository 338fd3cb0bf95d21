"""One upstream choice's stream chunks as core events.

Chat chunks (`choices[].delta`) and legacy completion chunks (`choices[].text`)
are both read. Reasoning arrives as `reasoning_content` (DeepSeek, SGLang,
llama-server, vLLM before 0.11) or `reasoning` (vLLM 0.11+, Ollama, OpenRouter);
a server that sends both sends the same text twice, so one is taken. Tool calls
arrive as deltas keyed by their `index`: a header with id and name, then argument
fragments (some servers send a call whole in one delta). A call is ended when the
next one begins or the choice finishes, so calls never interleave downstream.

A call's arguments are held whole downstream (the tool contract parses them, the
encoders' `done` events and stored responses repeat them), so they are bounded: one
call's by the bound of one event (`--upstream-max-event-mb`: a server may send a call
whole in one event), a choice's by `ARGUMENT_CALLS` of those. An upstream past either
fails the stream (`upstream_arguments_too_large`), not read on into memory.

Usage comes from the final usage chunk (`stream_options.include_usage`); cached
prompt tokens from `prompt_tokens_details.cached_tokens` (vLLM, OpenAI) or
llama-server's `timings.cache_n`.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from parlance.core.errors import ParlanceError, UpstreamFailure
from parlance.core.events import (
    Event,
    Finish,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    TopLogprob,
)
from parlance.engines.upstream.refusals import stream_error, upstream_message
from parlance.engines.upstream.tool_contract import ToolContract
from parlance.engines.upstream.wire import FREEFORM_FIELD

# A choice's arguments, all its calls together: this many calls' bound.
ARGUMENT_CALLS = 4
MAX_CALL_ARGUMENTS = 8 * 2**20  # characters; the default bound of one upstream event

_REASONS = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH,
            "tool_calls": FinishReason.TOOL_CALLS, "function_call": FinishReason.TOOL_CALLS}


class StreamError(Exception):
    """The upstream's stream failed: an error object inside it, or a stream it made
    unreadable. `said`: what the upstream wrote, for the operator's log only."""

    def __init__(self, error: ParlanceError, said: str = "") -> None:
        super().__init__(error.message)
        self.error = error
        self.said = said


@dataclass(frozen=True, slots=True)
class UpstreamUsage:
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int = 0
    cached_tokens: int = 0
    reported: bool = True  # False: counted here from the chunks (no usage chunk came)


@dataclass(slots=True)
class _Call:
    call_index: int
    call_id: str
    name: str = ""
    started: bool = False
    freeform: bool = False
    held: list[str] = field(default_factory=list)  # arguments before the name, or freeform
    size: int = 0  # characters of arguments so far


class ChoiceMapper:
    """Events of one upstream choice, numbered `index` downstream."""

    def __init__(self, index: int, *, stops: tuple[str, ...] = (),
                 freeform: frozenset[str] = frozenset(),
                 names: dict[str, str] | None = None,
                 contract: ToolContract | None = None,
                 max_arguments: int = MAX_CALL_ARGUMENTS, structured: bool = False) -> None:
        """`contract`: what tool_choice promises, checked on every event (a breach
        is a `StreamError`); until a call begins, text and reasoning are held back, so
        an answer that breaks it has sent nothing and can be asked for again.
        `max_arguments`: one call's bound, in characters. `structured`: the answer is a
        forced call asked for as structured output (`wire.structured_call`), whose
        JSON content becomes the call."""
        self.index = index
        self._max_arguments = max_arguments
        self._arguments = 0  # characters of every call's arguments so far
        self._contract = contract
        self.structured = structured
        self._answer: list[str] = []  # structured: the JSON content so far
        self._answered = 0  # its characters
        self._held: list[Event] | None = []  # before a contract's call; None: released
        self._holding = 0  # characters held
        self._stops = stops
        self._freeform = freeform
        self._names = names or {}  # tool names as sent upstream → as the request has them
        self._calls: dict[int, _Call] = {}
        self._open: _Call | None = None
        self._next_call = 0
        self.finished = False
        self._usage: dict[str, Any] | None = None
        self._timings: dict[str, Any] | None = None
        self.pieces = 0  # content, reasoning and argument deltas: tokens, roughly

    # -- chunks ---------------------------------------------------------------------

    def feed(self, chunk: Any) -> list[Event]:
        if not isinstance(chunk, dict):
            return []
        error = chunk.get("error")
        if error or chunk.get("object") == "error":
            body = error if error else chunk
            raise StreamError(stream_error(body), said=upstream_message({"error": body}))
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        timings = chunk.get("timings")
        if isinstance(timings, dict):
            self._timings = timings
        choices = chunk.get("choices")
        if not choices:
            return []
        events: list[Event] = []
        for choice in choices:
            if isinstance(choice, dict) and not self.finished:
                self._choice(choice, events)
        return self._kept(events)

    def constrained(self) -> ChoiceMapper:
        """A mapper for the same choice asked again as a structured call."""
        return ChoiceMapper(self.index, stops=self._stops, freeform=self._freeform,
                            names=self._names, max_arguments=self._max_arguments,
                            structured=True,
                            contract=self._contract.fresh() if self._contract else None)

    def _kept(self, events: list[Event]) -> list[Event]:
        """`events`, unless they break the tool_choice contract; under a contract, text
        and reasoning wait for the first call."""
        if self._contract is None:
            return events
        problem = self._contract.breach(events)
        if problem:
            raise StreamError(UpstreamFailure(
                f"The upstream replica broke what tool_choice requires: {problem}.",
                code="tool_choice_unmet"))
        if self._held is None:
            return events
        self._holding += sum(len(e.text) for e in events
                             if isinstance(e, TextDelta | ReasoningDelta))
        if (any(isinstance(e, ToolCallStart) for e in events)
                or self._holding > self._max_arguments):  # (held no further: memory)
            held, self._held = self._held, None
            return held + events
        self._held.extend(events)
        return []

    def _choice(self, choice: dict[str, Any], events: list[Event]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning and isinstance(reasoning, str):
                self.pieces += 1
                events.append(ReasoningDelta(reasoning, self.index))
            content = delta.get("content")
            if content and isinstance(content, str) and self.structured:
                self.pieces += 1
                self._answered += len(content)
                if self._answered > self._max_arguments:
                    raise StreamError(_too_long(f"a structured call longer than "
                                                f"{self._max_arguments} characters"))
                self._answer.append(content)
            elif content and isinstance(content, str):
                self.pieces += 1
                events.append(TextDelta(content, self.index,
                                        _chat_logprobs(choice.get("logprobs"))))
            refusal = delta.get("refusal")
            if refusal and isinstance(refusal, str):
                events.append(TextDelta(refusal, self.index))
            calls = delta.get("tool_calls")
            if calls and isinstance(calls, list):
                self._tool_calls(calls, events)
        else:
            text = choice.get("text")
            if text and isinstance(text, str):
                self.pieces += 1
                events.append(TextDelta(text, self.index,
                                        _completion_logprobs(choice.get("logprobs"))))
        reason = choice.get("finish_reason")
        if reason:
            self._finish(str(reason), choice, events)

    def _tool_calls(self, calls: list[Any], events: list[Event]) -> None:
        for position, delta in enumerate(calls):
            if not isinstance(delta, dict):
                continue
            key = delta.get("index")
            if not isinstance(key, int):
                key = len(self._calls) if delta.get("id") else max(self._calls, default=position)
            call = self._calls.get(key)
            function = delta.get("function") or {}
            if call is None:
                self._end_open(events)
                call = _Call(self._next_call, str(delta.get("id") or _call_id()))
                self._next_call += 1
                self._calls[key] = call
                self._open = call
            name = function.get("name")
            if not call.started and name and isinstance(name, str):
                name = self._names.get(name, name)
                call.name = name
                call.freeform = name in self._freeform
                call.started = True
                events.append(ToolCallStart(call.call_id, name, self.index, call.call_index))
            arguments = function.get("arguments")
            if isinstance(arguments, dict):  # a server that sends the object itself
                arguments = json.dumps(arguments, ensure_ascii=False)
            if arguments and isinstance(arguments, str):
                self._count(call, len(arguments))
                self.pieces += 1
                if call.started and not call.freeform:
                    if call.held:
                        events.append(ToolCallArgs("".join(call.held), self.index,
                                                   call.call_index))
                        call.held.clear()
                    events.append(ToolCallArgs(arguments, self.index, call.call_index))
                else:
                    call.held.append(arguments)

    def _count(self, call: _Call, size: int) -> None:
        """`size` more characters of `call`'s arguments, within the bounds."""
        call.size += size
        self._arguments += size
        if call.size > self._max_arguments:
            raise StreamError(_too_long(f"arguments longer than {self._max_arguments} "
                                        "characters for one call"))
        if self._arguments > self._max_arguments * ARGUMENT_CALLS:
            raise StreamError(_too_long(
                f"arguments longer than {self._max_arguments * ARGUMENT_CALLS} "
                "characters for one answer's calls together"))

    def _end_open(self, events: list[Event]) -> None:
        call, self._open = self._open, None
        if call is None or not call.started:
            return  # a call that never got a name is no call
        if call.held:
            text = "".join(call.held)
            events.append(ToolCallArgs(_freeform_input(text) if call.freeform else text,
                                       self.index, call.call_index))
            call.held.clear()
        events.append(ToolCallEnd(self.index, call.call_index))

    def _answered_call(self, events: list[Event]) -> None:
        """A structured answer's call: `{"name", "arguments"}` as the schema asked.
        Anything else is no call (the contract then names the breach)."""
        try:
            answer = json.loads("".join(self._answer))
        except ValueError:
            return
        sent = answer.get("name") if isinstance(answer, dict) else None
        if not isinstance(sent, str):
            return
        name = self._names.get(sent, sent)
        arguments = json.dumps(answer.get("arguments", {}), ensure_ascii=False)
        call = _Call(self._next_call, _call_id(), name, started=True,
                     freeform=name in self._freeform)
        self._calls[len(self._calls)] = call
        self._next_call += 1
        events.append(ToolCallStart(call.call_id, name, self.index, call.call_index))
        events.append(ToolCallArgs(_freeform_input(arguments) if call.freeform else arguments,
                                   self.index, call.call_index))
        events.append(ToolCallEnd(self.index, call.call_index))

    def _finish(self, reason: str, choice: dict[str, Any], events: list[Event]) -> None:
        self._end_open(events)
        if self.structured and reason != "length":
            self._answered_call(events)
        self.finished = True
        mapped = _REASONS.get(reason, FinishReason.STOP)
        if mapped is FinishReason.STOP and any(c.started for c in self._calls.values()):
            mapped = FinishReason.TOOL_CALLS
        matched = None
        for key in ("stop_reason", "matched_stop"):  # vLLM, SGLang
            value = choice.get(key)
            if isinstance(value, str) and value in self._stops:
                matched = value
                break
        events.append(Finish(mapped, self.index,
                             matched if mapped is FinishReason.STOP else None))

    def end_of_stream(self) -> list[Event]:
        """The stream ended cleanly (`[DONE]`) without finishing this choice."""
        if self.finished:
            return []
        events: list[Event] = []
        self._finish("stop", {}, events)
        return self._kept(events)

    # -- usage ----------------------------------------------------------------------

    def usage(self) -> UpstreamUsage:
        usage = self._usage
        if usage is None:
            return UpstreamUsage(0, self.pieces, reported=False)
        details = usage.get("completion_tokens_details") or {}
        prompt_details = usage.get("prompt_tokens_details") or {}
        cached = _int(prompt_details.get("cached_tokens"))
        if not cached and self._timings is not None:
            cached = _int(self._timings.get("cache_n"))
        return UpstreamUsage(_int(usage.get("prompt_tokens")),
                             _int(usage.get("completion_tokens")),
                             _int(details.get("reasoning_tokens")), cached)


def _too_long(what: str) -> UpstreamFailure:
    return UpstreamFailure(f"The upstream replica sent {what} (parlance serve "
                           "--upstream-max-event-mb); it was not read further.",
                           code="upstream_arguments_too_large")


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


def _freeform_input(arguments: str) -> str:
    """A freeform call's raw input from the one-argument object it was offered as."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get(FREEFORM_FIELD), str):
        return str(value[FREEFORM_FIELD])
    return arguments


def _token_bytes(entry: dict[str, Any], token: str) -> tuple[int, ...]:
    raw = entry.get("bytes")
    if isinstance(raw, list) and all(isinstance(b, int) and 0 <= b < 256 for b in raw):
        return tuple(raw)
    return tuple(token.encode("utf-8"))


def _chat_logprobs(logprobs: Any) -> tuple[TokenLogprob, ...] | None:
    if not isinstance(logprobs, dict) or not isinstance(logprobs.get("content"), list):
        return None
    out = []
    for entry in logprobs["content"]:
        if not isinstance(entry, dict):
            continue
        token = str(entry.get("token", ""))
        top = tuple(TopLogprob(str(alt.get("token", "")), float(alt.get("logprob", 0.0)),
                               _token_bytes(alt, str(alt.get("token", ""))))
                    for alt in entry.get("top_logprobs") or () if isinstance(alt, dict))
        logprob = entry.get("logprob")
        out.append(TokenLogprob(token, float(logprob) if logprob is not None else None,
                                _token_bytes(entry, token), top))
    return tuple(out)


def _completion_logprobs(logprobs: Any) -> tuple[TokenLogprob, ...] | None:
    if not isinstance(logprobs, dict):
        return None
    if isinstance(logprobs.get("content"), list):  # llama-server answers chat-style
        return _chat_logprobs(logprobs)
    tokens = logprobs.get("tokens")
    if not isinstance(tokens, list):
        return None
    values = logprobs.get("token_logprobs") or [None] * len(tokens)
    tops = logprobs.get("top_logprobs") or [None] * len(tokens)
    out = []
    for token, value, top in zip(tokens, values, tops, strict=False):
        alternatives = tuple(TopLogprob(str(t), float(lp), tuple(str(t).encode("utf-8")))
                             for t, lp in (top or {}).items()) if isinstance(top, dict) else ()
        out.append(TokenLogprob(str(token), float(value) if value is not None else None,
                                tuple(str(token).encode("utf-8")), alternatives))
    return tuple(out)

"""Functionary v3.2's output: a run of messages, each `>>>RECIPIENT\\n` then its text
(the generation prompt already wrote the first `>>>`). The recipient `all` is the
user: its text is content. A tool's name is a call: JSON arguments, or for `python`
(and `code_interpreter`) raw code, streamed as the `code` argument. Content streams
as it is written, up to the next `>>>`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from parlance.core.events import Event, TextDelta, ToolCallArgs, ToolCallEnd, ToolCallStart
from parlance.engines.parsing.calls import new_call_id
from parlance.engines.parsing.json_end import JsonEnd
from parlance.engines.parsing.python_tag import CODE_TOOLS
from parlance.engines.parsing.stepped import SteppedRegion
from parlance.engines.text import partial_suffix

NEXT = ">>>"
_RECIPIENT = re.compile(r"[ \t]*([A-Za-z_][\w.\-]*[ \t]*(\r?\n|$)|$)")
_WS = " \t\r\n"


class RecipientStream(SteppedRegion):
    """The output's messages from its first recipient on. `push`, then `close`."""

    def __init__(self, index: int, first_call: int, tool_names: frozenset[str]) -> None:
        self._index = index
        self.next_call = first_call
        self._tools = tool_names
        super().__init__()
        self._state = "name"  # name | text | args | json | code | after
        self._json_end = JsonEnd()
        self._text_started = False
        self._name_called = ""
        self.emitted = False

    def close(self, *, cut: bool = False) -> tuple[list[Event], str]:
        events: list[Event] = []
        state, rest = self._state, self._buf
        self._buf = ""
        if state in ("text", "name"):  # (a lone word: text for the user)
            self._text(rest, events)
        elif state == "code":
            self._code(rest.rstrip(_WS), events)
            events += [self._args('"}'), self._end()]
        elif state == "json":
            if rest:
                events.append(self._args(rest))
            events.append(self._end())
        elif state == "args":
            events += [self._args("{}"), self._end()]
        return events, ""

    def _step(self, events: list[Event]) -> bool:
        match self._state:
            case "name":
                return self._name(events)
            case "text":
                return self._until_next(events, self._text)
            case "args":
                return self._args_start(events)
            case "json":
                return self._json(events)
            case "code":
                return self._until_next(events, self._code, ending=True)
        return self._after()

    def _name(self, events: list[Event]) -> bool:
        if not _RECIPIENT.match(self._buf):  # no recipient line (structured output's JSON)
            self._state = "text"
            return True
        at = self._buf.find("\n")
        if at < 0:
            return False
        name, self._buf = self._buf[:at].strip(_WS), self._buf[at + 1:]
        if name in self._tools:
            self.emitted, self._name_called = True, name
            events.append(ToolCallStart(new_call_id(), name, self._index, self.next_call))
            self._state = "args"
        else:  # `all`, or a recipient the request does not offer: text for the user
            self._state = "text"
        return True

    def _args_start(self, events: list[Event]) -> bool:
        body = self._buf.lstrip(_WS)
        if not body:
            return False
        if body[0] == "{" or self._name_called not in CODE_TOOLS:
            self._buf, self._state = body, "json"
            self._json_end.reset()
            return True
        events.append(self._args('{"code": "'))
        self._buf, self._state = body, "code"
        return True

    def _json(self, events: list[Event]) -> bool:
        end = self._json_end.end_in(self._buf)
        if end is None:
            events.append(self._args(self._buf))
            self._buf = ""
            return False
        events += [self._args(self._buf[:end]), self._end()]
        self._buf, self._state = self._buf[end:], "after"
        return True

    def _after(self) -> bool:
        at = self._buf.find(NEXT)
        if at < 0:
            self._buf = self._buf[len(self._buf) - partial_suffix(self._buf, [NEXT]):]
            return False
        self._buf, self._state = self._buf[at + len(NEXT):], "name"
        return True

    def _until_next(self, events: list[Event], emit: Callable[[str, list[Event]], None], *,
                    ending: bool = False) -> bool:
        at = self._buf.find(NEXT)
        if at < 0:
            keep = partial_suffix(self._buf, [NEXT])
            if ending:  # code: trailing blank space may be the layout's, before `>>>`
                head = self._buf[:len(self._buf) - keep]
                keep += len(head) - len(head.rstrip(_WS))
            body, self._buf = self._buf[:len(self._buf) - keep], self._buf[len(self._buf) - keep:]
            emit(body, events)
            return False
        emit(self._buf[:at].rstrip(_WS) if ending else self._buf[:at], events)
        if ending:
            events += [self._args('"}'), self._end()]
        self._buf, self._state = self._buf[at + len(NEXT):], "name"
        self._text_started = False
        return True

    def _text(self, text: str, events: list[Event]) -> None:
        if not self._text_started:
            text = text.lstrip(_WS)
            self._text_started = bool(text)
        if text:
            events.append(TextDelta(text, self._index))

    def _code(self, text: str, events: list[Event]) -> None:
        if text:
            events.append(self._args(json.dumps(text, ensure_ascii=False)[1:-1]))

    def _args(self, text: str) -> ToolCallArgs:
        return ToolCallArgs(text, self._index, self.next_call)

    def _end(self) -> ToolCallEnd:
        end = ToolCallEnd(self._index, self.next_call)
        self.next_call += 1
        return end

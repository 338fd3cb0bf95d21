"""Parses the call objects of one tool-call region while they stream in.

A call whose header (`{"name": "…", "arguments": `) arrives first is streamed:
start as soon as the name is known, then the raw JSON text of the arguments as
it is generated, then end. Anything else is buffered to the end of the region
and parsed whole; if it is no call after all, the region's text is handed back
to be emitted as plain content.
"""

from __future__ import annotations

import json
import re
import secrets
from json.decoder import scanstring  # type: ignore[attr-defined]  # public, not in stubs
from typing import Any

from parlance.core.events import Event, ToolCallArgs, ToolCallEnd, ToolCallStart

ARGUMENT_KEYS = ('"arguments"', '"parameters"')
_NAME = re.compile(r"[A-Za-z_][\w.\-]*")
_SKIPPED = " \t\r\n,;[]"


def new_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


class _NeedMore(Exception):
    pass


class _NotAHeader(Exception):
    pass


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    if i == len(text):
        raise _NeedMore
    return i


def _expect(text: str, i: int, *options: str) -> int:
    """Index after whichever option starts at `i`."""
    rest = text[i:]
    for option in options:
        if rest.startswith(option):
            return i + len(option)
    if any(option.startswith(rest) for option in options):
        raise _NeedMore
    raise _NotAHeader


def parse_header(text: str) -> tuple[str, int, bool] | None:
    """(name, index of the arguments' `{`, wrapped in an object) or None for "need
    more text"; raises _NotAHeader when the text cannot start a streamable call."""
    try:
        i = _skip_ws(text, 0)
        if text[i] == "{":
            i = _expect(text, _skip_ws(text, i + 1), '"name"')
            i = _expect(text, _skip_ws(text, i), ":")
            i = _skip_ws(text, i)
            if text[i] != '"':
                raise _NotAHeader
            try:
                name, i = scanstring(text, i + 1)
            except json.JSONDecodeError as exc:
                if "Unterminated" in exc.msg:
                    raise _NeedMore from exc
                raise _NotAHeader from exc
            i = _expect(text, _skip_ws(text, i), ",")
            i = _expect(text, _skip_ws(text, i), *ARGUMENT_KEYS)
            i = _expect(text, _skip_ws(text, i), ":")
            wrapped = True
        else:  # Mistral's `name[ARGS]{…}`
            match = _NAME.match(text, i)
            if not match:
                raise _NotAHeader
            name, i = match.group(), match.end()
            if i == len(text):
                raise _NeedMore
            i = _expect(text, i, "[ARGS]")
            wrapped = False
        i = _skip_ws(text, i)
        if text[i] != "{":
            raise _NotAHeader
        return name, i, wrapped
    except _NeedMore:
        return None


def _calls_in(text: str) -> list[tuple[str, str]] | None:
    """Whole-text fallback: (name, arguments JSON) of every call, or None."""
    text = text.strip().rstrip(";")
    candidates = [text, f"[{text}]", "[" + text.replace(";", ",") + "]"]
    for candidate in candidates:
        try:
            value: Any = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        items = value if isinstance(value, list) else [value]
        calls = [_call_of(item) for item in items]
        if calls and all(c is not None for c in calls):
            return calls  # type: ignore[return-value]
    return None


def _call_of(item: Any) -> tuple[str, str] | None:
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("function"), dict):  # {"type": "function", "function": {…}}
        item = item["function"]
    name = item.get("name")
    args = item.get("arguments", item.get("parameters", {}))
    if not isinstance(name, str):
        return None
    if isinstance(args, str):
        return name, args
    return name, json.dumps(args, ensure_ascii=False)


class CallStream:
    """One region's calls. `push` text, then `close` once the region ends."""

    def __init__(self, index: int, first_call: int, known: frozenset[str] | None = None):
        self._index = index
        self.next_call = first_call
        self._known = known  # when set, a name outside it means "not a call"
        self._buf = ""
        self._raw = ""
        self._state = "between"  # between | args | tail | buffered
        self._wrapped = True
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self.emitted = False

    def push(self, text: str) -> list[Event]:
        self._raw += text
        self._buf += text
        events: list[Event] = []
        while self._buf and self._step(events):
            pass
        return events

    def close(self) -> tuple[list[Event], str]:
        """End of the region: (events, text to emit as content instead)."""
        events: list[Event] = []
        if self._state in ("args", "tail"):
            events.append(self._end())
        elif self._buf.strip(" \t\r\n,;[]"):
            calls = _calls_in(self._buf)
            if calls and all(self._accepts(name) for name, _ in calls):
                for name, args in calls:
                    events += [self._start(name), ToolCallArgs(args, self._index, self.next_call),
                               self._end()]
            elif not self.emitted:
                return [], self._raw
        self._buf = ""
        return events, ""

    # -- states ---------------------------------------------------------------

    def _step(self, events: list[Event]) -> bool:
        match self._state:
            case "between":
                return self._header(events)
            case "args":
                return self._args(events)
            case "tail":
                return self._tail(events)
        return False

    def _header(self, events: list[Event]) -> bool:
        self._buf = self._buf.lstrip(_SKIPPED)
        if not self._buf:
            return False
        try:
            found = parse_header(self._buf)
        except _NotAHeader:
            self._state = "buffered"
            return False
        if found is None:
            return False
        name, start, wrapped = found
        if not self._accepts(name):
            self._state = "buffered"
            return False
        events.append(self._start(name))
        self._buf, self._wrapped, self._state = self._buf[start:], wrapped, "args"
        self._depth, self._in_string, self._escaped = 0, False, False
        return True

    def _args(self, events: list[Event]) -> bool:
        end = self._scan_value_end()
        fragment = self._buf if end is None else self._buf[:end]
        if fragment:
            events.append(ToolCallArgs(fragment, self._index, self.next_call))
        if end is None:
            self._buf = ""
            return False
        self._buf = self._buf[end:]
        if self._wrapped:
            self._state = "tail"
        else:
            events.append(self._end())
            self._state = "between"
        return True

    def _tail(self, events: list[Event]) -> bool:
        close = self._buf.find("}")
        if close < 0:
            self._buf = ""
            return False
        self._buf = self._buf[close + 1:]
        events.append(self._end())
        self._state = "between"
        return True

    def _scan_value_end(self) -> int | None:
        """Index just after the arguments object, or None when it goes on."""
        for i, ch in enumerate(self._buf):
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif ch == "\\":
                    self._escaped = True
                elif ch == '"':
                    self._in_string = False
            elif ch == '"':
                self._in_string = True
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                if self._depth == 0:
                    return i + 1
        return None

    # -- events ---------------------------------------------------------------

    def _accepts(self, name: str) -> bool:
        return self._known is None or name in self._known

    def _start(self, name: str) -> ToolCallStart:
        self.emitted = True
        return ToolCallStart(new_call_id(), name, self._index, self.next_call)

    def _end(self) -> ToolCallEnd:
        end = ToolCallEnd(self._index, self.next_call)
        self.next_call += 1
        self._state = "between"
        return end

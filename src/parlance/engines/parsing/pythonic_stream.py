"""Parses calls written as Python (Llama 4's `[get_weather(city="Paris"), get_time()]`,
Llama 3's builtin `brave_search.call(query="…")`) while they stream in: a call starts
as soon as `name(` is complete, each `key=value` goes out as JSON as soon as its value
ends, and the call ends at its `)`.

A value is a Python literal (`'x'`, `"x"`, `1`, `True`, `None`, lists, dicts), or JSON
(`true`, `null`) as models also write; anything else is kept as the string it is.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from parlance.core.events import Event, ToolCallArgs, ToolCallEnd, ToolCallStart
from parlance.engines.parsing.calls import new_call_id
from parlance.engines.parsing.stepped import SteppedRegion

_WS = " \t\r\n"
_NAME = re.compile(r"[A-Za-z_][\w.\-]*")
_KEY = re.compile(r"([A-Za-z_]\w*)\s*=")
_JSON_WORDS = {"true": True, "false": False, "null": None}


def literal_value(text: str) -> Any:
    """A Python (or JSON) literal's value; the text itself when it is neither."""
    text = text.strip(_WS)
    if text in _JSON_WORDS:
        return _JSON_WORDS[text]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        pass
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return text


class _ValueEnd:
    """Where a Python value arriving in pieces ends: at a `,` or `)` outside any
    string and bracket."""

    def __init__(self) -> None:
        self.depth = 0
        self.quote = ""
        self.escaped = False

    def end_in(self, piece: str) -> int | None:
        for i, ch in enumerate(piece):
            if self.quote:
                if self.escaped:
                    self.escaped = False
                elif ch == "\\":
                    self.escaped = True
                elif ch == self.quote:
                    self.quote = ""
            elif ch in "\"'":
                self.quote = ch
            elif ch in "([{":
                self.depth += 1
            elif ch in ")]}":
                if self.depth == 0:
                    return i
                self.depth -= 1
            elif ch == "," and self.depth == 0:
                return i
        return None


class PythonicCallStream(SteppedRegion):
    """One region's calls. `listed`: a `[…]` list of calls (Llama 4); else one call
    (`name.call(…)`, Llama 3's builtin tools). `push` text, then `close`."""

    def __init__(self, index: int, first_call: int, known: frozenset[str] | None = None,
                 *, listed: bool = True) -> None:
        self._index = index
        self.next_call = first_call
        self._known = known
        self._listed = listed
        super().__init__()
        self._state = "open" if listed else "between"  # open|between|key|value|done|junk
        self._params = 0
        self._key = ""
        self._value = ""
        self._value_end = _ValueEnd()
        self.emitted = False

    @property
    def abandoned(self) -> bool:
        """The region is no call after all (nothing was called): its text is content."""
        return self._state == "junk" and not self.emitted

    def close(self, *, cut: bool = False) -> tuple[list[Event], str]:
        """End of the region: (events, text to emit as content instead)."""
        events: list[Event] = []
        if self._state == "value" and not cut:
            self._finish_value(events)
        if self._state in ("key", "value"):
            events.append(self._args("}" if self._params else "{}"))
            events.append(self._end())
        if not self.emitted and self._raw.strip(_WS) and (not cut or self._state == "junk"):
            return [], self._raw  # no call after all (a call cut in its name is dropped)
        return events, ""

    def _step(self, events: list[Event]) -> bool:
        match self._state:
            case "open":
                self._buf = self._buf.lstrip(_WS)
                if not self._buf:
                    return False
                if self._buf[0] != "[":
                    self._state = "junk"
                    return False
                self._buf, self._state = self._buf[1:], "between"
                return True
            case "between":
                return self._call(events)
            case "key":
                return self._read_key(events)
            case "value":
                return self._read_value(events)
        self._buf = ""
        return False

    def _call(self, events: list[Event]) -> bool:
        self._buf = self._buf.lstrip(_WS + ",")
        if not self._buf:
            return False
        if self._listed and self._buf[0] == "]":
            self._buf, self._state = "", "done"
            return False
        match = _NAME.match(self._buf)
        if not match:
            self._state = "junk"
            return False
        rest = self._buf[match.end():].lstrip(_WS)
        if not rest:
            return False  # the name, or the `(` after it, is still coming
        if rest[0] != "(":
            self._state = "junk"
            return False
        name = match.group()
        name = name[:-len(".call")] if name.endswith(".call") else name
        if self._known is not None and name not in self._known:
            self._state = "junk"
            return False
        events.append(self._start(name))
        self._buf, self._params, self._state = rest[1:], 0, "key"
        return True

    def _read_key(self, events: list[Event]) -> bool:
        self._buf = self._buf.lstrip(_WS + ",")
        if not self._buf:
            return False
        if self._buf[0] == ")":
            events.append(self._args("}" if self._params else "{}"))
            events.append(self._end())
            self._buf, self._state = self._buf[1:], "between" if self._listed else "done"
            return True
        match = _KEY.match(self._buf)
        if match is None:
            if re.fullmatch(r"[A-Za-z_]\w*\s*", self._buf):
                return False  # the `=` is still coming
            self._state = "junk"
            return False
        self._key, self._buf = match.group(1), self._buf[match.end():]
        self._value, self._value_end, self._state = "", _ValueEnd(), "value"
        return True

    def _read_value(self, events: list[Event]) -> bool:
        at = self._value_end.end_in(self._buf)
        if at is None:
            self._value += self._buf
            self._buf = ""
            return False
        self._value += self._buf[:at]
        self._buf = self._buf[at:]
        self._finish_value(events)
        self._state = "key"
        return True

    def _finish_value(self, events: list[Event]) -> None:
        lead = "{" if not self._params else ", "
        self._params += 1
        value = json.dumps(literal_value(self._value), ensure_ascii=False)
        events.append(self._args(f"{lead}{json.dumps(self._key, ensure_ascii=False)}: {value}"))
        self._value = ""

    def _args(self, text: str) -> ToolCallArgs:
        return ToolCallArgs(text, self._index, self.next_call)

    def _start(self, name: str) -> ToolCallStart:
        self.emitted = True
        return ToolCallStart(new_call_id(), name, self._index, self.next_call)

    def _end(self) -> ToolCallEnd:
        end = ToolCallEnd(self._index, self.next_call)
        self.next_call += 1
        return end

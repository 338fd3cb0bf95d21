"""Parses the call objects of one tool-call region while they stream in.

A call whose header (`{"name": "…", "arguments": `) arrives first is streamed:
start as soon as the name is known, then the raw JSON text of the arguments as
it is generated, then end. Anything else is buffered to the end of the region
and parsed whole; if it is no call after all, the region's text is handed back
to be emitted as plain content.

A freeform tool (one that takes raw text) is called with its name alone,
`{"name": "…"}`, then its input on the next line, up to the end of the region;
the input is streamed as the call's arguments. Called with JSON arguments
instead, its input is the one string they hold.
"""

from __future__ import annotations

import json
import re
import secrets
from json.decoder import scanstring  # type: ignore[attr-defined]  # public, not in stubs
from typing import Any, Literal

from parlance.core.events import Event, ToolCallArgs, ToolCallEnd, ToolCallStart
from parlance.engines.parsing.json_end import JsonEnd
from parlance.engines.parsing.stepped import SteppedRegion

ARGUMENT_KEYS = ('"arguments"', '"parameters"')
NAME_KEYS = ('"name"', '"tool_name"')  # Command R7B's calls name their tool `tool_name`
ID_KEYS = ('"tool_call_id"',)
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


Layout = Literal["wrapped", "mistral", "freeform"]


def _string(text: str, i: int) -> tuple[str, int]:
    """The JSON string starting at `i` and the index after it."""
    if text[i] != '"':
        raise _NotAHeader
    try:
        value, end = scanstring(text, i + 1)
    except json.JSONDecodeError as exc:
        if "Unterminated" in exc.msg:
            raise _NeedMore from exc
        raise _NotAHeader from exc
    return value, end


def parse_header(text: str, freeform: frozenset[str] = frozenset()
                 ) -> tuple[str, int, Layout] | None:
    """(name, where the arguments start, layout) or None for "need more text";
    raises _NotAHeader when the text cannot start a streamable call. Layouts:
    `wrapped` `{"name": …, "arguments": {…}}` (the index is the arguments' `{`),
    `mistral` `name[ARGS]{…}`, `freeform` `{"name": …}` then raw input (a tool in
    `freeform` only; the index is just after the `}`)."""
    try:
        i = _skip_ws(text, 0)
        if text[i] == "{":
            i = _skip_ws(text, i + 1)
            if text.startswith(ID_KEYS, i) or any(k.startswith(text[i:]) for k in ID_KEYS):
                i = _expect(text, i, *ID_KEYS)  # Command R7B numbers its calls first
                i = _expect(text, _skip_ws(text, i), ":")
                _, i = _string(text, _skip_ws(text, i))
                i = _expect(text, _skip_ws(text, i), ",")
                i = _skip_ws(text, i)
            i = _expect(text, i, *NAME_KEYS)
            i = _expect(text, _skip_ws(text, i), ":")
            name, i = _string(text, _skip_ws(text, i))
            i = _skip_ws(text, i)
            if text[i] == "}" and name in freeform:
                return name, i + 1, "freeform"
            i = _expect(text, i, ",")
            i = _expect(text, _skip_ws(text, i), *ARGUMENT_KEYS)
            i = _expect(text, _skip_ws(text, i), ":")
            layout: Layout = "wrapped"
        else:  # Mistral's `name[ARGS]{…}`
            match = _NAME.match(text, i)
            if not match:
                raise _NotAHeader
            name, i = match.group(), match.end()
            if i == len(text):
                raise _NeedMore
            i = _expect(text, i, "[ARGS]")
            layout = "mistral"
        i = _skip_ws(text, i)
        if text[i] != "{":
            raise _NotAHeader
        return name, i, layout
    except _NeedMore:
        return None


def freeform_input(arguments: str) -> str:
    """A freeform tool's input from JSON arguments a model wrote for it anyway: the
    one string they hold (`{"input": "…"}`), else the arguments text as written."""
    try:
        value: Any = json.loads(arguments)
    except json.JSONDecodeError:
        return arguments
    if isinstance(value, dict) and len(value) == 1:
        value = next(iter(value.values()))
    return value if isinstance(value, str) else arguments


def _calls_in(text: str) -> list[tuple[str, str]] | None:
    """Whole-text fallback: (name, arguments JSON) of every call, or None."""
    text = text.strip().rstrip(";")
    candidates = [text, f"[{text}]", "[" + text.replace(";", ",") + "]"]
    if text.endswith("]") and not text.startswith("["):  # a list whose `[` opened the region
        candidates.append(f"[{text}")
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
    name = item.get("name", item.get("tool_name"))
    args = item.get("arguments", item.get("parameters", {}))
    if not isinstance(name, str):
        return None
    if isinstance(args, str):  # arguments the model serialized itself pass as they are;
        # any other string is a value, JSON-encoded (a client always gets JSON)
        return name, args if _holds_object(args) else json.dumps(args, ensure_ascii=False)
    return name, json.dumps(args, ensure_ascii=False)


def _holds_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False


class CallStream(SteppedRegion):
    """One region's calls. `push` text, then `close` once the region ends."""

    def __init__(self, index: int, first_call: int, known: frozenset[str] | None = None,
                 freeform: frozenset[str] = frozenset(), opener: str | None = None):
        self._index = index
        # a region with no close marker: the open marker again before a later call
        # (Mistral's `[TOOL_CALLS]a[ARGS]{…}[TOOL_CALLS]b[ARGS]{…}`) is skipped
        self._opener = opener
        self.next_call = first_call
        self._known = known  # when set, a name outside it means "not a call"
        self._freeform = freeform  # tools that take raw text
        super().__init__()
        self._state = "between"  # between | args | tail | input | buffered
        self._wrapped = True
        self._decode: str | None = None  # JSON arguments of a freeform tool, until whole
        self._held = ""  # input text held back: line breaks the layout may own
        self._input_started = False
        self._json_end = JsonEnd()
        self.emitted = False

    def close(self, *, cut: bool = False) -> tuple[list[Event], str]:
        """End of the region: (events, text to emit as content instead). `cut`: the
        output ended inside the region, so a call it was still writing is dropped: its
        markup is never content."""
        events: list[Event] = []
        if self._state == "input":
            self._input(events)
            text = self._held
            for newline in ("\r\n", "\n"):
                if text.endswith(newline):  # the layout's, before the close marker
                    text = text[:-len(newline)]
                    break
            self._emit_args(text, events)
            events.append(self._end())
        elif self._state in ("args", "tail"):
            events += self._decoded()
            events.append(self._end())
        elif self._buf.strip(" \t\r\n,;[]"):
            calls = _calls_in(self._buf)
            if calls and all(self._accepts(name) for name, _ in calls):
                for name, args in calls:
                    if name in self._freeform:
                        args = freeform_input(args)
                    events += [self._start(name), ToolCallArgs(args, self._index, self.next_call),
                               self._end()]
            elif not self.emitted and not (cut and self._unfinished_call()):
                return [], self._raw
        self._buf = ""
        return events, ""

    def _unfinished_call(self) -> bool:
        """Whether the text so far is the start of a call: a header still incomplete,
        or, after an explicit call marker (no `known` names), any JSON object."""
        text = self._buf.lstrip(_SKIPPED)
        if self._state == "between":
            try:
                return parse_header(text) is None  # a complete header is no longer here
            except _NotAHeader:
                return False
        return self._known is None and text.startswith("{")

    # -- states ---------------------------------------------------------------

    def _step(self, events: list[Event]) -> bool:
        match self._state:
            case "between":
                return self._header(events)
            case "args":
                return self._args(events)
            case "tail":
                return self._tail(events)
            case "input":
                return self._input(events)
        return False

    def _header(self, events: list[Event]) -> bool:
        if self._opener:
            self._buf = self._buf.lstrip(" \t\r\n,;")
            while self._buf.startswith(self._opener):
                self._buf = self._buf[len(self._opener):].lstrip(" \t\r\n,;")
            if self._buf and self._opener.startswith(self._buf):
                return False  # maybe the open marker again
        self._buf = self._buf.lstrip(_SKIPPED)
        if not self._buf:
            return False
        try:
            found = parse_header(self._buf, self._freeform)
        except _NotAHeader:
            self._state = "buffered"
            return False
        if found is None:
            return False
        name, start, layout = found
        if not self._accepts(name):
            self._state = "buffered"
            return False
        events.append(self._start(name))
        self._buf = self._buf[start:]
        if layout == "freeform":
            self._state, self._held, self._input_started = "input", "", False
            return True
        self._wrapped, self._state = layout == "wrapped", "args"
        self._decode = "" if name in self._freeform else None
        self._json_end.reset()
        return True

    def _args(self, events: list[Event]) -> bool:
        end = self._scan_value_end()
        fragment = self._buf if end is None else self._buf[:end]
        self._emit_args(fragment, events)
        if end is None:
            self._buf = ""
            return False
        self._buf = self._buf[end:]
        if self._wrapped:
            self._state = "tail"
        else:
            events += self._decoded()
            events.append(self._end())
            self._state = "between"
        return True

    def _emit_args(self, fragment: str, events: list[Event]) -> None:
        if self._decode is not None:
            self._decode += fragment  # a freeform tool's JSON arguments: decoded when whole
        elif fragment:
            events.append(ToolCallArgs(fragment, self._index, self.next_call))

    def _decoded(self) -> list[Event]:
        """The input a freeform tool's JSON arguments hold, once they are complete."""
        arguments, self._decode = self._decode, None
        if not arguments:
            return []
        return [ToolCallArgs(freeform_input(arguments), self._index, self.next_call)]

    def _input(self, events: list[Event]) -> bool:
        """A freeform call's raw input, streamed; the line break after the header and
        the line breaks at the end (the layout's, maybe) are held back."""
        text, self._buf = self._held + self._buf, ""
        if not self._input_started:
            lead = len(text) - len(text.lstrip(" \t"))
            if lead == len(text) or text[lead:] == "\r":
                self._held = text
                return False
            if text.startswith("\n", lead):
                text = text[lead + 1:]
            elif text.startswith("\r\n", lead):
                text = text[lead + 2:]
            self._input_started = True
        body = text.rstrip("\r\n")
        self._held = text[len(body):]
        self._emit_args(body, events)
        return False

    def _tail(self, events: list[Event]) -> bool:
        close = self._buf.find("}")
        if close < 0:
            self._buf = ""
            return False
        self._buf = self._buf[close + 1:]
        events += self._decoded()
        events.append(self._end())
        self._state = "between"
        return True

    def _scan_value_end(self) -> int | None:
        """Index just after the arguments object, or None when it goes on."""
        return self._json_end.end_in(self._buf)

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

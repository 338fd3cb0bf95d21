"""Parses the calls of one region in a tagged syntax (syntax.py's `Tagged`) while
they stream in: a call starts as soon as its name is complete, then its arguments
are streamed as JSON text as they grow, then it ends.

JSON arguments (DeepSeek, Kimi K2, harmony) go out as written. Key/value
parameters (Qwen3-Coder, GLM, MiniMax, Seed-OSS) become one JSON object: a value
the tool's schema types as a string is streamed as a JSON string as it is written;
any other value is read as JSON once its close tag arrives (a string when it is
none, as the model may have meant).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from parlance.core.events import Event, ToolCallArgs, ToolCallEnd, ToolCallStart
from parlance.engines.parsing.calls import new_call_id
from parlance.engines.parsing.json_end import JsonEnd
from parlance.engines.parsing.stepped import SteppedRegion
from parlance.engines.parsing.syntax import Tagged
from parlance.engines.text import partial_suffix

_WS = " \t\r\n"


def _find_first(text: str, markers: tuple[str, ...]) -> tuple[int, str] | None:
    hits = [(at, m) for m in markers if m and (at := text.find(m)) >= 0]
    return min(hits, key=lambda h: (h[0], -len(h[1]))) if hits else None


def _string_typed(schema: Any, key: str) -> bool:
    """Whether the tool's schema says parameter `key` is a string (or says nothing)."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    prop = props.get(key) if isinstance(props, dict) else None
    if not isinstance(prop, dict):
        return True
    kind = prop.get("type")
    if kind is None:
        return "enum" in prop and all(isinstance(v, str) for v in prop["enum"])
    return kind == "string" or (isinstance(kind, list) and kind == ["string"])


def _value(text: str, as_string: bool) -> str:
    if not as_string:
        try:
            return json.dumps(json.loads(text), ensure_ascii=False)
        except json.JSONDecodeError:
            pass
    return json.dumps(text, ensure_ascii=False)


class TaggedCallStream(SteppedRegion):
    """One region's calls. `push` text, then `close` once the region ends."""

    def __init__(self, tags: Tagged, index: int, first_call: int,
                 known: frozenset[str] | None = None,
                 schemas: Mapping[str, Any] | None = None) -> None:
        self._tags = tags
        self._index = index
        self.next_call = first_call
        self._known = known
        self._schemas = schemas or {}
        super().__init__()
        self._state = "open"  # open | name | json | params | key | value | after | done
        self._name = ""
        self._params = 0  # parameters written so far in this call
        self._key = ""
        self._string = False  # the value being read is streamed as a JSON string
        self._value = ""  # a non-string value, until its close tag
        self._value_started = False
        self._held = ""  # string value text held back (a line break the layout may own)
        self._json_end = JsonEnd()
        self._name_started = ""
        self.emitted = False

    def close(self, *, cut: bool = False) -> tuple[list[Event], str]:
        """End of the region: (events, text to emit as content instead)."""
        events: list[Event] = []
        state = self._state
        if state == "name" and not self.emitted and not cut and not self._tags.call_open:
            self._buf = self._name + self._buf  # a one-call region that ended in the name
            name = self._buf.strip(_WS)
            if name and self._accepts(self._clean(name)):
                events.append(self._start(self._clean(name)))
                events += [ToolCallArgs("{}", self._index, self.next_call), self._end()]
                return events, ""
        if state == "json":
            self._json(events)
            events.append(self._end())
        elif state in ("params", "key"):
            events.append(self._args("{}" if not self._params else "}"))
            events.append(self._end())
        elif state == "value":
            self._finish_value(self._held + self._buf, events)
            events.append(self._args("}"))
            events.append(self._end())
        elif state == "after":
            events.append(self._end())
        if not self.emitted and not cut and self._raw.strip(_WS) and state != "done":
            return [], self._raw
        return events, ""

    # -- states ---------------------------------------------------------------

    def _step(self, events: list[Event]) -> bool:
        match self._state:
            case "open":
                return self._open()
            case "name":
                return self._read_name(events)
            case "json":
                return self._json(events)
            case "params":
                return self._next_param(events)
            case "key":
                return self._read_key()
            case "value":
                return self._read_value(events)
            case "after":
                return self._after(events)
        self._buf = ""  # done (a one-call region) or buffered: nothing more is read
        return False

    def _open(self) -> bool:
        opener = self._tags.call_open
        self._buf = self._buf.lstrip(_WS)
        if not opener:
            self._state = "name"
            return bool(self._buf)
        if self._buf.startswith(opener):
            self._buf = self._buf[len(opener):]
            self._state, self._name = "name", ""
            return True
        if not opener.startswith(self._buf):
            self._state = "junk"
        return False

    def _read_name(self, events: list[Event]) -> bool:
        self._name += self._buf
        self._buf = ""
        if not self._name.strip(_WS):
            self._name = ""
            return False
        stripped = self._name.lstrip(_WS)
        hit = _find_first(stripped, self._tags.name_end)
        if hit is None:
            return False
        at, _ = hit
        name, self._buf, self._name = self._clean(stripped[:at]), stripped[at:], ""
        if not self._accepts(name):
            self._state = "junk"
            return False
        events.append(self._start(name))
        self._params = 0
        if self._tags.params is None:
            self._state = "json"
            self._json_end.reset()
        else:
            self._state = "params"
        return True

    def _clean(self, name: str) -> str:
        name = name.strip(_WS)
        tags = self._tags
        if tags.name_prefix and name.startswith(tags.name_prefix):
            name = name[len(tags.name_prefix):]
        if tags.name_suffix_sep and tags.name_suffix_sep in name:
            name = name.rsplit(tags.name_suffix_sep, 1)[0]
        return name

    def _json(self, events: list[Event]) -> bool:
        if self._json_end.outside:
            brace = self._buf.find("{")
            closer = self._tags.call_close
            end = self._buf.find(closer) if closer else -1
            if end >= 0 and (brace < 0 or end < brace):  # a call with no arguments
                events.append(self._args("{}"))
                self._state = "after"
                return True
            if brace < 0:
                self._buf = self._buf[-len(closer):] if closer else ""
                return False
            self._buf = self._buf[brace:]
        value_end = self._json_end.end_in(self._buf)
        if value_end is not None:
            events.append(self._args(self._buf[:value_end]))
            self._buf, self._state = self._buf[value_end:], "after"
            return True
        if self._buf:
            events.append(self._args(self._buf))
        self._buf = ""
        return False

    def _next_param(self, events: list[Event]) -> bool:
        params, closer = self._tags.params, self._tags.call_close
        assert params is not None
        self._buf = self._buf.lstrip(_WS)
        if self._buf.startswith(params.key_open):
            self._buf, self._key, self._state = self._buf[len(params.key_open):], "", "key"
            return True
        if closer and self._buf.startswith(closer):
            events.append(self._args("{}" if not self._params else "}"))
            self._state = "after"
            return True
        if any(m.startswith(self._buf) for m in (params.key_open, closer) if m):
            return False
        self._buf = self._buf[1:]  # stray text between parameters is skipped
        return True

    def _read_key(self) -> bool:
        params = self._tags.params
        assert params is not None
        at = self._buf.find(params.key_close)
        if at < 0:
            return False
        rest = self._buf[at + len(params.key_close):]
        if params.attrs is not None:  # attributes up to the value tag (DSML's `string=`)
            opened = rest.find(params.value_open)
            if opened < 0:
                return False
            rest = rest[opened + len(params.value_open):]
        elif params.value_open:
            trimmed = rest.lstrip(_WS)
            if trimmed.startswith(params.value_open):
                rest = trimmed[len(params.value_open):]
            elif params.value_open.startswith(trimmed):
                return False  # the value tag is still coming
        self._key, self._buf = self._buf[:at].strip(_WS), rest
        schema = self._schemas.get(self._name_started, {})
        self._string = _string_typed(schema, self._key)
        self._value, self._held, self._value_started = "", "", False
        self._state = "value"
        return True

    def _read_value(self, events: list[Event]) -> bool:
        params = self._tags.params
        assert params is not None
        text = self._held + self._buf
        self._held = ""
        # a value left unclosed ends where the next parameter or the call's end begins
        # (Qwen3-Coder's `<parameter=a>\nx\n<parameter=b>`, as vLLM reads it)
        ends = [m for m in (params.key_open, self._tags.call_close) if m]
        hits = [(at, m) for m in (params.value_close, *ends) if (at := text.find(m)) >= 0]
        if hits:
            at, marker = min(hits)
            rest = at + len(marker) if marker == params.value_close else at
            self._buf = text[rest:]
            self._finish_value(text[:at], events)
            self._state = "params"
            return True
        keep = partial_suffix(text, [params.value_close, *ends])
        body, self._held = text[:len(text) - keep], text[len(text) - keep:]
        self._buf = ""
        if not self._string:
            self._value += body
            return False
        if not self._value_started:
            if not body.strip("\r\n") and body.count("\n") <= 1:
                self._held = body + self._held  # a lone line break may be the layout's
                return False
            body = body[1:] if body.startswith("\n") else body
            self._open_value(events)
        trail = len(body) - len(body.rstrip("\r\n"))
        if trail:
            body, self._held = body[:len(body) - trail], body[len(body) - trail:] + self._held
        if body:
            events.append(self._args(json.dumps(body, ensure_ascii=False)[1:-1]))
        return False

    def _open_value(self, events: list[Event]) -> None:
        lead = "{" if not self._params else ", "
        events.append(self._args(f"{lead}{json.dumps(self._key, ensure_ascii=False)}: \""))
        self._value_started = True
        self._params += 1

    def _finish_value(self, text: str, events: list[Event]) -> None:
        if self._string:
            if not self._value_started:
                text = text[1:] if text.startswith("\n") else text
                self._open_value(events)
            text = text[:-1] if text.endswith("\n") else text
            escaped = json.dumps(text, ensure_ascii=False)[1:-1]
            events.append(self._args(escaped + '"'))
            return
        value = (self._value + text).strip(_WS)
        lead = "{" if not self._params else ", "
        self._params += 1
        events.append(self._args(
            f"{lead}{json.dumps(self._key, ensure_ascii=False)}: {_value(value, False)}"))

    def _after(self, events: list[Event]) -> bool:
        closer = self._tags.call_close
        if not closer:
            self._state, self._buf = "done", ""
            events.append(self._end(keep_state=True))
            return False
        at = self._buf.find(closer)
        if at < 0:
            self._buf = self._buf[len(self._buf) - partial_suffix(self._buf, [closer]):]
            return False
        self._buf = self._buf[at + len(closer):]
        events.append(self._end())
        return True

    # -- events ---------------------------------------------------------------

    def _accepts(self, name: str) -> bool:
        return bool(name) and (self._known is None or name in self._known)

    def _args(self, text: str) -> ToolCallArgs:
        return ToolCallArgs(text, self._index, self.next_call)

    def _start(self, name: str) -> ToolCallStart:
        self.emitted = True
        self._name_started = name
        return ToolCallStart(new_call_id(), name, self._index, self.next_call)

    def _end(self, *, keep_state: bool = False) -> ToolCallEnd:
        end = ToolCallEnd(self._index, self.next_call)
        self.next_call += 1
        if not keep_state:
            self._state = "open"
        return end

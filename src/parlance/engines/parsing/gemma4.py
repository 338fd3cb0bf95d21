"""Gemma 4's calls, `call:NAME{key:value,…}` between `<|tool_call>` and `<tool_call|>`:
read into JSON calls as they stream (translate.py).

Gemma 4 writes values in a syntax of its own: keys bare, strings between `<|"|>` marks
and taken as written (no escapes), numbers, `true`, `false`, `null`, lists and nested
objects as in JSON. A string is streamed as a JSON string while it is written.
"""

from __future__ import annotations

import json
from typing import Any

from parlance.engines.parsing.syntax import GEMMA4_STRING
from parlance.engines.text import partial_suffix

_WS = " \t\r\n"


class Gemma4Call:
    """One region's call (Gemma 4 writes one a block) as `{"name": …, "arguments": {…}}`."""

    def __init__(self) -> None:
        self._state = "head"  # head | value | done
        self._head = ""
        self._pending = ""  # text held: a `<|"|>` mark may be cut in two
        self._stack: list[str] = []  # "obj" | "arr" for each brace or bracket open
        self._key = ""  # a bare key being read
        self._keyed = False  # in an object, the key is read and the value is next
        self._string = False

    def feed(self, text: str) -> str:
        if self._state == "head":
            self._head += text
            start = self._head.find("{")
            if start < 0:
                return ""
            name = self._head[:start].strip(_WS)
            name = name[len("call:"):] if name.startswith("call:") else name
            text, self._state = self._head[start:], "value"
            return (f'{{"name": {json.dumps(name.strip(_WS), ensure_ascii=False)}, '
                    f'"arguments": ' + self._values(text))
        if self._state == "value":
            return self._values(text)
        return ""

    def flush(self) -> str:
        if self._state == "head":
            return self._head  # no arguments ever began: not a call
        text, self._pending = self._pending, ""
        return _escape(text) if self._string else ""

    def _values(self, text: str) -> str:
        text = self._pending + text
        keep = partial_suffix(text, [GEMMA4_STRING])
        text, self._pending = text[:len(text) - keep], text[len(text) - keep:]
        out: list[str] = []
        i = 0
        while i < len(text) and self._state == "value":
            if text.startswith(GEMMA4_STRING, i):
                i += len(GEMMA4_STRING)
                out.append(self._mark())
                continue
            out.append(self._char(text[i]))
            i += 1
        return "".join(out)

    def _mark(self) -> str:
        if self._in_object() and not self._keyed:
            return ""  # marks around a key (the template's escape_keys): the key is text
        self._string = not self._string
        return '"'

    def _in_object(self) -> bool:
        return bool(self._stack) and self._stack[-1] == "obj"

    def _char(self, ch: str) -> str:
        if self._string:
            return _escape(ch)
        if self._in_object() and not self._keyed:
            return self._key_char(ch)
        if ch in "{[":
            self._stack.append("obj" if ch == "{" else "arr")
            self._keyed = False
            return ch
        if ch in "}]":
            if self._stack:
                self._stack.pop()
            self._keyed = True  # the value that just closed was its key's value
            if not self._stack:
                self._state = "done"
                return ch + "}"  # the arguments closed, and the call with them
            return ch
        if ch == ",":
            if self._in_object():
                self._keyed = False
            return ch
        return ch

    def _key_char(self, ch: str) -> str:
        if ch == "}":  # an empty object, or a trailing comma
            self._keyed = True
            return self._char(ch)
        if ch == ":":
            key, self._key = self._key.strip(_WS + '"'), ""
            self._keyed = True
            return f"{json.dumps(key, ensure_ascii=False)}:"
        if ch == "," or (ch in _WS and not self._key):
            return ""
        self._key += ch
        return ""


def _escape(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


def gemma4_value(value: Any) -> str:
    """A JSON value as Gemma 4 writes it: bare keys, strings between `<|"|>` marks."""
    if isinstance(value, str):
        return f"{GEMMA4_STRING}{value}{GEMMA4_STRING}"
    if isinstance(value, list):
        return "[" + ",".join(gemma4_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{gemma4_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def gemma4_call(name: str, arguments: Any) -> str:
    """One call, `call:NAME{key:value,…}`; arguments that are no object go as `input`."""
    if not isinstance(arguments, dict):
        arguments = {"input": arguments}
    return f"call:{name}{gemma4_value(arguments)}"

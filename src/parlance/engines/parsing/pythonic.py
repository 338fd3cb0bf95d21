"""Calls written as Python (LFM2: `[get_time(city="Paris"), toggle(enabled=True)]`):
read into JSON calls as they stream (translate.py), and written back for history.

Values are Python literals: strings in either quote with Python's escapes, `True`,
`False`, `None`, numbers, lists and dicts of those. JSON's own literals are taken too,
as llama.cpp takes them. A list of JSON call objects passes through unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from parlance.engines.parsing.translate import JsonPassage

_IDENT = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_WORDS = {"True": "true", "False": "false", "None": "null",
          "true": "true", "false": "false", "null": "null"}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0",
            "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
_WS = " \t\r\n"


class PythonicCalls:
    """`NAME(key=value, …)` calls, in a list or alone, as `{"name": …, "arguments": {…}}`."""

    def __init__(self) -> None:
        self._state = "between"  # between | name | key | value | after | json
        self._word = ""  # a name, key or bare word being read
        self._keys = 0  # arguments written in this call
        self._depth = 0  # brackets open inside the value
        self._quote = ""  # the string's quote while inside one
        self._escape = ""  # an escape sequence cut in two
        self._json: JsonPassage | None = None

    def feed(self, text: str) -> str:
        out: list[str] = []
        for ch in text:
            out.append(self._step(ch))
        return "".join(out)

    def flush(self) -> str:
        if self._state == "value" and self._word:
            word, self._word = self._word, ""
            return _WORDS.get(word, word)
        if self._state in ("name", "key"):
            return self._word  # unfinished: no call (CallStream hands the region back)
        return ""

    def _step(self, ch: str) -> str:
        match self._state:
            case "json":
                assert self._json is not None
                if self._json.step(ch):
                    self._state = "between"
                return ch
            case "between":
                return self._between(ch)
            case "name":
                return self._name(ch)
            case "key":
                return self._key(ch)
            case "value":
                return self._value(ch)
        return ""

    def _between(self, ch: str) -> str:
        if ch == "{":  # a JSON call object
            self._state, self._json = "json", JsonPassage()
            self._json.step(ch)
            return ch
        if ch in _IDENT:
            self._state, self._word = "name", ch
            return ""
        return ch  # `[`, `,`, `]`, spacing: the list around the calls

    def _name(self, ch: str) -> str:
        if ch == "(":
            name, self._word = self._word.strip(), ""
            self._state, self._keys = "key", 0
            return f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {{'
        self._word += ch
        return ""

    def _key(self, ch: str) -> str:
        if ch == ")" and not self._word.strip():
            self._state = "between"
            return "}}"
        if ch == "=":
            key, self._word = self._word.strip(" \t\r\n,"), ""
            lead = ", " if self._keys else ""
            self._keys += 1
            self._state, self._depth = "value", 0
            return f"{lead}{json.dumps(key, ensure_ascii=False)}: "
        if ch == "," and not self._word.strip():
            return ""
        self._word += ch
        return ""

    def _value(self, ch: str) -> str:
        if self._quote:
            return self._in_string(ch)
        if ch in "\"'":
            self._quote = ch
            return self._end_word() + '"'
        if ch in _IDENT:
            self._word += ch
            return ""
        out = self._end_word()
        if ch in "([{":
            self._depth += 1
            return out + ("[" if ch == "(" else ch)
        if self._depth == 0 and ch in ",)":
            if ch == ",":
                self._state = "key"
                return out
            self._state = "between"
            return out + "}}"
        if ch in ")]}":
            self._depth -= 1
            return out + ("]" if ch == ")" else ch)
        return out + ch

    def _end_word(self) -> str:
        word, self._word = self._word, ""
        return _WORDS.get(word, word)

    def _in_string(self, ch: str) -> str:
        if self._escape:
            self._escape = ""
            return _json_chars(_ESCAPES.get(ch, "\\" + ch))
        if ch == "\\":
            self._escape = ch
            return ""
        if ch == self._quote:
            self._quote = ""
            return '"'
        return _json_chars(ch)


def _json_chars(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


def python_literal(value: Any) -> str:
    """A JSON value as the Python literal LFM2 writes."""
    if value is True:
        return "True"
    if value is False:
        return "False"
    if value is None:
        return "None"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {python_literal(v)}"
                               for k, v in value.items()) + "}"
    return json.dumps(value)


def python_call(name: str, arguments: Any) -> str:
    """One call, `name(key=value, …)`; arguments that are no object go as one `input`."""
    if not isinstance(arguments, dict):
        arguments = {"input": arguments}
    return f"{name}(" + ", ".join(f"{k}={python_literal(v)}" for k, v in arguments.items()) + ")"

"""Call regions written in a family's own value syntax (syntax.py's `layout`), read as
they stream: a translator turns the family's text into JSON calls (`{"name": …,
"arguments": {…}}`) piece by piece, and `CallStream` parses those, so a call still
starts as soon as its name is written and its arguments stream as they grow.

A translator emits only what the text so far decides; what may still change (a name,
a key, a marker cut in two) is held until the next piece. A region that turns out to be
no call is handed back as the family wrote it, never as the translation.
"""

from __future__ import annotations

import json
from json.decoder import scanstring  # type: ignore[attr-defined]  # public, not in stubs
from typing import Protocol

from parlance.core.events import Event
from parlance.engines.parsing.calls import CallStream


class Translator(Protocol):
    def feed(self, text: str) -> str: ...

    def flush(self) -> str: ...


class TranslatedRegion:
    """A `CallStream` fed through a translator; the region API output.py uses."""

    def __init__(self, translator: Translator, inner: CallStream) -> None:
        self._translator = translator
        self._inner = inner
        self._raw = ""

    @property
    def next_call(self) -> int:
        return self._inner.next_call

    def push(self, text: str) -> list[Event]:
        self._raw += text
        return self._inner.push(self._translator.feed(text))

    def close(self, *, cut: bool = False) -> tuple[list[Event], str]:
        events = self._inner.push(self._translator.flush())
        more, text = self._inner.close(cut=cut)
        if text:
            return [], self._raw
        return events + more, ""


class JsonPassage:
    """Where a JSON value that is passed through unchanged ends (strings and nesting
    followed character by character)."""

    def __init__(self) -> None:
        self.depth = 0
        self._in_string = False
        self._escaped = False

    def step(self, ch: str) -> bool:
        """Take one character; True when it closed the value."""
        if self._in_string:
            if self._escaped:
                self._escaped = False
            elif ch == "\\":
                self._escaped = True
            elif ch == '"':
                self._in_string = False
            return False
        if ch == '"':
            self._in_string = True
        elif ch in "{[":
            self.depth += 1
        elif ch in "}]":
            self.depth -= 1
            return self.depth == 0
        return False


class KeyedCalls:
    """Apertus: `[{"NAME": {…}}, …]`, each call an object keyed by the tool's name,
    becomes `[{"name": "NAME", "arguments": {…}}, …]`. An object keyed `"name"` is a
    call in the usual layout already and passes unchanged."""

    def __init__(self) -> None:
        self._held = ""  # an object's opening, until its key is whole
        self._value: JsonPassage | None = None

    def feed(self, text: str) -> str:
        out: list[str] = []
        for ch in text:
            if self._value is not None:
                out.append(ch)
                if self._value.step(ch):
                    self._value = None
            elif self._held:
                self._held += ch
                out.append(self._opening())
            elif ch == "{":
                self._held = ch
            else:
                out.append(ch)
        return "".join(out)

    def _opening(self) -> str:
        """The translated opening once the object's first key and its colon are in."""
        held = self._held
        body = held[1:].lstrip()
        if not body:
            return ""
        if not body.startswith('"'):
            return self._pass(held)
        try:
            key, end = scanstring(body, 1)
        except json.JSONDecodeError:
            return ""  # the key goes on
        rest = body[end:].lstrip()
        if not rest:
            return ""
        if key == "name" or rest[0] != ":":
            return self._pass(held)
        self._held = ""
        self._value = JsonPassage()
        self._value.depth = 1  # the object keyed by the name: its `}` closes the call
        return f'{{"name": {json.dumps(key, ensure_ascii=False)}, "arguments": '

    def _pass(self, held: str) -> str:
        self._held = ""
        self._value = JsonPassage()
        for ch in held:
            if self._value.step(ch):
                self._value = None
                break
        return held

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held

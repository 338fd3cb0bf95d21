"""What follows Llama 3's `<|python_tag|>`, read by its first characters: JSON calls
(`{"name": …, "parameters": …}`, calls.py), a builtin tool's call
(`brave_search.call(query="…")`, pythonic.py), or raw code, which is a call of the
`python` (or `code_interpreter`) tool the request offers, its text streamed as the
`code` argument."""

from __future__ import annotations

import json
import re

from parlance.core.events import Event, ToolCallArgs, ToolCallEnd, ToolCallStart
from parlance.engines.parsing.calls import CallStream, new_call_id
from parlance.engines.parsing.pythonic_stream import PythonicCallStream

_BUILTIN = re.compile(r"[A-Za-z_]\w*\.call\s*\(")
_BUILTIN_PREFIX = re.compile(r"[A-Za-z_]\w*(\.(c(a(l(l\s*)?)?)?)?)?")
CODE_TOOLS = ("python", "code_interpreter")
# Llama 3.1's builtin tools (llama-stack's names; web_search is brave_search's alias):
# the model calls them as `<|python_tag|>name.call(key=value)`.
BUILTIN_TOOLS = ("brave_search", "web_search", "wolfram_alpha", *CODE_TOOLS)


class PythonTagStream:
    """One `<|python_tag|>` region. `push` text, then `close` once the region ends."""

    def __init__(self, index: int, first_call: int, tool_names: frozenset[str],
                 freeform: frozenset[str] = frozenset()) -> None:
        self._index = index
        self._first = first_call
        self._tools = tool_names
        self._freeform = freeform
        self._inner: CallStream | PythonicCallStream | None = None
        self._code_tool = next((t for t in CODE_TOOLS if t in tool_names), None)
        self._code = False  # raw code, streamed as the code tool's `code`
        self._buf = ""
        self.emitted = False

    @property
    def next_call(self) -> int:
        if self._inner is not None:
            return self._inner.next_call
        return self._first + (1 if self._code else 0)

    def push(self, text: str) -> list[Event]:
        if self._inner is not None:
            return self._delegate(text)
        if self._code:
            return self._code_text(text)
        self._buf += text
        start = self._buf.lstrip()
        if not start:
            return []
        if start[0] in "{[":
            self._inner = CallStream(self._index, self._first, None, self._freeform)
        elif _BUILTIN.match(start):
            self._inner = PythonicCallStream(self._index, self._first, listed=False)
        elif _BUILTIN_PREFIX.fullmatch(start):
            return []  # `name.call(` may still be coming
        elif self._code_tool is None:
            self._inner = CallStream(self._index, self._first, None, self._freeform)
        else:
            self._code = True
            events: list[Event] = [ToolCallStart(new_call_id(), self._code_tool, self._index,
                                                 self._first),
                                   ToolCallArgs('{"code": "', self._index, self._first)]
            self.emitted = True
            text, self._buf = self._buf.lstrip(), ""
            return events + self._code_text(text)
        text, self._buf = self._buf, ""
        return self._delegate(text)

    def close(self, *, cut: bool = False) -> tuple[list[Event], str]:
        if self._code:
            return [ToolCallArgs('"}', self._index, self._first),
                    ToolCallEnd(self._index, self._first)], ""
        if self._inner is None:
            if not self._buf.strip():
                return [], ""
            self._inner = CallStream(self._index, self._first, None, self._freeform)
            self._inner.push(self._buf)
        return self._inner.close(cut=cut)

    def _delegate(self, text: str) -> list[Event]:
        assert self._inner is not None
        events = self._inner.push(text)
        self.emitted = self._inner.emitted
        return events

    def _code_text(self, text: str) -> list[Event]:
        if not text:
            return []
        return [ToolCallArgs(json.dumps(text, ensure_ascii=False)[1:-1], self._index,
                             self._first)]

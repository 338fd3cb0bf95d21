"""Splits one choice's generated text into content, reasoning and tool-call events.

Text arrives in arbitrary pieces (a marker may be split across tokens), so text
that may be the start of a marker is held back until the next piece decides.
Content before, between and after calls stays content; a marker left open when
the output ends closes with it (reasoning stays reasoning, a call ends with the
arguments it has, and a call region whose call has no name yet is dropped: call
markup is never content). A call identical to one the output already made is
dropped and ends the output (`repeats.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from parlance.core.events import Event, FinishReason, ReasoningDelta, TextDelta, ToolCallStart
from parlance.engines.parsing.calls import CallStream
from parlance.engines.parsing.python_tag import PythonTagStream
from parlance.engines.parsing.pythonic_stream import PythonicCallStream
from parlance.engines.parsing.recipient import RecipientStream
from parlance.engines.parsing.repeats import RepeatFilter
from parlance.engines.parsing.syntax import ReasoningMarkers, ToolSyntax
from parlance.engines.parsing.tagged import TaggedCallStream
from parlance.engines.parsing.translate import TranslatedRegion
from parlance.engines.parsing.translators import translator
from parlance.engines.text import partial_suffix


class Mode(Enum):
    CONTENT = "content"
    REASONING = "reasoning"
    CALLS = "calls"


class OutputParser:
    def __init__(
        self,
        index: int = 0,
        *,
        syntax: ToolSyntax | None = None,
        reasoning: ReasoningMarkers | None = None,
        tool_names: frozenset[str] = frozenset(),
        start_in_reasoning: bool = False,
        freeform: frozenset[str] = frozenset(),
        markup: tuple[str, ...] = (),
        header_close: str = "",
        schemas: Mapping[str, Any] | None = None,
    ) -> None:
        self.index = index
        self._syntax = syntax
        self._reasoning = reasoning
        self._tool_names = tool_names
        self._freeform = freeform  # tools that take raw text (see calls.py)
        self._markup = markup  # the format's headers around content: dropped (harmony's)
        self._header_close = header_close  # a header runs from other markup to this
        self._in_header = False  # in a message's header: its text is dropped
        self._schemas = schemas or {}  # tool name -> parameters (tagged key/value calls)
        self.mode = Mode.REASONING if start_in_reasoning and reasoning else Mode.CONTENT
        self._buf = ""
        self._strip = self.mode is Mode.REASONING  # drop whitespace right after a marker
        self._output_started = False  # any non-whitespace content emitted yet
        # after calls that followed content: the whitespace held until text shows it
        # separates that content from more (kept, unless the content before the calls
        # ended in whitespace of its own) or only ends the output (dropped)
        self._space_held: str | None = None
        self._spaced = False  # the content emitted so far ends in whitespace
        self._region: (CallStream | TaggedCallStream | TranslatedRegion | PythonicCallStream
                       | PythonTagStream | RecipientStream | None) = None
        self._region_open = ""
        self._repeats = RepeatFilter()
        self._next_call = 0  # the call index the next region's calls start from
        self.calls = 0  # tool calls started so far (repeats dropped)
        self._final = False  # the output ended: no marker is still coming
        if syntax and syntax.region == "recipient":  # the prompt wrote the first `>>>`
            self._open_region("")

    @property
    def called(self) -> bool:
        return self.calls > 0

    @property
    def ended(self) -> bool:
        """The output repeated a call: it is over, and what follows is dropped."""
        return self._repeats.repeated

    def finish_reason(self, reason: FinishReason) -> FinishReason:
        """A choice that stopped by itself after calling tools finished for the calls
        (one that repeated a call stopped there, whatever cut it afterwards)."""
        if self.ended or (reason is FinishReason.STOP and self.called):
            return FinishReason.TOOL_CALLS
        return reason

    def push(self, text: str) -> list[Event]:
        if self.ended:
            return []
        self._buf += text
        out: list[Event] = []
        while self._buf and not self.ended and self._advance(out):
            pass
        if self.ended:
            self._buf, self._region, self.mode = "", None, Mode.CONTENT
        return out

    def finish(self) -> list[Event]:
        """The output ended: release what was held, close what is open."""
        if self.ended:
            return []
        out: list[Event] = []
        self._final = True
        if self.mode is Mode.CONTENT and self._markup:
            while self._buf and self.mode is Mode.CONTENT and self._in_content(out):
                pass
        text, self._buf = self._buf, ""
        if self.mode is Mode.CONTENT:
            if not self._in_header:
                self._content(text, out)
        elif self.mode is Mode.REASONING:
            self._reasoning_text(text, out)
        else:
            self._feed_region(text, out)
            self._close_region(out, None)
        return out

    # -- modes ----------------------------------------------------------------

    def _advance(self, out: list[Event]) -> bool:
        match self.mode:
            case Mode.CONTENT:
                return self._in_content(out)
            case Mode.REASONING:
                return self._in_reasoning(out)
            case Mode.CALLS:
                return self._in_calls(out)

    def _markers(self) -> list[str]:
        found = []
        if self._reasoning:  # a close marker again after the reasoning ended: dropped
            found += [self._reasoning.open, self._reasoning.close]
        if self._syntax:
            found.append(self._syntax.open)
            if self._syntax.code_open:
                found.append(self._syntax.code_open)
        return found + list(self._markup)

    def _in_content(self, out: list[Event]) -> bool:
        syntax = self._syntax
        if syntax and syntax.bare_json and not self._output_started:
            stripped = self._buf.lstrip()
            if not stripped:
                return False
            if stripped[0] == "{":
                self._buf = stripped
                self._open_region("")
                return True
        if syntax and syntax.region == "pythonic" and not self._output_started:
            stripped = self._buf.lstrip()
            if not stripped:
                return False
            if stripped[0] == "[":  # a list of calls that starts the output
                self._buf = stripped
                self._open_region("")
                return True
        text, marker = self._take_until(self._markers())
        if not self._in_header:
            self._content(text, out)
        if marker is None:
            return False
        self._space_held = None
        if self._header_close and marker in self._markup:
            self._in_header = marker != self._header_close
        if self._reasoning and marker == self._reasoning.open:
            self.mode, self._strip, self._in_header = Mode.REASONING, True, False
        elif marker in self._markup and not (self._syntax and marker == self._syntax.open):
            self._strip = True
        elif self._reasoning and marker == self._reasoning.close:
            pass  # a stray end of reasoning (MiniMax-M2 repeats it): markup, not content
        else:
            self._open_region(marker)
        return True

    def _in_reasoning(self, out: list[Event]) -> bool:
        markers = self._reasoning
        assert markers is not None
        call = self._syntax.open if self._syntax and markers.call_ends else ""
        text, close = self._take_until([markers.close, call] if call else [markers.close])
        self._reasoning_text(text, out)
        if close is None:
            return False
        self.mode, self._strip = Mode.CONTENT, True
        if close == call:  # a call written in the thinking ends it (Qwen3.5)
            self._open_region(close)
        return True

    def _in_calls(self, out: list[Event]) -> bool:
        syntax = self._syntax
        close = syntax.close if syntax else None
        code_open = syntax.code_open if syntax else ""
        code = bool(code_open) and self._region_open == code_open
        if code:
            close = None  # code runs to the end of the output
        # a region with no close marker runs to the end, or (a region of JSON calls) to
        # its marker written again (Mistral's `[TOOL_CALLS]` before each of several calls)
        reopens = syntax is not None and close is None and not syntax.region and not code
        ends = [close] if close else [syntax.open] if reopens and syntax else []
        text, found = self._take_until(ends) if ends else (self._buf, None)
        if not ends:
            self._buf = ""
        self._feed_region(text, out)
        abandoned = isinstance(self._region, PythonicCallStream) and self._region.abandoned
        if found is None and not abandoned:
            return False
        if close or found is None:
            self._close_region(out, found)  # (a list that is no call is content at once)
        else:
            self._close_region(out, "")
            self._open_region(found)
        return True

    def _take_until(self, markers: list[str]) -> tuple[str, str | None]:
        """Take the text before the earliest marker and the marker itself; with no
        marker yet, all the text except what may be the start of one."""
        hits = [(at, m) for m in markers if (at := self._buf.find(m)) >= 0]
        if hits:
            at, marker = min(hits, key=lambda hit: (hit[0], -len(hit[1])))
            rest = self._buf[at:]
            if not self._final and any(len(m) > len(rest) and m.startswith(rest)
                                       for m in markers):
                text, self._buf = self._buf[:at], rest  # a longer marker may be coming
                return text, None
            text, self._buf = self._buf[:at], self._buf[at + len(marker):]
            return text, marker
        cut = len(self._buf) - partial_suffix(self._buf, markers)
        text, self._buf = self._buf[:cut], self._buf[cut:]
        return text, None

    # -- emission -------------------------------------------------------------

    def _open_region(self, marker: str) -> None:
        self._space_held = None  # whitespace between calls is the calls'
        known = self._tool_names if not marker else None  # bare JSON must name a tool
        tags = self._syntax.tagged if self._syntax else None
        region = self._syntax.region if self._syntax else ""
        code_open = self._syntax.code_open if self._syntax else ""
        if region == "recipient":
            self._region = RecipientStream(self.index, self._next_call, self._tool_names)
        elif region == "pythonic":
            self._region = PythonicCallStream(self.index, self._next_call, known)
        elif marker and (region == "python_tag" or marker == code_open):
            self._region = PythonTagStream(self.index, self._next_call, self._tool_names,
                                           self._freeform)
        elif tags is not None:
            self._region = TaggedCallStream(tags, self.index, self._next_call,
                                            self._tool_names or None, self._schemas)
        else:
            syntax = self._syntax
            opener = syntax.open if syntax and syntax.close is None else None
            calls = CallStream(self.index, self._next_call, known, self._freeform, opener)
            layout = syntax.layout if syntax else "json"
            self._region = calls if layout == "json" else TranslatedRegion(
                translator(layout), calls)
        self._region_open = marker
        self.mode, self._in_header = Mode.CALLS, False

    def _feed_region(self, text: str, out: list[Event]) -> None:
        if text and self._region:
            self._count(self._region.push(text), out)

    def _count(self, events: list[Event], out: list[Event]) -> None:
        events = self._repeats.filter(events)
        self.calls += sum(isinstance(e, ToolCallStart) for e in events)
        out += events

    def _close_region(self, out: list[Event], close: str | None) -> None:
        region, self._region = self._region, None
        self.mode, self._strip = Mode.CONTENT, True
        self._space_held = "" if self._output_started else None
        if region is None:
            return
        events, text = region.close(cut=close is None)
        self._next_call = region.next_call
        self._count(events, out)
        if text:  # not a call after all: the region was text, spacing included
            self._strip = False
            self._content(self._region_open + text + (close or ""), out)

    def _content(self, text: str, out: list[Event]) -> None:
        if self._strip and self._space_held is not None:
            body = text.lstrip()
            self._space_held += text[:len(text) - len(body)]
            if body:
                space = "" if self._spaced else self._space_held
                text, self._space_held, self._strip = space + body, None, False
        if text := self._unstripped(text):
            self._output_started = self._output_started or bool(text.strip())
            self._spaced = text[-1].isspace()
            out.append(TextDelta(text, self.index))

    def _reasoning_text(self, text: str, out: list[Event]) -> None:
        if text := self._unstripped(text):
            out.append(ReasoningDelta(text, self.index))

    def _unstripped(self, text: str) -> str:
        """The text, without the leading whitespace still to be stripped."""
        if self._strip:
            text = text.lstrip()
            self._strip = not text
        return text

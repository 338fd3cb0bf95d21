"""The push loop every streamed call region shares (calls.py's JSON calls, tagged.py's
XML-like ones, pythonic_stream.py's Python-style lists, recipient.py's harmony
recipients): the text arrives in pieces, and the region's state machine consumes its
buffer one step at a time until a step needs more text."""

from __future__ import annotations

from parlance.core.events import Event


class SteppedRegion:
    """A call region read by a state machine. `_buf`: the text not consumed yet; `_raw`:
    the region as written, which a region that turns out to be no call gives back as
    content. Subclasses define `_step`: consume some of `_buf`, append the events it
    makes, and return False when it needs more text."""

    def __init__(self) -> None:
        self._buf = ""
        self._raw = ""

    def push(self, text: str) -> list[Event]:
        self._raw += text
        self._buf += text
        events: list[Event] = []
        while self._buf and self._step(events):
            pass
        return events

    def _step(self, events: list[Event]) -> bool:
        raise NotImplementedError

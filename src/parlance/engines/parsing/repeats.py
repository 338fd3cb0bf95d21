"""Drops a tool call that repeats, word for word, one the same output already made.

Under a grammar that allows several calls (`tool_choice: required` with parallel calls,
or a call region of `auto`), a small model tends to write the same call again and
again until the token cap cuts the last one. An identical call is of no use to a
client, so a call to a tool already called is held back while its arguments are still
a prefix of an earlier call's: the moment they differ it is a call of its own and is
released, arguments streamed from there on; if it ends identical (or the output ends
before it is whole), it is dropped, and `repeated` says the output is over.
"""

from __future__ import annotations

from dataclasses import replace

from parlance.core.events import Event, ToolCallArgs, ToolCallEnd, ToolCallStart

CallEvent = ToolCallStart | ToolCallArgs | ToolCallEnd


class RepeatFilter:
    """Filters one choice's call events (all other events pass)."""

    def __init__(self) -> None:
        self._made: list[tuple[str, str]] = []  # (name, arguments) of every call let through
        self._name = ""
        self._args = ""
        self._held: list[Event] | None = None  # the current call's events, held back
        self._dropped = 0  # calls dropped so far: later call indices close the gap
        self.repeated = False

    def filter(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for event in events:
            if self.repeated:
                break  # the output is over
            if isinstance(event, ToolCallStart | ToolCallArgs | ToolCallEnd):
                self._call_event(self._renumbered(event), out)
            else:
                out.append(event)
        return out

    def _renumbered(self, event: CallEvent) -> CallEvent:
        if not self._dropped:
            return event
        return replace(event, call_index=event.call_index - self._dropped)

    def _call_event(self, event: CallEvent, out: list[Event]) -> None:
        if isinstance(event, ToolCallStart):
            self._name, self._args = event.name, ""
            self._held = [event] if self._earlier_args() else None
            if self._held is None:
                out.append(event)
            return
        if isinstance(event, ToolCallArgs):
            self._args += event.fragment
            if self._held is None:
                out.append(event)
                return
            self._held.append(event)
            if not any(args.startswith(self._args) for args in self._earlier_args()):
                out += self._held  # it differs: a call of its own
                self._held = None
            return
        if self._held is not None:  # ended while identical to an earlier call, or cut short
            self.repeated = self.repeated or (self._name, self._args) in self._made
            self._held, self._dropped = None, self._dropped + 1
            return
        out.append(event)
        self._made.append((self._name, self._args))

    def _earlier_args(self) -> list[str]:
        return [args for name, args in self._made if name == self._name]

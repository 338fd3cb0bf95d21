"""A dialect's stream encoder driven without a server: the frames a list of core events
becomes (`open`, each event's `feed`, then `close`, or `fail` with an error), and those
frames as the body the server would send."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from parlance.core.errors import ParlanceError
from parlance.core.events import Event
from parlance.dialects.base import Encoder, Frame, Framing
from parlance.server.calls.framing import encode


def encoded(encoder: Encoder, events: Iterable[Event],
            failure: ParlanceError | None = None) -> list[Frame]:
    """Every frame as it was when the encoder handed it out: the server writes a frame at
    once, and a later event may change what an earlier frame's payload refers to (a
    Responses snapshot shares the output list it is building)."""
    frames = _taken(encoder.open())
    for event in events:
        frames += _taken(encoder.feed(event))
    return frames + _taken(encoder.fail(failure) if failure is not None else encoder.close())


def _taken(frames: list[Frame]) -> list[Frame]:
    return [Frame(copy.deepcopy(frame.data), frame.event) for frame in frames]


def body(frames: Iterable[Frame], framing: Framing) -> str:
    """The frames as the response body they make."""
    return b"".join(encode(frame, framing) for frame in frames).decode()


def payloads(frames: Iterable[Frame]) -> list[Any]:
    return [frame.data for frame in frames]

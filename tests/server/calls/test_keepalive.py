"""What keeps a silent stream alive (`server/calls/keepalive.py`), the one source
both transports use: the encoder's own progress frame where its stream has one
(found by `ShowsProgress`), and one idle timer that fills every silence."""

from __future__ import annotations

import asyncio

from parlance.dialects.base import CallFacts, Frame, Incoming
from parlance.dialects.ollama.stream import OllamaEncoder
from parlance.dialects.openai.chat import ChatEncoder, OpenAIChat
from parlance.server.calls.keepalive import Keepalive, progress_of

PATIENCE = 60.0  # a generous bound for every wait; nothing is timed against it


def chat_encoder() -> ChatEncoder:
    dialect = OpenAIChat()
    call = dialect.parse(Incoming({"model": "m", "messages": [{"role": "user", "content": "Hi"}],
                          "stream": True}))
    return dialect.encoder(call, CallFacts("m", ()))


def test_an_encoder_that_shows_progress_gives_its_frames():
    encoder = chat_encoder()
    progress = progress_of(encoder)
    assert progress is not None
    frame = progress()
    assert isinstance(frame, Frame) and frame.data["choices"] == []


def test_an_encoder_without_progress_frames_gives_none():
    encoder = OllamaEncoder("m", generate=False, with_logprobs=False, final=lambda _: {})
    assert progress_of(encoder) is None


async def test_each_silence_is_filled():
    keepalive = Keepalive(0.01)
    fills: list[int] = []
    enough = asyncio.Event()

    async def fill() -> None:
        fills.append(len(fills))
        if len(fills) == 3:
            enough.set()

    runner = asyncio.ensure_future(keepalive.run(fill))
    try:
        await asyncio.wait_for(enough.wait(), PATIENCE)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    assert fills[:3] == [0, 1, 2]


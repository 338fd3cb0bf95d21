"""The access log: one `parlance.access` line per request (id, method, path, status,
model, tokens, time to first output, duration), the request id echoed or made up in
`x-request-id`, and a client that leaves mid-body logged quietly, with no traceback."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine
from tests.support.asgi_exchange import exchange, until
from tests.support.fake_app import make_app

HELLO = [{"role": "user", "content": "Hello!"}]


def access_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "parlance.access"]


async def test_one_line_per_request_with_what_the_generation_reported(caplog):
    caplog.set_level(logging.INFO, logger="parlance.access")
    engine = FakeEngine()
    engine.enqueue(TextDelta("Hi"), TextDelta(" you"), Finish(FinishReason.STOP), Usage(7, 2))
    engine.enqueue(TextDelta("Hi"), Finish(FinishReason.STOP), Usage(5, 1))
    app = make_app(engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        plain = await client.post("/v1/chat/completions",
                                  json={"model": "fake-alias", "messages": HELLO})
        streamed = await client.post("/api/v1/chat", json={
            "model": "fake-model", "input": "Hello!", "stream": True})
        health = await client.get("/health")

    lines = access_lines(caplog)
    assert len(lines) == 3
    first, second, third = (line.access for line in lines)  # type: ignore[attr-defined]
    assert first["request_id"] == plain.headers["x-request-id"]
    assert first["method"] == "POST" and first["path"] == "/v1/chat/completions"
    assert first["status"] == 200 and first["model"] == "fake-alias"
    assert (first["prompt_tokens"], first["completion_tokens"]) == (7, 2)
    assert 0 <= first["ttft_ms"] <= first["duration_ms"]
    assert first["error"] is None
    assert lines[0].getMessage().startswith(f"request_id={first['request_id']} method=POST "
                                            "path=/v1/chat/completions status=200 "
                                            "model=fake-alias prompt_tokens=7 "
                                            "completion_tokens=2 ttft_ms=")
    assert second["request_id"] == streamed.headers["x-request-id"]
    assert (second["path"], second["status"], second["model"]) == (
        "/api/v1/chat", 200, "fake-model")
    assert (second["prompt_tokens"], second["completion_tokens"]) == (5, 1)
    assert third["path"] == "/health" and third["model"] is None and third["ttft_ms"] is None
    assert health.headers["x-request-id"] == third["request_id"]
    assert len({first["request_id"], second["request_id"], third["request_id"]}) == 3


async def test_a_failed_stream_is_logged_with_its_error(caplog):
    caplog.set_level(logging.INFO, logger="parlance.access")
    engine = FakeEngine()
    engine.enqueue(TextDelta("a"), 2.0, TextDelta("b"))
    app = make_app(engine, request_timeout=0.2)
    await exchange(app, "/v1/chat/completions", {"messages": HELLO, "stream": True})
    (line,) = access_lines(caplog)
    assert line.access["status"] == 200  # type: ignore[attr-defined]
    assert line.access["error"] == "request_timeout"  # type: ignore[attr-defined]
    assert line.getMessage().endswith(" error=request_timeout")


@pytest.mark.parametrize("sent, echoed", [
    ("trace-42.a:b", True),
    ("has space", False),
    ("x" * 129, False),
    ("\u00e9t\u00e9", False),
])
async def test_request_id_is_echoed_when_sane(sent, echoed, caplog):
    caplog.set_level(logging.INFO, logger="parlance.access")
    app = make_app(FakeEngine())
    answer = await exchange(app, "/health", method="GET",
                            headers=((b"x-request-id", sent.encode()),))
    given = answer.headers["x-request-id"]
    assert (given == sent) is echoed
    if not echoed:
        assert given.startswith("req_") and len(given) == 28
    assert access_lines(caplog)[0].access["request_id"] == given  # type: ignore[attr-defined]


async def test_client_leaving_mid_body_is_one_quiet_line(caplog):
    caplog.set_level(logging.INFO)
    engine = FakeEngine()
    app = make_app(engine)
    gone = asyncio.Event()
    gone.set()  # the rest of the body never comes: the client has left
    for path in ("/v1/chat/completions", "/api/v1/models/load"):
        await exchange(app, path, raw=b'{"messages": [', leave=gone)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    statuses = [line.access["status"] for line in access_lines(caplog)]  # type: ignore
    assert statuses == [499, 499]
    assert engine.requests == []


async def test_client_leaving_mid_stream_is_logged_499(caplog):
    caplog.set_level(logging.INFO, logger="parlance.access")
    engine = FakeEngine()
    engine.enqueue(*[x for i in range(1000) for x in (TextDelta(f"t{i}"), 0.002)])
    app = make_app(engine)
    gone = asyncio.Event()
    seen = exchange(app, "/v1/chat/completions", {"messages": HELLO, "stream": True},
                    leave=gone)
    task = asyncio.create_task(seen)
    await until(lambda: engine.generations and len(engine.generations[0].yielded) >= 3,
                "the stream under way")
    gone.set()
    await task
    (line,) = access_lines(caplog)
    assert line.access["status"] == 499  # type: ignore[attr-defined]


async def test_an_abandoned_stream_logs_the_prompt_it_evaluated(caplog):
    """Issue 39: a client that timed out on a long prompt left before the final usage,
    and its line said `prompt_tokens=-` though the whole prompt was evaluated."""
    caplog.set_level(logging.INFO, logger="parlance.access")
    engine = FakeEngine()
    held = asyncio.Event()  # never set: the client leaves first
    engine.enqueue(TextDelta("t"), held, Finish(FinishReason.STOP), Usage(2, 1))
    app = make_app(engine)
    gone = asyncio.Event()
    task = asyncio.create_task(exchange(app, "/v1/chat/completions",
                                        {"messages": HELLO, "stream": True}, leave=gone))
    await until(lambda: engine.generations and engine.generations[0].yielded,
                "the output under way")
    gone.set()
    await task
    (line,) = access_lines(caplog)
    access = line.access  # type: ignore[attr-defined]
    assert access["status"] == 499 and access["prompt_tokens"] == 1  # "Hello!": one word
    assert "prompt_tokens=1 " in line.getMessage()

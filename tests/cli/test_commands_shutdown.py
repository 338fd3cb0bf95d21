"""`parlance serve` told to stop (SIGTERM) while streams run: each stream ends by its
dialect's contract, its chunked body terminated (the client reads to a clean EOF), and
the process exits with status 0. The real model (SmolLM2), as a child process."""

from __future__ import annotations

import asyncio
import signal

import httpx
import pytest

from tests.support.serve_process import serve
from tests.support.sse import sse_data

pytestmark = pytest.mark.model

PROMPT = "Count from 1 to 1000, separated by commas."
MODEL = "smollm2-135m-instruct"
NEVER_ENDS = {str(t): -100 for t in (0, 1, 2, 4)}  # SmolLM2's end tokens (and <|im_start|>)
STREAMS = {
    # End tokens banned: these run far past the grace, so the drain must end them.
    "/v1/chat/completions": {"messages": [{"role": "user", "content": PROMPT}],
                             "max_tokens": 3000, "logit_bias": NEVER_ENDS},
    "/v1/completions": {"prompt": PROMPT, "max_tokens": 3000, "logit_bias": NEVER_ENDS},
    # These may also end by themselves within the grace: either way, by contract.
    "/v1/responses": {"input": PROMPT, "max_output_tokens": 3000},
    "/api/v1/chat": {"model": MODEL, "input": PROMPT},
}


async def read_stream(client: httpx.AsyncClient, path: str, body: dict,
                      started: asyncio.Event) -> bytes:
    """The whole body; httpx raises if the chunked body is cut (no final chunk)."""
    received = b""
    payload = {**body, "stream": True, "temperature": 0}
    async with client.stream("POST", path, json=payload) as response:
        assert response.status_code == 200
        async for chunk in response.aiter_raw():
            received += chunk
            started.set()  # admitted before the signal
    return received


async def stream_then_terminate(base_url: str, proc) -> dict[str, bytes]:
    async with httpx.AsyncClient(base_url=base_url, timeout=300) as client:
        started = {path: asyncio.Event() for path in STREAMS}
        tasks = {path: asyncio.create_task(read_stream(client, path, body, started[path]))
                 for path, body in STREAMS.items()}
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started.values())), 300)
        proc.send_signal(signal.SIGTERM)
        return {path: await task for path, task in tasks.items()}


def test_sigterm_ends_every_stream_by_contract_and_exits_0(tmp_path):
    with serve(tmp_path, "--shutdown-grace", "1", "--parallel", "4") as server:
        bodies = asyncio.run(stream_then_terminate(server.base_url, server.proc))
        assert server.proc.wait(120) == 0
        output = server.output()

    for path in ("/v1/chat/completions", "/v1/completions"):
        frames = sse_data(bodies[path].decode())
        assert frames[-2]["error"]["code"] == "server_shutting_down", path
        assert frames[-1] == "[DONE]", path

    responses = bodies["/v1/responses"].decode()
    terminal = [line for line in responses.split("\n") if line.startswith("event: ")][-1]
    frames = sse_data(responses)
    assert frames[-1] == "[DONE]"
    if terminal == "event: response.failed":
        assert frames[-2]["response"]["error"]["code"] == "server_shutting_down"
    else:
        assert terminal == "event: response.completed"

    lmstudio = bodies["/api/v1/chat"].decode()
    events = [line for line in lmstudio.split("\n") if line.startswith("event: ")]
    assert events[-1] == "event: chat.end"
    if events[-2] == "event: error":
        assert sse_data(lmstudio)[-2]["error"]["code"] == "server_shutting_down"

    assert "Traceback" not in output
    stopped = [line for line in output.splitlines()
               if "parlance.access" in line and "error=server_shutting_down" in line]
    assert len(stopped) >= 2  # chat and completions at least

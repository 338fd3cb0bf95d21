"""Soak: is `parlance serve` still whole after many streams, a share of whose clients
walked away at random points? Slots, memory, errors and `/health` latency.

What is measured
----------------
`parlance serve` (default model and settings) runs in a subprocess on loopback. After
one warm-up request per dialect, `--requests` streaming requests (default 200) go out,
`--concurrency` at a time (default 6: a little more than the 4 slots, so some wait in
the queue), spread over every dialect: `/v1/chat/completions`, `/v1/completions`,
`/v1/responses` and `/api/v1/chat`. Each request's fate is drawn with a fixed seed:

* **complete** – read to the end; the stream must end by its dialect's contract
  (`data: [DONE]`, `response.completed`/`response.incomplete`, `chat.end`);
* **before first byte** – the client closes right after sending;
* **during prompt** – a long prompt; the client closes at the first frame, while the
  model is still evaluating the prompt;
* **mid stream** – the client closes after 1-5 frames of content.

Meanwhile a thread polls `GET /health` over one keep-alive connection. Reported:

* slots still in use (and requests running or waiting) once the run has settled,
  from `/metrics`: must be 0;
* the server's RSS (VmRSS of its process) after the warm-up and after the run;
* the count of 5xx answers, and of error frames or broken endings in streams read to
  the end: must be 0;
* `/health` latency p50/p99/max during the run.

The script exits 1 when a slot leaked, a 5xx came back or a stream read to the end was
broken; 0 otherwise. Every request has a client timeout and the run a time limit
(`--max-seconds`, default 300), so it ends within minutes.

Run: `.venv/bin/python bench/soak.py [--requests 200] [--concurrency 6] [--seed 15]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from light_client import Dechunker
from servers import Server, free_port, stop_servers_on_sigterm

from parlance.models.registry import DEFAULT_MODEL

HOST = "127.0.0.1"
DIALECTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/api/v1/chat")
FATES = {"complete": 0.4, "before first byte": 0.2, "during prompt": 0.2, "mid stream": 0.2}
QUESTIONS = ["Tell me a joke.", "What is the capital of France?", "Name three colours.",
             "Write a haiku about the sea.", "Count to ten.", "Why is the sky blue?"]
# Several hundred tokens: the prompt takes a noticeable time to evaluate.
LONG_CONTEXT = " ".join(f"Note {i}: the meeting moved to room {i % 17} at {i % 12 + 1} pm."
                        for i in range(40))
REQUEST_SECONDS = 120.0  # a client gives up on one request after this
SETTLE_SECONDS = 30.0  # how long the slots may take to free up after the last request
# A frame that carries generated text, by dialect.
CONTENT = {
    "/v1/chat/completions": re.compile(rb'"content":"[^"]'),
    "/v1/completions": re.compile(rb'"text":"[^"]'),
    "/v1/responses": re.compile(rb"response\.output_text\.delta"),
    "/api/v1/chat": re.compile(rb"message\.delta"),
}
# How a stream read to the end must end, by dialect: its last named event (None: no
# named events) and whether `data: [DONE]` follows.
ENDINGS: dict[str, tuple[tuple[bytes, ...] | None, bool]] = {
    "/v1/chat/completions": (None, True),
    "/v1/completions": (None, True),
    "/v1/responses": ((b"response.completed", b"response.incomplete"), True),
    "/api/v1/chat": ((b"chat.end",), False),
}


@dataclass
class Plan:
    path: str
    fate: str
    body: dict
    frames_before_leaving: int = 0  # mid stream: content frames read before closing


@dataclass
class Outcome:
    plan: Plan
    status: int | None = None  # None: left before any answer
    error_frames: int = 0
    broken_end: bool = False
    detail: str = ""


@dataclass
class Health:
    latencies_ms: list[float] = field(default_factory=list)
    failures: int = 0


def ends_by_contract(path: str, body: bytes) -> bool:
    names, done = ENDINGS[path]
    text = body.rstrip()
    if done != text.endswith(b"data: [DONE]") or not body.endswith(b"\n\n"):
        return False
    if names is None:
        return True
    at = body.rfind(b"\nevent: ") + len(b"\nevent: ")
    return body[at:body.find(b"\n", at)] in names


def body_for(path: str, prompt: str, max_tokens: int) -> dict:
    base: dict = {"model": DEFAULT_MODEL, "stream": True, "temperature": 0.7}
    if path == "/v1/chat/completions":
        return {**base, "messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_tokens}
    if path == "/v1/completions":
        return {**base, "prompt": prompt, "max_tokens": max_tokens}
    return {**base, "input": prompt, "max_output_tokens": max_tokens, "store": False}


def plans(count: int, seed: int) -> list[Plan]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        path = DIALECTS[i % len(DIALECTS)]
        fate = rng.choices(list(FATES), weights=list(FATES.values()))[0]
        prompt = rng.choice(QUESTIONS)
        if fate == "during prompt":
            prompt = f"{LONG_CONTEXT}\n\n{prompt}"
        out.append(Plan(path, fate, body_for(path, prompt, rng.randint(16, 48)),
                        rng.randint(1, 5)))
    return out


async def run_one(port: int, plan: Plan) -> Outcome:
    outcome = Outcome(plan)
    payload = json.dumps(plan.body).encode()
    head = (f"POST {plan.path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            "Connection: close\r\n\r\n").encode()
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(head + payload)
        await writer.drain()
        if plan.fate == "before first byte":
            return outcome
        headers = await reader.readuntil(b"\r\n\r\n")
        outcome.status = int(headers.split(b" ", 2)[1])
        chunked = b"transfer-encoding: chunked" in headers.lower()
        dechunk = Dechunker() if chunked else None
        body, content_frames = b"", 0
        while data := await reader.read(65536):
            body += dechunk.feed(data) if dechunk else data
            if outcome.status != 200:
                continue
            if plan.fate == "during prompt" and b"\n\n" in body:
                return outcome  # the first frame came: leave while the prompt is evaluated
            content_frames = len(CONTENT[plan.path].findall(body))
            if plan.fate == "mid stream" and content_frames >= plan.frames_before_leaving:
                return outcome
        if outcome.status == 200:
            outcome.error_frames = body.count(b'"error":{')
            outcome.broken_end = not ends_by_contract(plan.path, body)
            if outcome.error_frames or outcome.broken_end:
                outcome.detail = body[-300:].decode(errors="replace")
        else:
            outcome.detail = body[:300].decode(errors="replace")
        return outcome
    finally:
        writer.close()


async def run_all(port: int, todo: list[Plan], concurrency: int,
                  deadline: float) -> tuple[list[Outcome], int]:
    """Every plan, `concurrency` at a time; (outcomes, plans not sent: the time ran out)."""
    limit = asyncio.Semaphore(concurrency)
    skipped = 0

    async def guarded(plan: Plan) -> Outcome | None:
        nonlocal skipped
        async with limit:
            if time.monotonic() > deadline:
                skipped += 1
                return None
            try:
                return await asyncio.wait_for(run_one(port, plan), REQUEST_SECONDS)
            except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
                return Outcome(plan, broken_end=plan.fate == "complete",
                               detail=f"{type(exc).__name__}: {exc}")

    done = await asyncio.gather(*(guarded(p) for p in todo))
    return [o for o in done if o is not None], skipped


def poll_health(base: str, stop: threading.Event, interval: float, health: Health) -> None:
    with httpx.Client(base_url=base, timeout=30) as client:
        client.get("/health")  # the connection is open before the first timing
        while not stop.is_set():
            started = time.perf_counter()
            try:
                ok = client.get("/health").status_code == 200
            except httpx.HTTPError:
                ok = False
            health.latencies_ms.append((time.perf_counter() - started) * 1000)
            health.failures += not ok
            stop.wait(interval)


def gauges(base: str) -> dict[str, float]:
    text = httpx.get(base + "/metrics", timeout=30).text
    out: dict[str, float] = {}
    for name in ("slots_in_use", "requests_running", "requests_waiting"):
        values = re.findall(rf"^parlance_{name}\{{[^}}]*\}} (\S+)$", text, re.M)
        out[name] = sum(float(v) for v in values)
    return out


def settled(base: str) -> dict[str, float]:
    """The gauges once nothing runs any more, or as they are after SETTLE_SECONDS."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        now = gauges(base)
        if not any(now.values()) or time.monotonic() > deadline:
            return now
        time.sleep(0.2)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=6)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--health-interval", type=float, default=0.05,
                        help="seconds between /health requests")
    parser.add_argument("--max-seconds", type=float, default=300.0,
                        help="no new request starts after this long")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    stop_servers_on_sigterm()
    port = args.port or free_port()
    todo = plans(args.requests, args.seed)
    with tempfile.TemporaryDirectory() as data:
        command = [sys.executable, "-m", "parlance", "serve", "--model", DEFAULT_MODEL,
                   "--host", HOST, "--port", str(port), "--data-dir", str(Path(data))]
        with Server("parlance", command, port) as server:
            pid = server.proc.pid  # type: ignore[union-attr]
            warm = [Plan(path, "complete", body_for(path, "Hi", 8)) for path in DIALECTS]
            warmed, _ = asyncio.run(run_all(port, warm, 1, time.monotonic() + 300))
            rss_before = rss_mib(pid)
            health, stop = Health(), threading.Event()
            poller = threading.Thread(target=poll_health,
                                      args=(server.base, stop, args.health_interval, health))
            poller.start()
            started = time.monotonic()
            try:
                outcomes, skipped = asyncio.run(run_all(
                    port, todo, args.concurrency, started + args.max_seconds))
            finally:
                stop.set()
                poller.join()
            seconds = time.monotonic() - started
            left = settled(server.base)
            rss_after = rss_mib(pid)
    return report(outcomes, warmed, skipped, seconds, left, rss_before, rss_after, health)


def report(outcomes: list[Outcome], warmed: list[Outcome], skipped: int, seconds: float,
           left: dict[str, float], rss_before: float, rss_after: float, health: Health) -> int:
    fates = Counter(o.plan.fate for o in outcomes)
    statuses = Counter(o.status for o in outcomes + warmed if o.status is not None)
    server_errors = sum(n for status, n in statuses.items() if status >= 500)
    read_through = [o for o in outcomes + warmed if o.plan.fate == "complete"]
    broken = [o for o in read_through if o.broken_end or o.error_frames]
    print(f"{len(outcomes)} requests (after {len(warmed)} warm-up ones) in {seconds:.1f} s "
          f"({skipped} not sent: time limit); "
          + ", ".join(f"{fate} {n}" for fate, n in fates.items()))
    print("statuses: " + ", ".join(f"{s} x{n}" for s, n in sorted(statuses.items())))
    print(f"5xx answers: {server_errors}; streams read to the end: {len(read_through)}, "
          f"broken or with an error frame: {len(broken)}")
    for outcome in broken[:5]:
        print(f"  {outcome.plan.path}: {outcome.detail!r}")
    print("after settling: " + ", ".join(f"{k} {v:g}" for k, v in left.items()))
    print(f"server RSS: {rss_before:.1f} MiB after warm-up, {rss_after:.1f} MiB after the run "
          f"({rss_after - rss_before:+.1f} MiB)")
    if health.latencies_ms:
        print(f"/health during the run: n={len(health.latencies_ms)} p50 "
              f"{statistics.median(health.latencies_ms):.1f} ms, p99 "
              f"{p99(health.latencies_ms):.1f} ms, max {max(health.latencies_ms):.1f} ms, "
              f"failures {health.failures}")
    leaked = left["slots_in_use"] > 0
    failed = leaked or server_errors > 0 or bool(broken) or health.failures > 0
    print(("FAIL" if failed else "PASS") + f": slots leaked {left['slots_in_use']:g}, "
          f"5xx {server_errors}, broken streams {len(broken)}, /health failures "
          f"{health.failures}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

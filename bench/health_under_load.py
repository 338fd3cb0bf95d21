"""Does one huge request stall everyone? `/health` latency while `parlance serve` takes
in the largest body it accepts.

What is measured
----------------
`parlance serve` (default model, default `--max-body-mb`) runs in a subprocess. A
client thread posts a body just under the limit to `/v1/chat/completions`; meanwhile
the main thread polls `GET /health` over one keep-alive connection, one request every
`--interval` seconds, from just before the post starts until its answer arrives
(`--repeat` posts per shape). The script prints each post's status and duration, and
the p50/p99/max of the `/health` latencies measured meanwhile, next to an idle
baseline. Target: p99 under 100 ms.

Two shapes of the largest body, since they stress different steps:

* **text** – one user message of ~32 MB: decoding the JSON is cheap, rendering the
  template and tokenizing it is not (the prompt is then refused: it overflows the
  context, a 403 after all that work).
* **messages** – the same bytes as the most messages a body may hold (one JSON
  object each, up to `strict_json.MAX_OBJECTS`): decoding, validating and templating
  many objects is Python-side work, some of it in calls that hold the GIL.

Both are prepared on worker threads; what remains on the event loop is reading the
body and answering. On 2 cores, the posting client competes with the server for CPU
too, which is what a co-located client would do.

Run: `.venv/bin/python bench/health_under_load.py [--shape text,messages] [--repeat 3]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from servers import Server, free_port, stop_servers_on_sigterm

from parlance.config import DEFAULT_MAX_BODY_MB
from parlance.models.registry import DEFAULT_MODEL
from parlance.server.body.strict_json import MAX_OBJECTS

TARGET_P99_MS = 100.0
IDLE_SECONDS = 2.0


def body_of(shape: str, limit: int) -> bytes:
    """A chat body of this shape, as close under `limit` bytes as it gets."""
    head: dict[str, Any] = {"model": DEFAULT_MODEL, "max_tokens": 1, "messages": []}
    room = limit - len(json.dumps(head).encode()) - 64
    count = 1 if shape == "text" else MAX_OBJECTS - 1  # (the body itself is one)
    each = room // count - len(json.dumps({"role": "user", "content": ""})) - 2
    words = "word " * (each // 5)
    head["messages"] = [{"role": "user", "content": words} for _ in range(count)]
    raw = json.dumps(head).encode()
    assert len(raw) <= limit, (len(raw), limit)
    return raw


def poll_health(client: httpx.Client, until: threading.Event, interval: float) -> list[float]:
    latencies = []
    while not until.is_set():
        started = time.perf_counter()
        response = client.get("/health")
        latencies.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.text
        time.sleep(interval)
    return latencies


def p99_of(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def summary(latencies: list[float]) -> str:
    return (f"n={len(latencies):4d}  p50 {statistics.median(latencies):7.1f} ms  "
            f"p99 {p99_of(latencies):7.1f} ms  max {max(latencies):7.1f} ms")


def measure(base: str, body: bytes, interval: float) -> tuple[int, float, list[float]]:
    done = threading.Event()
    outcome: dict[str, object] = {}

    def post() -> None:
        started = time.perf_counter()
        with httpx.Client(base_url=base, timeout=600) as poster:
            response = poster.post("/v1/chat/completions", content=body,
                                   headers={"content-type": "application/json"})
        outcome.update(status=response.status_code, seconds=time.perf_counter() - started,
                       text=response.text[:200])
        done.set()

    with httpx.Client(base_url=base, timeout=60) as client:
        client.get("/health")  # the connection is open before the clock starts
        poster = threading.Thread(target=post)
        poster.start()
        latencies = poll_health(client, done, interval)
        poster.join()
    return int(outcome["status"]), float(outcome["seconds"]), latencies  # type: ignore[arg-type]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="text,messages")
    parser.add_argument("--interval", type=float, default=0.01,
                        help="seconds between /health requests")
    parser.add_argument("--repeat", type=int, default=3, help="posts of each shape")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    stop_servers_on_sigterm()
    limit = DEFAULT_MAX_BODY_MB * 2**20
    port = args.port or free_port()
    with tempfile.TemporaryDirectory() as data:
        command = [sys.executable, "-m", "parlance", "serve", "--model", DEFAULT_MODEL,
                   "--port", str(port), "--data-dir", str(Path(data))]
        with Server("parlance", command, port) as server:
            with httpx.Client(base_url=server.base, timeout=60) as client:
                client.get("/health")
                enough = threading.Event()
                threading.Timer(IDLE_SECONDS, enough.set).start()
                idle = poll_health(client, enough, args.interval)
            print(f"idle     /health {summary(idle)}")
            worst = 0.0
            for shape in args.shape.split(","):
                body = body_of(shape, limit)
                latencies, outcomes = [], []
                for _ in range(args.repeat):
                    status, seconds, polled = measure(server.base, body, args.interval)
                    latencies += polled
                    outcomes.append(f"{status} in {seconds:.1f} s")
                worst = max(worst, p99_of(latencies))
                print(f"{shape:8s} {len(body) / 2**20:5.1f} MiB -> {', '.join(outcomes)}")
                print(f"{'':8s} /health meanwhile {summary(latencies)}")
    verdict = "PASS" if worst < TARGET_P99_MS else "FAIL"
    print(f"{verdict}: worst /health p99 under load {worst:.1f} ms (target < "
          f"{TARGET_P99_MS:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

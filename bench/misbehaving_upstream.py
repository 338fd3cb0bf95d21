"""Misbehaving upstream: does `parlance serve` in front of a broken OpenAI-compatible
server stay responsive, bounded and discreet?

What is measured
----------------
A loopback upstream written here (its own process: `--upstream-only`) serves five
models, each from a port of its own (a replica of its own, with its own circuit
breaker), and misbehaves differently for each:

* **silent** – accepts the request and never answers;
* **drip** – sends its headers, then one event one byte at a time, 10 bytes a second;
* **no-line-break** – sends its headers, then bytes without a line break as fast as the
  gateway reads them;
* **huge-event** – one 32 MiB event (past the 8 MiB bound), then its line break;
* **error-500** – answers 500 with secrets in its body.

`parlance serve --upstream <each port>` (no local model, `--request-timeout` 10 by
default, health checks every 0.5 s so that a breaker a misbehaving replica opened closes
again soon and the misbehaviour goes on) runs in front of it, both on loopback.
`--clients` loops per model (default 2) send streamed and plain chat requests, one
after the other, for `--seconds` (default 30);
every request has a client timeout, so the run ends by itself. Meanwhile a thread polls
`GET /health` over one keep-alive connection. Reported: `/health` latency p50/p99/max
(target: p99 <= 100 ms), the answers each model got, whether an upstream's secret ever
reached a client, the server's RSS before and after, and the load average.

The script exits 1 when `/health` failed, a secret leaked or p99 missed the target.

Run: `.venv/bin/python bench/misbehaving_upstream.py [--seconds 30] [--clients 2]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter

import httpx
from servers import Server, free_port, stop_servers_on_sigterm
from soak import Health, p99, poll_health, rss_mib

HOST = "127.0.0.1"
MODELS = ("silent", "drip", "no-line-break", "huge-event", "error-500")
SECRET = "sk-bench-secret-0000"
HUGE = 32 * 2**20
PIECE = 65536

# -- the upstream -------------------------------------------------------------------------


def _json(writer: asyncio.StreamWriter, status: int, payload: object) -> None:
    data = json.dumps(payload).encode()
    writer.write(b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\n"
                 b"content-length: %d\r\n\r\n%s" % (status, len(data), data))


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _misbehave(model: str, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
    if model == "error-500":
        _json(writer, 500, {"error": {"message": f"db password {SECRET} at /srv/app.py:42",
                                      "type": "server_error"}})
        await writer.drain()
        return
    if model != "silent":
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n" + _chunk(b"data: "))
    if model == "drip":
        while True:
            writer.write(_chunk(b"x"))
            await writer.drain()
            await asyncio.sleep(0.1)
    if model == "no-line-break":
        while True:
            writer.write(_chunk(b"x" * PIECE))
            await writer.drain()
    if model == "huge-event":
        for _ in range(HUGE // PIECE):
            writer.write(_chunk(b"x" * PIECE))
            await writer.drain()
        writer.write(_chunk(b"\n\n") + b"0\r\n\r\n")
        await writer.drain()
    while await reader.read(PIECE):  # hold the connection until the gateway leaves
        pass


async def _connection(model: str, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            if head.startswith(b"GET "):  # its model list: the health check passes
                _json(writer, 200, {"object": "list", "data": [
                    {"id": model, "object": "model", "owned_by": "bench"}]})
                await writer.drain()
                continue
            await _misbehave(model, reader, writer)
            return
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve_upstream(ports: list[int]) -> None:
    servers = [await asyncio.start_server(functools.partial(_connection, model), HOST, port,
                                          backlog=1024)
               for model, port in zip(MODELS, ports, strict=True)]
    await asyncio.gather(*(server.serve_forever() for server in servers))


# -- the clients ----------------------------------------------------------------------------


class Tally:
    def __init__(self) -> None:
        self.outcomes: dict[str, Counter[str]] = {m: Counter() for m in MODELS}
        self.leaked = 0
        self.seconds: dict[str, list[float]] = {m: [] for m in MODELS}


async def one_request(client: httpx.AsyncClient, model: str, stream: bool,
                      tally: Tally) -> None:
    body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": "Hi"}]}
    started = time.perf_counter()
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            text = (await response.aread()).decode(errors="replace")
        if response.status_code != 200:
            outcome = f"{response.status_code} {json.loads(text)['error'].get('code')}"
        else:
            errors = [line for line in text.splitlines() if '"error"' in line]
            outcome = ("200 stream ended with " + json.loads(errors[-1][6:])["error"]["code"]
                       if errors else "200 without an error")
        tally.leaked += SECRET in text or "/srv/app.py" in text
    except httpx.HTTPError as exc:
        outcome = f"client error {type(exc).__name__}"
    tally.outcomes[model][outcome] += 1
    tally.seconds[model].append(time.perf_counter() - started)


async def client_loop(base: str, model: str, until: float, tally: Tally) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        stream = True
        while time.monotonic() < until:
            await one_request(client, model, stream, tally)
            stream = not stream


async def load(base: str, clients: int, seconds: float, tally: Tally) -> None:
    until = time.monotonic() + seconds
    await asyncio.gather(*(client_loop(base, m, until, tally)
                           for m in MODELS for _ in range(clients)))


# -- the run --------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--clients", type=int, default=2, help="request loops per model")
    parser.add_argument("--request-timeout", type=float, default=10.0)
    parser.add_argument("--health-interval", type=float, default=0.05)
    parser.add_argument("--target-ms", type=float, default=100.0)
    parser.add_argument("--upstream-only", metavar="PORTS",
                        help="only serve the misbehaving upstream, one model per port "
                             "(comma-separated, in the order of the models)")
    args = parser.parse_args()
    if args.upstream_only:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve_upstream([int(p) for p in args.upstream_only.split(",")]))
        return 0
    stop_servers_on_sigterm()
    up_ports, port = [free_port() for _ in MODELS], free_port()
    upstream_cmd = [sys.executable, __file__, "--upstream-only",
                    ",".join(map(str, up_ports))]
    with Server("misbehaving-upstream", upstream_cmd, up_ports[0]), \
            tempfile.TemporaryDirectory() as data:
        command = [sys.executable, "-m", "parlance", "serve", "--host", HOST,
                   "--port", str(port), "--data-dir", data,
                   "--request-timeout", str(args.request_timeout),
                   "--upstream-health-interval", "0.5"]
        for up_port in up_ports:
            command += ["--upstream", f"http://{HOST}:{up_port}"]
        with Server("parlance", command, port) as server:
            pid = server.proc.pid  # type: ignore[union-attr]
            rss_before = rss_mib(pid)
            health, stop = Health(), threading.Event()
            poller = threading.Thread(target=poll_health, args=(
                server.base, stop, args.health_interval, health))
            poller.start()
            tally = Tally()
            started = time.monotonic()
            try:
                asyncio.run(load(server.base, args.clients, args.seconds, tally))
            finally:
                stop.set()
                poller.join()
            seconds = time.monotonic() - started
            rss_after = rss_mib(pid)
    return report(tally, health, seconds, rss_before, rss_after, args)


def report(tally: Tally, health: Health, seconds: float, rss_before: float, rss_after: float,
           args: argparse.Namespace) -> int:
    print(f"{seconds:.1f} s, {args.clients} client loop(s) per model, request timeout "
          f"{args.request_timeout:g} s")
    for model in MODELS:
        took = tally.seconds[model]
        slowest = f", slowest {max(took):.1f} s" if took else ""
        print(f"  {model:14s} " + ", ".join(f"{outcome} x{n}" for outcome, n
                                            in tally.outcomes[model].most_common()) + slowest)
    print(f"an upstream's secret reached a client: {tally.leaked} time(s)")
    print(f"server RSS: {rss_before:.0f} MiB before, {rss_after:.0f} MiB after")
    latencies, failures = health.latencies_ms, health.failures
    p99_ms = p99(latencies) if latencies else float("inf")
    print(f"/health: n={len(latencies)}  p50 {statistics.median(latencies):.1f} ms  "
          f"p99 {p99_ms:.1f} ms  max {max(latencies):.1f} ms  failures {failures}"
          if latencies else "/health: no sample")
    load1, load5, _ = os.getloadavg()
    print(f"load average: {load1:.2f} (1 min), {load5:.2f} (5 min) on {os.cpu_count()} CPUs")
    ok = failures == 0 and not tally.leaked and p99_ms <= args.target_ms
    print(("PASS" if ok else "FAIL") + f": /health p99 target {args.target_ms:g} ms")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

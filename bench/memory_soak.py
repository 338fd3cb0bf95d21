"""Memory soak: is the server's RSS a high-water mark or a leak? (issue 39: over the
probes the main server's RSS rose from 693 MB to 1.24 GB after 30 MiB `count_tokens`
bodies and greedy traffic.)

What is measured
----------------
`parlance serve` (default model) runs in a subprocess on loopback. `--rounds` rounds
(default 8) each send the same work: `--big` (default 2) `count_tokens` bodies of
`--big-mib` MiB (default 30) to `/v1/messages/count_tokens`, then `--greedy` (default
6) short greedy chat completions, `--concurrency` at a time. After each round the
server's VmRSS is read. A leak grows every round; a high-water mark grows in the first
rounds and then stays: reported is the RSS per round and the growth over the second half
of the rounds (`--leak-mib`, default 32: more than that over the second half is called a
leak, and the script exits 1).

Run: `.venv/bin/python bench/memory_soak.py [--rounds 8] [--big-mib 30]`;
`--rounds 2 --big-mib 1 --greedy 1` is a smoke run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import httpx
from bench.servers import Server, free_port, stop_servers_on_sigterm
from bench.soak import rss_mib

from parlance.models.registry import DEFAULT_MODEL

HOST = "127.0.0.1"


def big_body(mib: int) -> dict:
    """A count_tokens request of about `mib` MiB of text (one message)."""
    word = "lorem ipsum dolor sit amet "
    text = word * (mib * 2**20 // len(word))
    return {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": text}]}


async def one_round(base: str, big: int, big_mib: int, greedy: int,
                    concurrency: int) -> list[int]:
    """The round's statuses (each must be 2xx)."""
    statuses: list[int] = []
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=600) as http:
        for _ in range(big):
            answer = await http.post("/v1/messages/count_tokens", json=big_body(big_mib))
            statuses.append(answer.status_code)

        async def chat(i: int) -> None:
            async with gate:
                answer = await http.post("/v1/chat/completions", json={
                    "model": DEFAULT_MODEL, "temperature": 0, "max_tokens": 32,
                    "messages": [{"role": "user", "content": f"Count to {i + 3}."}]})
                statuses.append(answer.status_code)

        await asyncio.gather(*(chat(i) for i in range(greedy)))
    return statuses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--big", type=int, default=2)
    parser.add_argument("--big-mib", type=int, default=30)
    parser.add_argument("--greedy", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--leak-mib", type=float, default=32.0)
    args = parser.parse_args()
    stop_servers_on_sigterm()
    port = free_port()
    with tempfile.TemporaryDirectory() as data:
        command = [sys.executable, "-m", "parlance", "serve", "--model", DEFAULT_MODEL,
                   "--host", HOST, "--port", str(port), "--data-dir", str(Path(data)),
                   "--max-body-mb", str(max(64, 2 * args.big_mib))]
        with Server("parlance", command, port) as server:
            pid = server.proc.pid  # type: ignore[union-attr]
            rss = [rss_mib(pid)]
            failed = 0
            for round_ in range(args.rounds):
                statuses = asyncio.run(one_round(server.base, args.big, args.big_mib,
                                                 args.greedy, args.concurrency))
                failed += sum(not 200 <= s < 300 for s in statuses)
                rss.append(rss_mib(pid))
                print(f"round {round_ + 1}: RSS {rss[-1]:.0f} MiB", flush=True)
    half = len(rss) // 2
    late_growth = rss[-1] - rss[half]
    print(f"RSS at start {rss[0]:.0f} MiB, peak {max(rss):.0f} MiB, end {rss[-1]:.0f} MiB; "
          f"growth over the second half of the rounds {late_growth:+.0f} MiB; "
          f"{failed} non-2xx answers")
    leak = late_growth > args.leak_mib and args.rounds >= 4
    print("verdict: " + ("LEAK (still growing)" if leak else
                         "high-water mark (flat once warm)" if args.rounds >= 4 else
                         "too few rounds to tell"))
    return 1 if leak or failed else 0


if __name__ == "__main__":
    sys.exit(main())

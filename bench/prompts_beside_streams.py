"""Long prompts arriving while other streams generate: Parlance against llama-server.

Eight chat streams, each with a ~1,300-token prompt (bench/speculative.py's summary
text, each stream's prompt differing in its first line from every other prompt of the
run, so nothing is shared or cached), are
sent at once, greedy, `--tokens` new tokens each. The first prompt is evaluated alone;
every later one is evaluated while the earlier streams generate, so this is where a
server's prompt chunking shows: how many prompt tokens ride beside the decoding rows
in one step. Reported per side: aggregate tok/s (all new tokens / first request sent →
last token), each stream's TTFT, and the inter-token gaps of all streams (p50, p99,
max), the target being Parlance ≥ 1.0× llama-server's aggregate with a lower p99 gap.

`--budgets 64,128,256` adds Parlance sides with other prompt chunks beside decoding
(`engines/llamacpp/scheduler.py`'s PREFILL_WHILE_DECODING, set in the server process
before it starts): the figures its value was chosen by.

Run on a quiet machine:
`.venv/bin/python bench/prompts_beside_streams.py [--runs 3] [--budgets 64,256]`
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from light_client import post_streams, sse_events  # noqa: E402
from servers import Server, free_port, stop_servers_on_sigterm  # noqa: E402
from speculative import WORKLOADS, commands  # noqa: E402

from parlance.models.registry import DEFAULT_MODEL, builtin_registry  # noqa: E402

STREAMS = 8
console = Console(width=None if sys.stdout.isatty() else 140)


@dataclass
class Run:
    tokens: int
    seconds: float
    ttfts: list[float]
    gaps: list[float]

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


def with_budget(command: list[str], budget: int) -> list[str]:
    """`parlance serve …` with the scheduler's prompt chunk beside decoding set first."""
    code = ("import sys; import parlance.engines.llamacpp.scheduler as s; "
            f"s.PREFILL_WHILE_DECODING = {budget}; from parlance.cli import main; "
            "sys.argv = ['parlance', *sys.argv[1:]]; sys.exit(main())")
    return [sys.executable, "-c", code, *command[3:]]  # past `python -m parlance`


def run(port: int, max_tokens: int, round_: int) -> Run:
    """One round; its prompts are new to every server (no cached prefix)."""
    bodies = [{"messages": [{"role": "user", "content": f"(Round {round_}, request {i + 1}.)\n"
                                                      f"{WORKLOADS['summary']}"}],
               "stream": True, "temperature": 0, "max_tokens": max_tokens,
               "stream_options": {"include_usage": True}} for i in range(STREAMS)]
    captures = post_streams("127.0.0.1", port, "/v1/chat/completions", bodies)
    start = min(c.sent for c in captures)
    tokens, ttfts, ends, gaps = 0, [], [], []
    for capture in captures:
        status, events = sse_events(capture)
        if status != 200:
            raise RuntimeError(f"port {port} answered HTTP {status}")
        first = last = 0.0
        for arrived, chunk in events:
            if chunk.get("usage"):
                tokens += chunk["usage"]["completion_tokens"]
            if any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                if last:
                    gaps.append(arrived - last)
                first, last = first or arrived, arrived
        ttfts.append(first - start)
        ends.append(last - start)
    return Run(tokens, max(ends), sorted(ttfts), sorted(gaps))


def quantile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(len(values) * q))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--budgets", default="", help="extra Parlance prompt chunks to time")
    args = parser.parse_args()
    stop_servers_on_sigterm()
    off = commands(builtin_registry()[DEFAULT_MODEL].locate())
    sides = {"parlance": off["off"], "llama-server": off["llama-server"]}
    for budget in filter(None, args.budgets.split(",")):
        sides[f"parlance chunk {budget}"] = (
            lambda port, b=int(budget): with_budget(off["off"](port), b))
    runs: dict[str, list[Run]] = {name: [] for name in sides}
    with ExitStack() as stack:
        ports = {}
        for name, command in sides.items():
            port = free_port()
            ports[name] = stack.enter_context(Server(name, command(port), port)).port
        for round_ in range(args.runs):  # sides interleaved, the order turned each round
            order = list(ports) if round_ % 2 == 0 else list(reversed(ports))
            for name in order:
                time.sleep(1.0)
                result = run(ports[name], args.tokens, round_)
                runs[name].append(result)
                console.print(f"round {round_ + 1} {name}: {result.rate:.1f} tok/s, gap p99 "
                              f"{quantile(result.gaps, 0.99) * 1000:.0f} ms")
    table = Table(title=f"{STREAMS} streams of a ~1,300-token prompt sent at once "
                        "(median round by tok/s)")
    for column in ("side", "tok/s", "TTFT (s), each stream", "gap p50", "gap p99", "gap max"):
        table.add_column(column, justify="left" if column == "side" else "right")
    medians = {}
    for name, results in runs.items():
        result = sorted(results, key=lambda r: r.rate)[len(results) // 2]
        medians[name] = result
        table.add_row(name, f"{result.rate:.1f}", " ".join(f"{t:.1f}" for t in result.ttfts),
                      *(f"{quantile(result.gaps, q) * 1000:.0f} ms" for q in (0.5, 0.99, 1.0)))
    console.print(table)
    ours, peer = medians["parlance"], medians["llama-server"]
    ratios = [a.rate / b.rate for a, b in zip(runs["parlance"], runs["llama-server"], strict=True)]
    aggregate = statistics.median(ratios)
    console.print(f"{'PASS' if aggregate >= 1.0 else 'FAIL'} aggregate parlance / llama-server, "
                  f"median of rounds ({', '.join(f'{r:.2f}' for r in ratios)}): "
                  f"{aggregate:.2f}× (target ≥ 1.0)")
    lower = quantile(ours.gaps, 0.99) < quantile(peer.gaps, 0.99)
    console.print(f"{'PASS' if lower else 'FAIL'} gap p99: parlance "
                  f"{quantile(ours.gaps, 0.99) * 1000:.0f} ms, llama-server "
                  f"{quantile(peer.gaps, 0.99) * 1000:.0f} ms (target: lower)")
    console.print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The upstream engine's cost, side by side in one run.

(a) Overhead: llama-server (SmolLM2, 8 slots) streamed directly, through a bare
    relay (bench/bare_relay.py: the least a Python relay does, for scale), and through
    a `parlance serve --upstream` gateway in front of it (no local model). Tokens/s
    and TTFT at 1 and 8 concurrent streams, as the median over runs of each run's
    ratio (and difference) against the direct run beside it; targets: the gateway
    keeps >= 0.97x the aggregate tokens/s and adds <= 5 ms to the TTFT.
(b) Gateway capacity: a synthetic upstream (tests/support/synthetic_upstream.py, its own
    process) streams as fast as the socket takes; one Parlance process relays it,
    against LiteLLM's proxy (`litellm[proxy]`, installed into a venv under
    ~/.cache/parlance-bench; skipped with the reason when it cannot be) relaying the
    same upstream with one worker. Streamed tokens/s, and tokens per CPU-second of
    the relaying process (tokens/s per core); target: Parlance >= 3x LiteLLM.

Everything runs on this machine: servers are started first and wait idle; the
order of the sides changes run by run (`--runs`) so drift on a shared machine hits
them alike. The client (bench/light_client.py) only timestamps raw
reads while streaming and parses afterwards.

Run: `.venv/bin/python bench/upstream.py [--runs 9] [--tokens 384] [--relay-tokens 2000]
[--relay-streams 16] [--only overhead|capacity]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from light_client import post_streams, sse_events  # noqa: E402
from peers import PeerUnavailable, llama_server_binary  # noqa: E402
from servers import Server, free_port, stop_servers_on_sigterm  # noqa: E402

from parlance.models.registry import DEFAULT_MODEL, builtin_registry  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("PARLANCE_BENCH_CACHE")
             or Path.home() / ".cache" / "parlance-bench")
LITELLM_VENV = CACHE / "litellm-venv"
SLOTS = 8
CTX_PER_SLOT = 1024
NEVER_ENDS = {str(t): -100 for t in (0, 1, 2, 4)}  # SmolLM2's end tokens: run to max_tokens
TOPICS = ["dragons", "the sea", "a lighthouse", "cooking rice", "the moon", "winter",
          "a robot", "bicycles"]
CHAT = "/v1/chat/completions"

console = Console(width=None if sys.stdout.isatty() else 120)


# -- measuring streams -------------------------------------------------------------------


@dataclass
class Round:
    """One level of concurrent streams: each stream's send, first and last token times
    and token count."""

    streams: list[tuple[float, float | None, float | None, int]]

    @property
    def tokens(self) -> int:
        return sum(s[3] for s in self.streams)

    @property
    def seconds(self) -> float:
        ends = [s[2] for s in self.streams if s[2] is not None]
        return max(ends) - min(s[0] for s in self.streams) if ends else float("nan")

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


def run_streams(port: int, bodies: list[dict]) -> Round:
    captures = post_streams("127.0.0.1", port, CHAT, bodies)
    streams = []
    for capture in captures:
        status, events = sse_events(capture)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {b''.join(d for _, d in capture.reads)[:300]!r}")
        failed = [frame for _, frame in events if "error" in frame]
        if failed:
            raise RuntimeError(f"a stream failed: {failed[0]}")
        times = [at for at, frame in events
                 if frame.get("choices") and (frame["choices"][0].get("delta") or {}).get(
                     "content")]
        streams.append((capture.sent, times[0] if times else None,
                        times[-1] if times else None, len(times)))
    return Round(streams)


def chat_bodies(model: str, n: int, max_tokens: int, salt: str = "") -> list[dict]:
    return [{"model": model, "stream": True, "temperature": 0, "max_tokens": max_tokens,
             "logit_bias": NEVER_ENDS,
             "messages": [{"role": "user", "content": f"Tell me about {TOPICS[i % 8]}.{salt}"}]}
            for i in range(n)]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its children (its workers)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(c) for c in children]
    except OSError:
        pass
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


# -- the servers -----------------------------------------------------------------------------


def parlance_gateway(upstream_port: int, data_dir: str) -> Server:
    port = free_port()
    return Server("parlance", [sys.executable, "-m", "parlance", "serve", "--port", str(port),
                               "--upstream", f"http://127.0.0.1:{upstream_port}",
                               "--data-dir", data_dir, "--max-connections", "4096",
                               "--request-timeout", "3600"], port)


def llama_server(gguf: Path) -> Server:
    port = free_port()
    return Server("llama-server", [
        str(llama_server_binary()), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
        "-np", str(SLOTS), "-c", str(SLOTS * CTX_PER_SLOT), "-t", "2", "-a", DEFAULT_MODEL],
        port)


def synthetic_upstream(tokens: int) -> Server:
    port = free_port()
    program = ROOT / "tests" / "support" / "synthetic_upstream.py"
    return Server("synthetic", [sys.executable, str(program),
                                "--port", str(port), "--tokens", str(tokens),
                                "--vary", "100"], port)


def litellm_python() -> Path:
    """LiteLLM's proxy in a venv of its own (installed on first use)."""
    python = LITELLM_VENV / "bin" / "python"
    if (LITELLM_VENV / "bin" / "litellm").exists():
        return python
    console.print(f"installing litellm[proxy] into {LITELLM_VENV} (once) …")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", "litellm[proxy]"],
                              capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise PeerUnavailable(f"litellm[proxy] could not be installed: {exc}") from exc
    if done.returncode != 0 or not (LITELLM_VENV / "bin" / "litellm").exists():
        raise PeerUnavailable("litellm[proxy] could not be installed: "
                              f"{(done.stderr or done.stdout)[-600:]}")
    return python


def litellm_proxy(upstream_port: int, workdir: Path) -> Server:
    python = litellm_python()
    config = workdir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: synthetic\n"
        "    litellm_params:\n"
        "      model: openai/synthetic\n"
        f"      api_base: http://127.0.0.1:{upstream_port}/v1\n"
        "      api_key: none\n"
        "litellm_settings:\n"
        "  drop_params: true\n"
        "  set_verbose: false\n")
    port = free_port()
    # No key on either relay (Parlance runs without --api-key here too)
    env = {**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False",
           "DISABLE_SCHEMA_UPDATE": "true",
           "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true"}
    return Server("litellm", [str(python.parent / "litellm"), "--config", str(config),
                              "--port", str(port), "--host", "127.0.0.1",
                              "--num_workers", "1"], port, env=env)


# -- (a) overhead ------------------------------------------------------------------------------


def bare_relay(upstream_port: int) -> Server:
    port = free_port()
    return Server("bare-relay", [sys.executable, str(ROOT / "bench" / "bare_relay.py"),
                                 str(port), str(upstream_port)], port)


DIRECT, BARE, PARLANCE = "llama-server", "bare relay → llama-server", "parlance → llama-server"


def overhead(runs: int, tokens: int) -> None:
    console.rule("(a) overhead: llama-server direct, through a bare relay, through Parlance")
    gguf = builtin_registry()[DEFAULT_MODEL].locate()
    try:
        backend = llama_server(gguf)
    except PeerUnavailable as exc:
        console.print(f"[yellow]skipped[/]: {exc}")
        return
    with tempfile.TemporaryDirectory() as data, backend as server, \
            bare_relay(server.port) as bare, parlance_gateway(server.port, data) as gateway:
        sides = [(DIRECT, server.port), (BARE, bare.port), (PARLANCE, gateway.port)]
        for _, port in sides:  # warm every path
            run_streams(port, chat_bodies(DEFAULT_MODEL, SLOTS, 8, f" (warm {port})"))
        assert gateway.proc is not None
        results: dict[tuple[str, int], list[Round]] = {}
        # The gateway's CPU seconds and the tokens it relayed, summed over runs (/proc's
        # clock ticks are 10 ms: one run's figure alone would be coarse)
        relay_cpu: dict[int, list[float]] = {}
        for level in (1, 8):
            for run in range(runs):
                # each run starts with another side, so no side always follows the same one
                for side, port in sides[run % 3:] + sides[:run % 3]:
                    time.sleep(0.5)
                    before = cpu_seconds(gateway.proc.pid)
                    # prompts of their own: no side meets another's cached prompt
                    measured = run_streams(port, chat_bodies(DEFAULT_MODEL, level, tokens,
                                                             f" ({side[0]}{run})"))
                    results.setdefault((side, level), []).append(measured)
                    if port == gateway.port:
                        total = relay_cpu.setdefault(level, [0.0, 0.0])
                        total[0] += cpu_seconds(gateway.proc.pid) - before
                        total[1] += measured.tokens
    table = Table("side", "streams", "tok/s (aggregate, median run)", "TTFT p50 ms",
                  "TTFT mean ms", "tokens")
    for (side, level), rounds in results.items():
        picked = sorted(rounds, key=lambda r: r.rate)[len(rounds) // 2]
        table.add_row(side, str(level), f"{picked.rate:.1f}", f"{_ttft_p50(rounds):.1f}",
                      f"{_ttft_mean(rounds):.1f}", str(picked.tokens))
    console.print(table)
    ratios = Table("through", "streams", "tok/s ratio: median (range) of runs",
                   "TTFT added ms: median (range) of runs", "target")
    for level in (1, 8):
        direct = results[DIRECT, level]
        for side in (BARE, PARLANCE):
            through = results[side, level]
            # Each run's sides ran back to back: ratios and differences run by run cancel
            # the drift between runs; their spread is what one run can tell.
            rate = [t.rate / d.rate for d, t in zip(direct, through, strict=True)]
            added = [_ttft_mean([t]) - _ttft_mean([d]) for d, t in zip(direct, through,
                                                                         strict=True)]
            verdict = "" if side == BARE else (
                f"{'meets' if statistics.median(rate) >= 0.97 else 'MISSES'} >= 0.97x, "
                f"{'meets' if statistics.median(added) <= 5 else 'MISSES'} <= +5 ms")
            ratios.add_row(side, str(level),
                           f"{statistics.median(rate):.3f}x ({min(rate):.3f}–{max(rate):.3f})",
                           f"{statistics.median(added):+.1f} ({min(added):+.1f}–{max(added):+.1f})",
                           verdict)
    console.print(ratios)
    for level in (1, 8):
        spent, relayed = relay_cpu[level]
        console.print(f"{level} stream(s): the gateway spent {spent / relayed * 1e6:.0f} µs of "
                      "CPU per relayed token (/proc's tick-sampled clock)")
    console.print("The bare relay (bench/bare_relay.py) does the least any Python relay must: "
                  "the same machine's cost of relaying at all, for scale. Everything shares 2 "
                  "cores here, so a relay's CPU is taken from llama-server's decoding threads. "
                  "At 8 streams llama-server evaluates the prompts in groups (those that arrived "
                  "before its next step, then the rest), so a run's TTFT moves by some 100 ms "
                  "with the grouping, whichever side it is.")


def _ttft_p50(rounds: list[Round]) -> float:
    return statistics.median((s[1] - s[0]) * 1000 for r in rounds for s in r.streams
                             if s[1] is not None)


def _ttft_mean(rounds: list[Round]) -> float:
    return statistics.fmean((s[1] - s[0]) * 1000 for r in rounds for s in r.streams
                            if s[1] is not None)


# -- (b) capacity ------------------------------------------------------------------------------


def relay_round(server: Server, streams: int, model: str) -> tuple[float, float, int]:
    """(tokens/s, tokens per CPU-second of the relay, tokens) of one round."""
    assert server.proc is not None
    before = cpu_seconds(server.proc.pid)
    result = run_streams(server.port, [
        {"model": model, "stream": True, "messages": [{"role": "user", "content": f"go {i}"}]}
        for i in range(streams)])
    cpu = cpu_seconds(server.proc.pid) - before
    return result.rate, result.tokens / cpu if cpu else float("nan"), result.tokens


def capacity(runs: int, tokens: int, streams: int) -> None:
    console.rule("(b) gateway capacity: relaying a synthetic upstream")
    with tempfile.TemporaryDirectory() as tmp, synthetic_upstream(tokens) as upstream:
        relays: dict[str, Server] = {}
        stack = []
        gateway = parlance_gateway(upstream.port, tmp)
        relays["parlance"] = gateway.__enter__()
        stack.append(gateway)
        try:
            proxy = litellm_proxy(upstream.port, Path(tmp))
            relays["litellm"] = proxy.__enter__()
            stack.append(proxy)
        except PeerUnavailable as exc:
            console.print(f"[yellow]litellm skipped[/]: {exc}")
        try:
            for relay in relays.values():  # warm up
                relay_round(relay, 2, "synthetic")
            results: dict[str, list[tuple[float, float, int]]] = {}
            for run in range(runs):
                order = list(relays.items())
                for name, relay in (order if run % 2 == 0 else reversed(order)):
                    time.sleep(0.5)
                    results.setdefault(name, []).append(relay_round(relay, streams,
                                                                    "synthetic"))
        finally:
            for server in reversed(stack):
                server.__exit__()
    table = Table("relay", "streams", "tokens/s", "tokens per CPU-second (per core)", "tokens")
    picked = {}
    for name, rounds in results.items():
        ordered = sorted(rounds)
        picked[name] = ordered[len(ordered) // 2]
        rate, per_core, count = picked[name]
        table.add_row(name, str(streams), f"{rate:,.0f}", f"{per_core:,.0f}", str(count))
    console.print(table)
    if "litellm" in picked:
        ratio = picked["parlance"][0] / picked["litellm"][0]
        per_core = picked["parlance"][1] / picked["litellm"][1]
        console.print(f"Parlance relays {ratio:.1f}x LiteLLM's tokens/s "
                      f"({'meets' if ratio >= 3 else 'MISSES'} >= 3x), "
                      f"{per_core:.1f}x per core")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--tokens", type=int, default=384, help="per stream, overhead part")
    parser.add_argument("--relay-tokens", type=int, default=2000, help="per stream, capacity")
    parser.add_argument("--relay-streams", type=int, default=16)
    parser.add_argument("--only", choices=("overhead", "capacity"))
    args = parser.parse_args()
    stop_servers_on_sigterm()
    if args.only != "capacity":
        overhead(args.runs, args.tokens)
    if args.only != "overhead":
        capacity(args.runs, args.relay_tokens, args.relay_streams)


if __name__ == "__main__":
    main()

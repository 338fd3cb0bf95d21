"""Prompt processing: tokens/s of a cold prompt at 2k, 8k and 16k tokens, Parlance beside
the raw engine and llama-server, in one run, with the ratios.

An agent's first turn is all prompt processing (Claude Code's first request is ~20k
tokens), so this is the cost a cold agent feels. Sides, each timed on the same text (a
fresh first word per request, so nothing is cached), sides interleaved and their order
alternated, median of `--runs`:

* `parlance`: `parlance serve` (the default model, 2 threads, one slot), a streamed
  `/v1/completions` of one token; the time to its first token;
* `parlance-stock-q4_1` (with `--gemm`): the same with `PARLANCE_Q4_1_GEMM=off`, the
  Q4_1 prompt GEMM patch (`patches/llama.cpp-q4_1-gemm.patch`) switched off, so the
  ratio is that patch's alone in the same run;
* `parlance-f32-attention` (with `--attention`): the same with `PARLANCE_FA_BF16=0`,
  the attention kernel's BF16 products switched off (F32, as stock), so the ratio is
  theirs alone;
* `parlance-cpu-<variant>` (with `--cpu-variants haswell,x64,...`): the same with
  `PARLANCE_GGML_CPU=<variant>`, ggml's CPU backend built for that lower x86 feature
  level (AVX2, baseline, ...) instead of the best this CPU runs: what a CPU with only
  those features gets, measured on this one;
* `raw`: llama-cpp-python's `Llama.eval` in this process on the same build (same
  threads, 512-token batches, flash attention): the engine with no server around it;
* `llama-server`: built from the same llama.cpp without Parlance's patches
  (`bench/peers.py`), one slot, the same context.

It prints each side's tokens/s per size and the ratios parlance / llama-server and
parlance / raw (the issue's target: >= 2.0x llama-server at every size). Times depend
on load: run it on a quiet machine; the load average is printed before and after.

    python bench/prompt_processing.py [--sizes 2048,8192,16384] [--runs 3] [--gemm]
        [--attention] [--cpu-variants haswell]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agent_turns import (
    LLAMA,
    PARLANCE,
    THREADS,
    completion,
    llama_server,
    parlance_server,
    stream,
    text_of_tokens,
)
from peers import PeerUnavailable
from servers import Server, free_port, stop_servers_on_sigterm

from parlance.models.registry import DEFAULT_MODEL, builtin_registry

RAW = "raw"
# the sides that switch one patch's speed-up off, by flag: (side, environment)
SWITCHED_OFF = {
    "gemm": ("parlance-stock-q4_1", {"PARLANCE_Q4_1_GEMM": "off"}),
    "attention": ("parlance-f32-attention", {"PARLANCE_FA_BF16": "0"}),
}
VARIANT_SIDE = "parlance-cpu-"  # + a CPU backend variant's name
BATCH = 512


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def raw_timer(model: Path, ctx: int) -> Callable[[list[int]], float]:
    """Seconds for llama-cpp-python to evaluate `tokens` from an empty cache."""
    import llama_cpp

    llm = llama_cpp.Llama(str(model), n_ctx=ctx, n_batch=BATCH, n_ubatch=BATCH,
                          n_threads=THREADS, n_threads_batch=THREADS, flash_attn=True,
                          verbose=False)

    llm.eval(llm.tokenize(b"warm up: the first batch allocates the graph"))

    def timed(tokens: list[int]) -> float:
        llm.reset()  # eval then drops the cache from position 0 on
        started = time.perf_counter()
        llm.eval(tokens)
        return time.perf_counter() - started

    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2048,8192,16384",
                        help="prompt sizes in tokens, comma-separated")
    parser.add_argument("--runs", type=int, default=3, help="timings per side and size")
    parser.add_argument("--gemm", action="store_true",
                        help="add Parlance with the Q4_1 prompt GEMM switched off")
    parser.add_argument("--attention", action="store_true",
                        help="add Parlance with the attention's BF16 products switched off")
    parser.add_argument("--cpu-variants", default="",
                        help="add Parlance on these CPU backend variants, comma-separated")
    parser.add_argument("--no-raw", action="store_true", help="skip the in-process engine")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ctx = max(sizes) + 512
    stop_servers_on_sigterm()
    model = builtin_registry()[DEFAULT_MODEL].locate()
    print(f"load average before: {load()}", flush=True)
    times: dict[tuple[str, int], list[float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="prompt-processing-") as tmp:
            servers: dict[str, Server] = {
                PARLANCE: parlance_server(free_port(), Path(tmp) / "a", 1, ctx),
                LLAMA: llama_server(free_port(), model, 1, ctx)}
            for flag, (side, env) in SWITCHED_OFF.items():
                if getattr(args, flag):
                    switched = parlance_server(free_port(), Path(tmp) / side, 1, ctx)
                    switched.env = {**os.environ, **env}
                    servers[side] = switched
            for variant in filter(None, args.cpu_variants.split(",")):
                side = f"{VARIANT_SIDE}{variant}"
                server = parlance_server(free_port(), Path(tmp) / side, 1, ctx)
                server.env = {**os.environ, "PARLANCE_GGML_CPU": variant}
                servers[side] = server
            for server in servers.values():
                server.__enter__()
            try:
                for side, server in servers.items():  # each server's first batch, untimed
                    stream(server, "/v1/completions", completion(f"{side} warm up", 1), "warm")
                raw = None if args.no_raw else raw_timer(model, ctx)
                for size in sizes:
                    text = text_of_tokens(servers[LLAMA], size)
                    for run in range(args.runs):
                        sides = list(servers) + ([] if raw is None else [RAW])
                        if run % 2:
                            sides.reverse()
                        for side in sides:
                            prompt = f"{side}{time.time_ns()}: {text}"
                            if side == RAW:
                                tokens = raw_tokens(servers[LLAMA], prompt)
                                seconds = raw(tokens) if raw else 0.0
                                n = len(tokens)
                            else:
                                measured = stream(servers[side], "/v1/completions",
                                                  completion(prompt, 1), f"{size}")
                                seconds, n = measured.ttft, measured.evaluated
                            times.setdefault((side, size), []).append(n / seconds)
                            print(f"  {size:>6} run {run + 1}  {side:<20} {n:>6} tokens "
                                  f"{seconds:8.2f} s  {n / seconds:7.1f} tok/s", flush=True)
            finally:
                for server in servers.values():
                    server.__exit__()
    except PeerUnavailable as exc:
        sys.exit(f"unavailable: {exc}")
    print(f"load average after: {load()}")
    report(times, sizes)


def raw_tokens(server: Server, text: str) -> list[int]:
    """The prompt's tokens (llama-server's tokenizer: the same GGUF), with BOS as served."""
    import httpx

    response = httpx.post(f"{server.base}/tokenize", json={"content": text, "add_special": True},
                          timeout=120)
    return [int(t) for t in response.json()["tokens"]]


def report(times: dict[tuple[str, int], list[float]], sizes: list[int]) -> None:
    sides = sorted({side for side, _ in times}, key=lambda s: (s != PARLANCE, s))
    switched = [(flag, side) for flag, (side, _) in SWITCHED_OFF.items() if side in sides]
    variants = [side for side in sides if side.startswith(VARIANT_SIDE)]
    print(f"\nprompt tokens/s, median of {len(next(iter(times.values())))} "
          f"(2 threads, {BATCH}-token batches)")
    print(f"  {'size':>6}  " + "  ".join(f"{s:>20}" for s in sides)
          + "  parlance/llama-server  parlance/raw"
          + "".join(f"  {flag + ' on/off':>16}" for flag, _ in switched)
          + "".join(f"  {side[len(VARIANT_SIDE):] + '/llama-server':>24}" for side in variants))
    for size in sizes:
        median = {s: statistics.median(times[(s, size)]) for s in sides if (s, size) in times}
        row = f"  {size:>6}  " + "  ".join(f"{median.get(s, 0.0):>20.1f}" for s in sides)
        row += f"  {median[PARLANCE] / median[LLAMA]:>20.2f}x"
        row += f"  {median[PARLANCE] / median[RAW]:>11.2f}x" if RAW in median else f"  {'-':>12}"
        for _, side in switched:
            row += f"  {median[PARLANCE] / median[side]:>15.2f}x"
        for side in variants:
            row += f"  {median[side] / median[LLAMA]:>23.2f}x"
        print(row)


if __name__ == "__main__":
    main()

"""Embeddings throughput: Parlance's `/v1/embeddings` vs llama-server's, side by side.

What is measured
----------------
One request embeds a batch of 64 short texts (8 to 14 words each); inputs per second
is 64 / the request's wall time, seen from the client (HTTP and JSON included). Both
servers load the same GGUF (the default model, SmolLM2-135M-Instruct, a causal model)
with the same threads, slots and per-slot context:

* **parlance** – `parlance serve --threads T --parallel P --ctx-size C`; its embedding
  context pools with the model's pooling, mean for a causal model that declares none.
* **llama-server** – llama.cpp's C++ server from `bench/peers.py`, `--embeddings
  --pooling mean` (the same pooling: without it llama-server refuses a causal model's
  OpenAI embeddings), `-t T -np P -c P*C`, batch and micro-batch at its defaults
  (2048 / 512; Parlance's embedding batch is 512 tokens too).

Both answer L2-normalized vectors. A fast wrong answer must not pass, so the bench
also checks each side's batched vectors against a reference: llama-server's vector for
the text sent alone (on a single text the two servers agree to the bit), for a sample
of the texts. Parlance's batched vectors agree with it (cosine > 0.999: llama.cpp's
matmul kernels round differently by batch size); llama-server's own batched vectors
did not on this build (cosine 0.75-0.86 for most texts, exactly 1 for a few: its
batched mean pooling of a causal model mixes something up), which is printed too.

Why it is set up this way
-------------------------
* The machine has 2 cores: both servers are up, but only one is asked at a time, and
  the order alternates every round so drift hits both alike; the median of the rounds
  is kept. The headline is parlance inputs/s ÷ llama-server inputs/s, target ≥ 1.0.
* Every request is the same batch, so a prompt cache cannot help either side
  (embedding contexts keep nothing between batches anyway).

Run: `.venv/bin/python bench/embeddings.py [--rounds 5] [--inputs 64] [--threads 2]`.
Exit code is 0 whatever the result; PASS/FAIL is printed against the target.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import PeerUnavailable, llama_server_binary  # noqa: E402
from servers import Server, free_port, stop_servers_on_sigterm  # noqa: E402

from parlance.models.registry import DEFAULT_MODEL, builtin_registry  # noqa: E402

TARGET = 1.0
SUBJECTS = ["the old lighthouse", "a quiet library", "my neighbour's garden", "the night train",
            "a small bakery", "the city council", "our science teacher", "the mountain road"]
VERBS = ["closed early", "was painted blue", "won an award", "needs more volunteers",
         "opened a new branch", "stayed busy all week", "lost its power", "moved downtown"]
TAILS = ["after the storm", "last Tuesday", "for the holidays", "despite the rain",
         "this spring", "according to the paper", "", "once again"]


def texts(count: int) -> list[str]:
    """`count` distinct short sentences (deterministic)."""
    out = []
    for i in range(count):
        s, v, t = SUBJECTS[i % 8], VERBS[(i // 8) % 8], TAILS[(i * 3 + i // 64) % 8]
        out.append(f"Yesterday {s} {v} {t}.".replace("  ", " "))
    return out


def parlance_command(port: int, args: argparse.Namespace) -> list[str]:
    return [sys.executable, "-m", "parlance", "serve", "--model", DEFAULT_MODEL,
            "--port", str(port), "--threads", str(args.threads),
            "--parallel", str(args.parallel), "--ctx-size", str(args.ctx)]


def llama_server_command(port: int, model: Path, args: argparse.Namespace) -> list[str]:
    slots = args.peer_parallel or args.parallel
    return [str(llama_server_binary()), "-m", str(model), "--port", str(port),
            "-t", str(args.threads), "-np", str(slots),
            "-c", str(slots * args.ctx), "--embeddings", "--pooling", "mean",
            "--no-webui"]


def embed(client: httpx.Client, base: str, batch: list[str]) -> tuple[float, list[list[float]]]:
    started = time.perf_counter()
    response = client.post(f"{base}/v1/embeddings",
                           json={"model": DEFAULT_MODEL, "input": batch,
                                 "encoding_format": "float"})
    seconds = time.perf_counter() - started
    response.raise_for_status()
    data = sorted(response.json()["data"], key=lambda d: d["index"])
    return seconds, [d["embedding"] for d in data]


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--inputs", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--ctx", type=int, default=4096, help="context per slot")
    parser.add_argument("--peer-parallel", type=int, default=None,
                        help="llama-server's -np (default: the same slots as Parlance)")
    parser.add_argument("--sample", type=int, default=8,
                        help="texts checked against llama-server's single-text vectors")
    args = parser.parse_args()
    stop_servers_on_sigterm()
    model = builtin_registry()[DEFAULT_MODEL].locate()
    batch = texts(args.inputs)
    try:
        binary = llama_server_binary()
    except PeerUnavailable as exc:
        sys.exit(f"llama-server unavailable: {exc}")
    print(f"model {model.name}; {args.inputs} inputs per request; threads {args.threads}, "
          f"slots {args.parallel}, ctx {args.ctx}/slot; llama-server {binary}")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    seconds: dict[str, list[float]] = {"parlance": [], "llama-server": []}
    vectors: dict[str, list[list[float]]] = {}
    with ExitStack() as stack, httpx.Client(timeout=600) as client:
        bases = {}
        for name, command in (("parlance", parlance_command(free_port(), args)),
                              ("llama-server", llama_server_command(free_port(), model, args))):
            port = int(command[command.index("--port") + 1])
            bases[name] = stack.enter_context(Server(name, command, port)).base
        for name, base in bases.items():  # warm up (Parlance makes its context on first use)
            vectors[name] = embed(client, base, batch)[1]
        step = max(1, len(batch) // args.sample)
        sample = list(range(0, len(batch), step))[:args.sample]
        reference = {i: embed(client, bases["llama-server"], [batch[i]])[1][0] for i in sample}
        for round_ in range(args.rounds):
            order = list(bases) if round_ % 2 == 0 else list(reversed(bases))
            for name in order:
                time.sleep(1.0)  # let the other side's threads wind down
                spent, _ = embed(client, bases[name], batch)
                seconds[name].append(spent)
                print(f"round {round_ + 1} {name:>12}: {spent:6.3f} s  "
                      f"{args.inputs / spent:7.1f} inputs/s", flush=True)
    rates = {name: args.inputs / statistics.median(s) for name, s in seconds.items()}
    print()
    print(f"{'side':>12}  {'inputs/s (median)':>18}")
    for name, rate in rates.items():
        print(f"{name:>12}  {rate:18.1f}")
    ratio = rates["parlance"] / rates["llama-server"]
    verdict = "PASS" if ratio >= TARGET else "FAIL"
    print(f"\nparlance / llama-server inputs/s: {ratio:.2f}x (target >= {TARGET:.1f}x) "
          f"{verdict}")
    for name in seconds:
        agreement = [cosine(vectors[name][i], reference[i]) for i in sample]
        print(f"{name:>12} batched vs single-text reference ({len(sample)} texts): cosine "
              f"min {min(agreement):.6f}, mean {statistics.fmean(agreement):.6f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

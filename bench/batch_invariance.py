"""Batch-invariant greedy decoding: do answers repeat, and what does it cost?

Parlance's llama.cpp context keeps f16 keys and bf16 values (`model.INVARIANT_KV`), so
ggml's CPU flash attention always takes its plain kernel and a token's logits do not
depend on the batch. This compares it with llama.cpp's default cache types (f16/f16,
`ContextSettings(batch_invariant=False)`), and llama-server (same ggml) beside:

* **identical answers** – each of `--prompts` prompts of ~250 tokens, greedy, sent cold
  (alone, empty cache), warm (again, its prefix cached) and batched (cold, beside 3
  other requests decoding): how many prompts got one answer all three times. Through
  Parlance's engine (4 slots) and through llama-server (`-np 4`) as it comes, and with
  Parlance's layout (`-no-kvu -ctv bf16`: a KV stream per slot, bf16 values).
* **cost** – prompt tokens/s (a 1024-token prompt alone, 512-token batches) and decode
  tokens/s at 1 and 8 streams (each stream ~600 tokens into its context), raw
  `llama_decode` loops; the two cache layouts measured alternately, median of
  `--rounds`, and the ratio invariant/default.
* **quality** – the mean negative log-likelihood of each next token of this repository's
  README (its first 2048 tokens), under both layouts: bf16 values must not make the
  model worse.

Run: `.venv/bin/python bench/batch_invariance.py` (`--no-peer` skips llama-server).
The counts and the likelihood do not depend on the machine's load; the rates do:
read them on a quiet machine, with the load average printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import llama_cpp
from peers import PeerUnavailable, llama_server_binary
from servers import Server, free_port, stop_servers_on_sigterm

from parlance.core.events import Finish, TextDelta
from parlance.core.request import GenerationRequest, SamplingParams, TextInput
from parlance.engines.llamacpp import LlamaCppEngine
from parlance.engines.llamacpp.batch import Batch
from parlance.engines.llamacpp.logprobs import log_softmax_row
from parlance.engines.llamacpp.model import ContextSettings, LlamaModel
from parlance.models.registry import DEFAULT_MODEL, builtin_registry

PATH = builtin_registry()[DEFAULT_MODEL].locate()
README = Path(__file__).resolve().parents[1] / "README.md"
THREADS = 2
SLOTS = 4
NEW_TOKENS = 64
WORDS = ("river", "compiler", "lantern", "harvest", "ledger", "orbit", "meadow", "cipher",
         "anchor", "quartz", "tundra", "violin", "granite", "saffron", "beacon", "thimble")


def prompt(seed: int) -> str:
    """~250 tokens of a made-up report, different for each seed."""
    rng = random.Random(seed)
    lines = [f"Item {i}: the {rng.choice(WORDS)} near the {rng.choice(WORDS)} was "
             f"{rng.choice(('found', 'lost', 'sold', 'moved'))} on day {rng.randint(1, 90)}."
             for i in range(14)]
    return f"Report {seed}.\n" + "\n".join(lines) + "\nSummary of the report:"


# -- identical answers ------------------------------------------------------------------


@dataclass
class Counts:
    prompts: int = 0
    cold_warm: int = 0
    warm_batched: int = 0
    all_three: int = 0

    def add(self, cold: object, warm: object, batched: object) -> None:
        self.prompts += 1
        self.cold_warm += cold == warm
        self.warm_batched += warm == batched
        self.all_three += cold == warm == batched

    def __str__(self) -> str:
        return (f"one answer for {self.all_three}/{self.prompts} prompts "
                f"(cold = warm {self.cold_warm}, warm = batched {self.warm_batched})")


def request(text: str, max_tokens: int) -> GenerationRequest:
    return GenerationRequest(model=DEFAULT_MODEL, prompts=(TextInput(text=text),),
                             sampling=SamplingParams(temperature=0.0), max_tokens=max_tokens)


async def engine_answer(engine: LlamaCppEngine, text: str) -> tuple[int, ...] | None:
    generation = await engine.start(request(text, NEW_TOKENS))
    finishes = [e.token_ids async for e in generation if isinstance(e, Finish)]
    return finishes[0] if finishes else None


async def engine_counts(invariant: bool, prompts: int) -> Counts:
    settings = ContextSettings(n_ctx=1024, n_threads=THREADS, parallel=SLOTS,
                               batch_invariant=invariant)
    engine = await asyncio.to_thread(LlamaCppEngine.load, PATH, settings)
    counts = Counts()
    try:
        for seed in range(prompts):
            await engine.clear_cache()
            cold = await engine_answer(engine, prompt(seed))
            warm = await engine_answer(engine, prompt(seed))
            await engine.clear_cache()
            others = [await engine.start(request(prompt(1000 + k), 4 * NEW_TOKENS))
                      for k in range(SLOTS - 1)]
            for other in others:  # each past its first token: decoding beside
                async for event in other:
                    if isinstance(event, TextDelta):
                        break
            batched = await engine_answer(engine, prompt(seed))
            for other in others:
                other.cancel()
            counts.add(cold, warm, batched)
    finally:
        await engine.aclose()
    return counts


def server_answer(base: str, text: str, *, cache: bool, n_predict: int = NEW_TOKENS) -> str:
    body = {"prompt": text, "n_predict": n_predict, "temperature": 0, "cache_prompt": cache}
    response = httpx.post(f"{base}/completion", json=body, timeout=600.0)
    response.raise_for_status()
    return str(response.json()["content"])


def server_counts(extra: list[str], prompts: int) -> Counts:
    port = free_port()
    command = [str(llama_server_binary()), "-m", str(PATH), "--port", str(port),
               "-t", str(THREADS), "-np", str(SLOTS), "-c", str(SLOTS * 1024), "--no-webui",
               "-fa", "on", *extra]
    counts = Counts()
    with Server("llama-server", command, port) as server, ThreadPoolExecutor(SLOTS) as pool:
        for seed in range(prompts):
            cold = server_answer(server.base, prompt(seed), cache=False)
            warm = server_answer(server.base, prompt(seed), cache=True)
            others = [pool.submit(server_answer, server.base, prompt(1000 + k), cache=False,
                                  n_predict=4 * NEW_TOKENS) for k in range(SLOTS - 1)]
            time.sleep(0.5)  # the others are decoding by now on any machine
            batched = server_answer(server.base, prompt(seed), cache=False)
            for other in others:
                other.result()
            counts.add(cold, warm, batched)
    return counts


# -- cost -------------------------------------------------------------------------------


def model(invariant: bool, parallel: int) -> LlamaModel:
    return LlamaModel(PATH, ContextSettings(n_ctx=2048, n_threads=THREADS, parallel=parallel,
                                            batch_invariant=invariant))


def corpus(m: LlamaModel) -> list[int]:
    return m.tokenize(README.read_text(), add_special=True, parse_special=False)


def evaluate(m: LlamaModel, batch: Batch, seq: int, tokens: list[int], *,
             all_logits: bool = False, on_chunk: Callable[[int, int], None] | None = None,
             ) -> None:
    """Evaluate `tokens` in `seq` from position 0, a batch at a time."""
    for start in range(0, len(tokens), batch.capacity):
        batch.clear()
        end = min(len(tokens), start + batch.capacity)
        for pos in range(start, end):
            batch.add(tokens[pos], pos, seq, output=all_logits or pos == end - 1)
        if batch.decode(m.ctx) != 0:
            raise RuntimeError("llama_decode failed")
        if on_chunk:
            on_chunk(start, end)


def prefill_rate(m: LlamaModel, batch: Batch, tokens: list[int]) -> float:
    llama_cpp.llama_memory_clear(m.memory, True)
    started = time.perf_counter()
    evaluate(m, batch, 0, tokens)
    return len(tokens) / (time.perf_counter() - started)


def decode_rate(m: LlamaModel, batch: Batch, streams: int, tokens: list[int],
                steps: int) -> float:
    llama_cpp.llama_memory_clear(m.memory, True)
    evaluate(m, batch, 0, tokens[:600])
    for seq in range(1, streams):  # the same context in every stream, copied
        llama_cpp.llama_memory_seq_cp(m.memory, 0, seq, -1, -1)
    started = time.perf_counter()
    for step in range(steps):
        batch.clear()
        for seq in range(streams):
            batch.add(tokens[700 + step], 600 + step, seq, output=True)
        if batch.decode(m.ctx) != 0:
            raise RuntimeError("llama_decode failed")
    return streams * steps / (time.perf_counter() - started)


def mean_nll(m: LlamaModel, batch: Batch, tokens: list[int]) -> float:
    llama_cpp.llama_memory_clear(m.memory, True)
    losses: list[float] = []

    def score(start: int, end: int) -> None:
        for pos in range(start, min(end, len(tokens) - 1)):
            losses.append(-float(log_softmax_row(m.logits(pos - start))[tokens[pos + 1]]))

    evaluate(m, batch, 0, tokens, all_logits=True, on_chunk=score)
    return statistics.fmean(losses)


def cost(rounds: int) -> None:
    models = {name: model(invariant, 8) for name, invariant in
              (("default", False), ("invariant", True))}
    batches = {name: Batch(512) for name in models}
    tokens = corpus(models["default"])
    cases = {"prompt tokens/s": lambda m, b: prefill_rate(m, b, tokens[:1024]),
             "decode tokens/s, 1 stream": lambda m, b: decode_rate(m, b, 1, tokens, 64),
             "decode tokens/s, 8 streams": lambda m, b: decode_rate(m, b, 8, tokens, 32)}
    print(f"cost (median of {rounds} alternating rounds, load average "
          f"{os.getloadavg()[0]:.1f} at the start):")
    for label, measure in cases.items():
        rates: dict[str, list[float]] = {name: [] for name in models}
        for _ in range(rounds):
            for name, m in models.items():
                rates[name].append(measure(m, batches[name]))
        default, invariant = (statistics.median(rates[n]) for n in ("default", "invariant"))
        print(f"  {label}: default {default:.1f}, invariant {invariant:.1f}, "
              f"ratio {invariant / default:.3f}")
    print(f"  load average at the end {os.getloadavg()[0]:.1f}")
    text = tokens[:2048]
    nll = {name: mean_nll(m, batches[name], text) for name, m in models.items()}
    print(f"quality: mean NLL of {len(text) - 1} README tokens: default "
          f"{nll['default']:.4f}, invariant {nll['invariant']:.4f}")
    for name in models:
        batches[name].free()
        models[name].close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-peer", action="store_true", help="skip llama-server")
    parser.add_argument("--only", choices=("answers", "cost"), help="one half of the bench")
    args = parser.parse_args()
    stop_servers_on_sigterm()
    if args.only != "cost":
        print(f"identical answers ({args.prompts} prompts, greedy, {NEW_TOKENS} tokens; "
              "cold / warm / beside 3 others):")
        for name, invariant in (("Parlance, invariant", True), ("Parlance, f16/f16", False)):
            print(f"  {name}: {asyncio.run(engine_counts(invariant, args.prompts))}")
        if not args.no_peer:
            for name, extra in (("llama-server default", []),
                                ("llama-server -no-kvu -ctv bf16",
                                 ["-no-kvu", "-ctv", "bf16"])):
                try:
                    print(f"  {name}: {server_counts(extra, args.prompts)}")
                except PeerUnavailable as exc:
                    print(f"  {name}: unavailable ({exc})")
    if args.only != "answers":
        cost(args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())

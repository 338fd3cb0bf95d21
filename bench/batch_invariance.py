"""Batch-invariant greedy decoding: do answers repeat, which KV layouts make them
repeat, and what does it cost?

Parlance's batch-invariant context keeps llama.cpp's f16 keys and values and turns on the
batch-invariant attention its build patches into ggml (`invariant_attention.py`; a
layout named `f16/f16 switch` here), so a token's logits do not depend on the batch.
Without the patch it keeps q8_0 keys (`model.ONE_ROW_KERNEL_KV`), whose attention always
takes ggml's one-row kernel. This compares them with llama.cpp's default (f16/f16,
`ContextSettings(batch_invariant=False)`), other layouts, and llama-server (same ggml):

* **identical answers** – each of `--prompts` prompts of ~250 tokens, greedy, sent cold
  (alone, empty cache), warm (again, its prefix cached) and batched (cold, beside 3
  other requests decoding): how many prompts got one answer all three times. Through
  Parlance's engine (4 slots) and through llama-server (`-np 4`) as it comes, and with
  Parlance's layout (`-no-kvu -ctk q8_0`: a KV stream per slot, q8_0 keys).
* **logits** – the harness of bench/invariance_cases.py, for each of `--layouts`
  (`k/v` types, `no-fa` for attention without flash attention): one token sequence
  fed 13 ways (other prompt chunks; a prefix cached, cut, copied to another stream or
  restored into one; beside 1 or 3 others decoding or another prompt's prefill; the
  continuation verified as drafts, with rejections, beside others), each row that
  predicts the continuation compared bit for bit with the reference's (the prompt in
  one batch, then one token a step). A layout is invariant when all 13 cases match.
* **cost** – for each of `--layouts` against the first (llama.cpp's f16/f16 unless
  told): prompt tokens/s (a 1024-token prompt alone, 512-token batches) and decode
  tokens/s at 1 and 8 streams (each stream `--depth` tokens into its context, 600 unless told), raw
  `llama_decode` loops; the layouts measured alternately, median of `--rounds`, and
  the ratio to the first layout. `--clock cpu` times the decoding thread's CPU time
  with one thread instead of the wall clock with two: a busy machine then still gives
  ratios (one thread's, which are not two threads').
* **quality** – the mean negative log-likelihood of each next token of this repository's
  documentation (the README, then the pages under docs/ by name; its first
  `--nll-tokens`, 2048 unless told), under each layout: a cheaper cache type must not
  make the model worse.

Run: `.venv/bin/python bench/batch_invariance.py` (`--no-peer` skips llama-server;
`--only answers|logits|cost|quality`; `--layouts "f16/f16,q8_0/f16,f16/bf16"`: the
first is the one the others' cost is given against).
The counts, the logits and the likelihood do not depend on the machine's load; the
wall-clock rates do: read them on a quiet machine, with the load average printed beside
them.
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
from invariance_cases import Layout, LayoutModel, run_cases
from peers import PeerUnavailable, llama_server_binary
from servers import Server, free_port, stop_servers_on_sigterm

from parlance.core.events import Finish, TextDelta
from parlance.core.request import GenerationRequest, SamplingParams, TextInput
from parlance.engines.llamacpp import LlamaCppEngine, invariant_attention
from parlance.engines.llamacpp.batch import Batch
from parlance.engines.llamacpp.logprobs import log_softmax_row
from parlance.engines.llamacpp.model import ContextSettings, LlamaModel
from parlance.models.registry import DEFAULT_MODEL, builtin_registry

PATH = builtin_registry()[DEFAULT_MODEL].locate()
ROOT = Path(__file__).resolve().parents[1]
# The text the harness feeds and scores: the README, then the docs pages (the README
# alone was this corpus until it was cut down to an overview, too short for 2048 tokens)
CORPUS = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
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


Clock = Callable[[], float]
ONE_ROW = Layout("q8_0", "f16")  # model.ONE_ROW_KERNEL_KV: invariant without the patch
INVARIANT = (Layout("f16", "f16", switch=True) if invariant_attention.available()
             else ONE_ROW)  # model.INVARIANT_KV
DEFAULT = Layout("f16", "f16")  # llama.cpp's own
# What the logit harness and the cost were measured on (docs/batch-invariance.md, model.py).
LAYOUTS = (DEFAULT, INVARIANT, ONE_ROW, Layout("f16", "bf16"), Layout("bf16", "bf16"),
           Layout("q8_0", "q8_0"), Layout("f16", "q8_0"), Layout("q8_0", "bf16"),
           Layout("bf16", "f16"), Layout("f16", "f16", flash=False),
           Layout("f32", "f32", flash=False))


def layout_model(layout: Layout, parallel: int, threads: int = THREADS,
                 n_ctx: int = 2048) -> LlamaModel:
    return LayoutModel(PATH, ContextSettings(n_ctx=n_ctx, n_threads=threads,
                                             parallel=parallel), layout)


def corpus(m: LlamaModel) -> list[int]:
    text = "\n\n".join(path.read_text() for path in CORPUS)
    return m.tokenize(text, add_special=True, parse_special=False)


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


def prefill_rate(m: LlamaModel, batch: Batch, tokens: list[int], clock: Clock) -> float:
    llama_cpp.llama_memory_clear(m.memory, True)
    started = clock()
    evaluate(m, batch, 0, tokens)
    return len(tokens) / (clock() - started)


def decode_rate(m: LlamaModel, batch: Batch, streams: int, tokens: list[int],
                steps: int, clock: Clock, depth: int) -> float:
    """Tokens/s of `streams` streams decoding `depth` tokens into their contexts."""
    llama_cpp.llama_memory_clear(m.memory, True)
    evaluate(m, batch, 0, tokens[:depth])
    for seq in range(1, streams):  # the same context in every stream, copied
        llama_cpp.llama_memory_seq_cp(m.memory, 0, seq, -1, -1)
    started = clock()
    for step in range(steps):
        batch.clear()
        for seq in range(streams):
            batch.add(tokens[depth + 100 + step], depth + step, seq, output=True)
        if batch.decode(m.ctx) != 0:
            raise RuntimeError("llama_decode failed")
    return streams * steps / (clock() - started)


def mean_nll(m: LlamaModel, batch: Batch, tokens: list[int]) -> float:
    llama_cpp.llama_memory_clear(m.memory, True)
    losses: list[float] = []

    def score(start: int, end: int) -> None:
        for pos in range(start, min(end, len(tokens) - 1)):
            losses.append(-float(log_softmax_row(m.logits(pos - start))[tokens[pos + 1]]))

    evaluate(m, batch, 0, tokens, all_logits=True, on_chunk=score)
    return statistics.fmean(losses)


def cost(rounds: int, layouts: list[Layout], clock_name: str, depth: int) -> None:
    threads = 1 if clock_name == "cpu" else THREADS
    clock: Clock = time.thread_time if clock_name == "cpu" else time.perf_counter
    n_ctx = max(2048, depth + 256)
    models = {layout.name: layout_model(layout, 8, threads, n_ctx) for layout in layouts}
    batches = {name: Batch(512) for name in models}
    first = layouts[0].name
    tokens = corpus(models[first])
    tokens = tokens * (depth // len(tokens) + 2)  # a context deeper than the corpus
    cases = {"prompt tokens/s": lambda m, b: prefill_rate(m, b, tokens[:1024], clock),
             f"decode tokens/s, 1 stream, {depth} in": lambda m, b: decode_rate(
                 m, b, 1, tokens, 64, clock, depth),
             f"decode tokens/s, 8 streams, {depth} in": lambda m, b: decode_rate(
                 m, b, 8, tokens, 32, clock, depth)}
    unit = "CPU time, 1 thread" if clock_name == "cpu" else f"wall clock, {threads} threads"
    print(f"cost ({unit}; median of {rounds} alternating rounds, load average "
          f"{os.getloadavg()[0]:.1f} at the start):")
    for label, measure in cases.items():
        rates: dict[str, list[float]] = {name: [] for name in models}
        for _ in range(rounds):
            for name, m in models.items():
                with m.layout.kernels():
                    rates[name].append(measure(m, batches[name]))
        medians = {name: statistics.median(r) for name, r in rates.items()}
        print(f"  {label}: " + ", ".join(
            f"{name} {rate:.1f} ({rate / medians[first]:.3f})"
            for name, rate in medians.items()))
    print(f"  load average at the end {os.getloadavg()[0]:.1f}")
    for name in models:
        batches[name].free()
        models[name].close()


def quality(layouts: list[Layout], length: int) -> None:
    """Each layout's mean NLL over the corpus's first `length` tokens (one sequence,
    its context that long: the last chunks attend over all of it)."""
    nll = {}
    for layout in layouts:
        m = layout_model(layout, 1, n_ctx=length)
        batch = Batch(512)
        try:
            text = corpus(m)[:length]
            with layout.kernels():
                nll[layout.name] = mean_nll(m, batch, text)
        finally:
            batch.free()
            m.close()
    print(f"quality: mean NLL of {len(text) - 1} corpus tokens: " + ", ".join(
        f"{name} {value:.4f}" for name, value in nll.items()))


def logits(layouts: list[Layout], prompts: int, continuation: int, lines: int) -> None:
    print(f"logits: {continuation} rows of continuation per case, {prompts} prompt(s) of "
          f"{lines} lines, rows identical / compared (largest difference)")
    for layout in layouts:
        m = layout_model(layout, SLOTS, n_ctx=2048 if lines > 20 else 1024)
        try:
            with layout.kernels():
                outcomes = [run_cases(m, tokens(m, seed, lines),
                                      [tokens(m, 100 + k, 20) for k in range(3)],
                                      continuation)
                            for seed in range(prompts)]
        finally:
            m.close()
        invariant = all(o.same for found in outcomes for o in found.values())
        print(f"  {layout.name}: {'INVARIANT' if invariant else 'not invariant'}")
        for name in outcomes[0]:
            rows = sum(found[name].rows for found in outcomes)
            same = sum(found[name].identical for found in outcomes)
            worst = max(found[name].worst for found in outcomes)
            print(f"    {name:50} {same:4}/{rows:<4}" + (f" ({worst:.3g})" if worst else ""))


def tokens(m: LlamaModel, seed: int, lines: int) -> list[int]:
    """A report of `lines` item lines, about 17 tokens each (20: some 330 tokens, several
    64-token chunks; 90: some 1500, more cells than one 512-token batch)."""
    items = [line for k in range(0, lines, 14)
             for line in prompt(seed + 500 * k).splitlines()[1:-1]][:lines]
    text = f"Report {seed}.\n" + "\n".join(items) + "\nSummary of the report:"
    return m.tokenize(text, add_special=True, parse_special=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-peer", action="store_true", help="skip llama-server")
    parser.add_argument("--only", choices=("answers", "logits", "cost", "quality"),
                        help="one part of the bench")
    parser.add_argument("--layouts", default=",".join(x.name for x in LAYOUTS[:3]),
                        help="k/v layouts for logits and cost, the first the reference")
    parser.add_argument("--continuation", type=int, default=16,
                        help="logits: continuation tokens compared per case")
    parser.add_argument("--lines", type=int, default=20,
                        help="logits: the prompt's report lines (90 for ~1500 tokens)")
    parser.add_argument("--nll-tokens", type=int, default=2048,
                        help="quality: corpus tokens scored")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--depth", type=int, default=600,
                        help="cost: how far into its context each stream decodes")
    args = parser.parse_args()
    stop_servers_on_sigterm()
    layouts = [Layout.parse(text) for text in args.layouts.split(",")]
    if any(layout.switch for layout in layouts) and not invariant_attention.available():
        parser.error("a 'switch' layout needs Parlance's patched llama-cpp-python "
                     "(make install)")
    if args.only in (None, "answers"):
        print(f"identical answers ({args.prompts} prompts, greedy, {NEW_TOKENS} tokens; "
              "cold / warm / beside 3 others):")
        for name, invariant in (("Parlance, invariant", True), ("Parlance, f16/f16", False)):
            print(f"  {name}: {asyncio.run(engine_counts(invariant, args.prompts))}")
        if not args.no_peer:
            for name, extra in (("llama-server default", []),
                                ("llama-server -no-kvu -ctk q8_0",
                                 ["-no-kvu", "-ctk", "q8_0"])):
                try:
                    print(f"  {name}: {server_counts(extra, args.prompts)}")
                except PeerUnavailable as exc:
                    print(f"  {name}: unavailable ({exc})")
    if args.only in (None, "logits"):
        logits(layouts, min(args.prompts, 2), args.continuation, args.lines)
    if args.only in (None, "cost"):
        cost(args.rounds, layouts, args.clock, args.depth)
    if args.only in (None, "quality"):
        quality(layouts, args.nll_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())

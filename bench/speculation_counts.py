"""Where speculative decoding's time goes, counted so that the machine's load does not
change the answer.

* **rows** – what one `llama_decode` costs by its rows: one sequence `--context` tokens
  into its cache decodes 1, 2, 3, … 64 rows at once (what a draft of rows - 1 tokens
  costs to verify), then 2, 4 and 8 sequences of one or more rows each. Median per
  shape and the ratio to one row. By default one thread's CPU time (load-independent,
  but one thread's curve is not two threads'); `--wall --threads 2` on a quiet machine
  is the curve `engines/llamacpp/step_cost.py` was fitted to.
* **counts** – the engine in this process, with drafts (`--speculative ngram`) and
  without them in the same layout (`--batch-invariant`), on bench/speculative.py's
  workloads, greedy. Per emitted token: `llama_decode` calls, rows, the ubatches
  llama.cpp splits each batch into (with a KV stream per sequence it evaluates
  together only sequences of consecutive ids with the same number of rows: each
  ubatch reads every weight again), drafts made and kept by the length of the match
  they came from, the scheduler thread's CPU time inside `llama_decode`, drafting,
  verification, KV removal and the rest of a step, and the decoding's cost as
  `step_cost.py` prices it: the ratio without / with drafts is the modelled two-thread
  speedup, which no load changes.

Run: `.venv/bin/python bench/speculation_counts.py [rows|counts|both] [--tokens 128]
[--workloads code-edit,prose] [--streams 1,8] [--threads 1]`. Rates in tok/s are not
printed on purpose: bench/speculative.py measures those, on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import llama_cpp

sys.path.insert(0, str(Path(__file__).parent))
from speculative import WORKLOADS, prompts  # noqa: E402

from parlance.core.events import Finish  # noqa: E402
from parlance.core.messages import Message  # noqa: E402
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams  # noqa: E402
from parlance.engines.llamacpp import LlamaCppEngine  # noqa: E402
from parlance.engines.llamacpp.batch import Batch  # noqa: E402
from parlance.engines.llamacpp.drafting import Acceptance  # noqa: E402
from parlance.engines.llamacpp.model import ContextSettings, LlamaModel  # noqa: E402
from parlance.engines.llamacpp.scheduler import Scheduler  # noqa: E402
from parlance.engines.llamacpp.sequence import Sequence  # noqa: E402
from parlance.engines.llamacpp.speculation import (  # noqa: E402
    DEFAULT_SPECULATION,
    SequenceDraft,
    Speculator,
)
from parlance.engines.llamacpp.step_cost import StepCost, ubatches  # noqa: E402
from parlance.models.registry import DEFAULT_MODEL, builtin_registry  # noqa: E402

PATH = builtin_registry()[DEFAULT_MODEL].locate()
COST = StepCost()  # what the scheduler's planner assumes a step costs
SLOTS = 8
N_CTX = 4096


# -- rows: what a step costs by its shape ------------------------------------------------


def step_cost(model: LlamaModel, batch: Batch, shape: list[int], context: int,
              repeats: int, clock: Callable[[], float]) -> float:
    """Median seconds (CPU or wall) of one decode of `shape[s]` rows for sequence s,
    each sequence `context` tokens into its cache; the rows are removed after each."""
    seconds = []
    for _ in range(repeats):
        batch.clear()
        for seq, rows in enumerate(shape):
            for i in range(rows):
                batch.add(100 + i, context + i, seq, output=True)
        started = clock()
        if batch.decode(model.ctx) != 0:
            raise RuntimeError("llama_decode failed")
        seconds.append(clock() - started)
        for seq in range(len(shape)):
            llama_cpp.llama_memory_seq_rm(model.memory, seq, context, -1)
    return statistics.median(seconds)


def rows_table(args: argparse.Namespace) -> None:
    settings = ContextSettings(n_ctx=2048, n_threads=args.threads, parallel=SLOTS,
                               batch_invariant=not args.default_layout)
    model = LlamaModel(PATH, settings)
    batch = Batch(settings.n_batch)
    try:
        context = args.context
        prefix = model.tokenize(WORKLOADS["summary"], add_special=True,
                                parse_special=False)[:context]
        context = len(prefix)
        batch.clear()
        for pos, token in enumerate(prefix):
            batch.add(token, pos, 0, output=pos == context - 1)
        if batch.decode(model.ctx) != 0:
            raise RuntimeError("llama_decode failed")
        for seq in range(1, SLOTS):
            llama_cpp.llama_memory_seq_cp(model.memory, 0, seq, -1, -1)
        layout = "default" if args.default_layout else "batch-invariant"
        clock = time.perf_counter if args.wall else time.thread_time
        what = "wall-clock" if args.wall else "CPU"
        print(f"rows: {what} ms per llama_decode, {layout} layout, {args.threads} thread(s), "
              f"{context} tokens of context per sequence, median of {args.repeats} "
              f"(load average {os.getloadavg()[0]:.1f})")
        one = step_cost(model, batch, [1], context, args.repeats, clock)
        shapes: list[tuple[str, list[int]]] = [
            (f"1 sequence × {r} rows", [r]) for r in (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24,
                                                       32, 48, 64)]
        for n in (2, 4, 8):
            shapes += [(f"{n} sequences × {r} rows", [r] * n) for r in (1, 2, 3, 5)]
        shapes += [("2 sequences × 1, 5 rows", [1, 5]), ("4 sequences × 1, 1, 1, 5 rows",
                                                          [1, 1, 1, 5])]
        for label, shape in shapes:
            cost = step_cost(model, batch, shape, context, args.repeats, clock)
            print(f"  {label:32} {1000 * cost:8.2f} ms  {cost / one:6.2f}× one row  "
                  f"{1000 * cost / sum(shape):7.2f} ms a row")
    finally:
        batch.free()
        model.close()


# -- counts: one workload through the engine -------------------------------------------------


@dataclass
class Tally:
    decodes: int = 0
    rows: int = 0
    ubatches: int = 0
    modelled: float = 0.0  # step_cost.StepCost of the decoding rows, in one-row steps
    drafts: int = 0
    drafted: int = 0
    accepted: int = 0
    lengths: Counter[int] = field(default_factory=Counter)
    seconds: Counter[str] = field(default_factory=Counter)
    # by the length of the match the draft came from: drafts, tokens drafted, kept
    by_match: dict[int, list[int]] = field(default_factory=dict)

    def add(self, part: str, seconds: float) -> None:
        self.seconds[part] += seconds


TALLY = Tally()
_depth: list[str] = []


@contextmanager
def timed(part: str) -> Iterator[None]:
    """CPU time of `part`, exclusive of the parts timed inside it."""
    _depth.append(part)
    started = time.thread_time()
    inner_before = TALLY.seconds[f"({part} inner)"]
    try:
        yield
    finally:
        _depth.pop()
        spent = time.thread_time() - started
        inner = TALLY.seconds[f"({part} inner)"] - inner_before
        TALLY.add(part, spent - inner)
        if _depth:
            TALLY.add(f"({_depth[-1]} inner)", spent)


def wrap(owner: Any, name: str, part: str, before: Callable[..., None] | None = None) -> None:
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            before(*args, **kwargs)
        with timed(part):
            return original(*args, **kwargs)

    setattr(owner, name, wrapper)


def instrument() -> None:
    def decoding(batch: Batch, _ctx: Any) -> None:
        ptr = batch._ptr
        per_seq = Counter(ptr.seq_id[i][0] for i in range(batch.size))
        slots = sorted(per_seq)
        rows = [per_seq[s] for s in slots]
        TALLY.decodes += 1
        TALLY.rows += batch.size
        TALLY.ubatches += len(ubatches(slots, rows))
        # Decoding rows have logits; a prompt chunk's have none but its last.
        out = Counter(ptr.seq_id[i][0] for i in range(batch.size) if ptr.logits[i])
        decoding = [s for s in slots if out[s] == per_seq[s]]
        if decoding:
            TALLY.modelled += COST.batch(decoding, [per_seq[s] for s in decoding])

    def recorded(_self: Speculator, state: SequenceDraft, drafted: int,
                 accepted: int) -> None:
        TALLY.drafts += 1
        TALLY.drafted += drafted
        TALLY.accepted += accepted
        TALLY.lengths[drafted] += 1
        bucket = Acceptance.BUCKETS[Acceptance.bucket(state.match)]
        counts = TALLY.by_match.setdefault(bucket, [0, 0, 0])
        counts[0] += 1
        counts[1] += drafted
        counts[2] += accepted

    wrap(Batch, "decode", "llama_decode", decoding)
    wrap(Scheduler, "_step", "step (the rest)")
    wrap(Scheduler, "_drafts", "drafting")
    wrap(Scheduler, "_advance", "verification")
    wrap(Sequence, "sample", "sampling + events")
    wrap(Speculator, "record", "verification", recorded)
    wrap(llama_cpp, "llama_memory_seq_rm", "KV removal")


def request(text: str, tokens: int, speculative: bool) -> GenerationRequest:
    return GenerationRequest(
        model=DEFAULT_MODEL, prompts=(ChatInput(messages=(Message("user", text),)),),
        sampling=SamplingParams(temperature=0.0), max_tokens=tokens, speculative=speculative)


async def run(engine: LlamaCppEngine, workload: str, streams: int, tokens: int,
              speculative: bool) -> tuple[Tally, int, list[tuple[int, ...]]]:
    global TALLY
    await engine.clear_cache()
    TALLY = Tally()
    generations = [await engine.start(request(text, tokens, speculative))
                   for text in prompts(workload, streams)]
    answers: list[tuple[int, ...]] = []
    for generation in generations:
        answers += [e.token_ids or () async for e in generation if isinstance(e, Finish)]
    return TALLY, sum(map(len, answers)), answers


def report(label: str, tally: Tally, emitted: int) -> float:
    per = 1 / max(1, emitted)
    cpu = sum(v for k, v in tally.seconds.items() if not k.startswith("("))
    parts = ", ".join(f"{k} {1000 * v * per:.2f}" for k, v in sorted(
        tally.seconds.items(), key=lambda kv: -kv[1]) if not k.startswith("("))
    lengths = " ".join(f"{n}:{c}" for n, c in sorted(tally.lengths.items()))
    print(f"  {label}: {emitted} tokens; per token {tally.decodes * per:.3f} decodes, "
          f"{tally.rows * per:.2f} rows, {tally.ubatches * per:.3f} ubatches; "
          f"drafts {tally.drafts} ({tally.accepted}/{tally.drafted} tokens kept"
          f"{f', {100 * tally.accepted / tally.drafted:.0f}%' if tally.drafted else ''}); "
          f"lengths {lengths or '–'}")
    print(f"    CPU ms per token {1000 * cpu * per:.2f}: {parts}; "
          f"decoding's modelled cost {tally.modelled * per:.3f} one-row steps a token")
    if tally.by_match:
        print("    by match length (drafts, kept/drafted): " + ", ".join(
            f"≥{b}: {d} {k}/{t}" for b, (d, t, k) in sorted(tally.by_match.items())))
    return cpu * per


async def counts(args: argparse.Namespace) -> None:
    instrument()
    settings = ContextSettings(n_ctx=N_CTX, n_threads=args.threads, parallel=SLOTS,
                               batch_invariant=True)
    spec = (replace(DEFAULT_SPECULATION, max_draft=args.max_draft) if args.max_draft
            else DEFAULT_SPECULATION)
    engine = await asyncio.to_thread(LlamaCppEngine.load, PATH, settings, speculative=spec)
    print(f"counts: {args.threads} thread(s), greedy, up to {args.tokens} tokens "
          f"(load average {os.getloadavg()[0]:.1f})")
    try:
        for workload in args.workloads.split(","):
            for streams in (int(s) for s in args.streams.split(",")):
                print(f"{workload} × {streams}:")
                off, off_tokens, off_answers = await run(engine, workload, streams,
                                                         args.tokens, False)
                on, on_tokens, on_answers = await run(engine, workload, streams,
                                                      args.tokens, True)
                base = report("off (same layout)", off, off_tokens)
                with_ = report("drafts", on, on_tokens)
                same = "identical" if on_answers == off_answers else "DIFFERENT"
                rate_off = off_tokens / max(off.modelled, 1e-9)
                rate_on = on_tokens / max(on.modelled, 1e-9)
                print(f"    per token, off / drafts: CPU time {base / with_:.2f}×, modelled "
                      f"two-thread cost {rate_on / rate_off:.2f}× (tokens per one-row "
                      f"step: off {rate_off:.3f}, drafts {rate_on:.3f}); greedy tokens {same}")
    finally:
        await engine.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", default="both", choices=("rows", "counts", "both"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--streams", default="1,8")
    parser.add_argument("--context", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--max-draft", type=int, default=0)
    parser.add_argument("--wall", action="store_true",
                        help="rows: the wall clock (for --threads 2 on a quiet machine)")
    parser.add_argument("--default-layout", action="store_true",
                        help="rows: llama.cpp's KV layout instead of the invariant one")
    args = parser.parse_args()
    if args.what in ("rows", "both"):
        rows_table(args)
    if args.what in ("counts", "both"):
        asyncio.run(counts(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Speculative decoding: Parlance with and without n-gram drafts, side by side with
llama-server without speculation and with `--spec-type ngram-mod`, all four built on
the same llama.cpp (llama-server from llama-cpp-python's own sdist, bench/peers.py).

What runs
---------
Four servers, started first and idle while another side runs (2 cores: one side at a
time, rounds interleaved so drift hits all alike, the median round kept):

* **spec** – `parlance serve --speculative ngram` (the default where batch-invariant
  attention is on, as it is in a `make` build)
* **off** – `parlance serve --speculative off` (no drafts, batch-invariant attention),
  the side spec's greedy text must equal
* **off-stock** – `parlance serve --no-batch-invariant`: llama.cpp's own attention
  kernels; off/off-stock is what batch invariance costs
* **draft** – `parlance serve --draft-model` with SmolLM2 drafting for itself (the only
  model that ships): the draft-model mechanism end to end, its greedy text equal to
  off's and nearly every draft token accepted. A draft as large as the model
  costs as much per decode, so it is priced as if it were 20× smaller (`--draft-cost
  0.05`) or it would never draft; timed, it is slower than off, and says so.
* **llama-server** – no speculation
* **ngram-mod** – llama-server `--spec-type ngram-mod`

Workloads (chat completions, greedy, up to `--tokens` new tokens, natural ends):
code-edit (a 20-line function with one rename), json (extract records copying spans
of the input), summary (a long input), prose (free text). Each at 1 stream and at 8
streams started at once (each stream's prompt differs by one leading line).

Reported: decode tok/s per side (1 stream: after the first token; 8 streams: all
tokens / first request sent → last token), the ratios spec/off, spec/ngram-mod,
draft/off and off/off-stock (what batch invariance costs), the acceptance rates of spec
and draft from `/metrics` (accepted / drafted draft tokens: load independent), whether
spec and draft each gave off's greedy text for every stream, and the regression
guards on the server without drafts (off): single stream (prose) vs the raw llama.cpp loop of
bench/single_stream.py (≥ 0.97) and 8 streams (prose) vs llama-server (≥ 1.0).

Targets (issue: speculative decoding): code-edit single stream spec ≥ 1.6× off and
≥ 1.1× ngram-mod; no workload below 0.98× off at 1 or 8 streams (speculation is on by default);
identical output; code-edit single stream spec ≥ 1.6× llama-server.

Run on a quiet machine:
`.venv/bin/python bench/speculative.py [--tokens 256] [--runs 3] [--streams 1,8]`
(`--workloads code-edit,prose --sides spec,off` to narrow it; `--sides
draft,off` for the draft model alone). Exit code 0 whatever
the result; PASS/FAIL is printed against each target.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from light_client import post_streams, sse_events  # noqa: E402
from peers import PeerUnavailable, llama_server_binary  # noqa: E402
from servers import Server, free_port, stop_servers_on_sigterm  # noqa: E402
from single_stream import RawLlama  # noqa: E402

from parlance.models.registry import DEFAULT_MODEL, builtin_registry  # noqa: E402

THREADS = 2
SLOTS = 8
CTX_PER_SLOT = 4096
SETTLE_SECONDS = 1.0
SIDES = ("spec", "off", "off-stock", "draft", "llama-server", "ngram-mod")
DRAFTING = ("spec", "draft")  # the sides whose acceptance is reported
# The draft side's price of a draft decode, relative to the model's: SmolLM2 drafting
# for itself really costs 1, which never pays, so it would never draft.
DRAFT_COST = "0.05"

console = Console(width=None if sys.stdout.isatty() else 140)

FUNCTION = '''def summarize_orders(orders, tax_rate, discount_codes):
    subtotal = 0
    lines = []
    for order in orders:
        price = order["price"] * order["quantity"]
        if order.get("code") in discount_codes:
            price = price * (1 - discount_codes[order["code"]])
        subtotal += price
        lines.append(f"{order['name']}: {price:.2f}")
    tax = subtotal * tax_rate
    total = subtotal + tax
    report = {
        "lines": lines,
        "subtotal": round(subtotal, 2),
        "tax": round(tax, 2),
        "total": round(total, 2),
    }
    if total > 1000:
        report["note"] = "large order"
    return report
'''
PEOPLE = ("Alice Moreau is a nurse in Lyon. Bob Okafor works as a baker in Lagos. "
          "Chen Wei teaches physics in Chengdu. Dana Novak is a pilot based in Prague. "
          "Emil Larsen repairs bicycles in Aarhus. Farah Haddad is a lawyer in Beirut.")
STORY = " ".join(
    f"On day {i} the village council met again to discuss the old mill by the river, "
    f"which had stood empty for {10 + i} years; the miller's grandson argued that it "
    f"could grind grain once more, while the baker wanted it turned into a bakery and "
    f"the schoolteacher hoped for a library with a reading room facing the water."
    for i in range(1, 25))
WORKLOADS: dict[str, str] = {
    "code-edit": "Rewrite this function with the variable `subtotal` renamed to `base`. "
                 f"Output only the full code.\n\n```python\n{FUNCTION}```",
    "json": "Extract every person in this text as a JSON list of objects with the keys "
            f"name, job and city, copying the words exactly:\n\n{PEOPLE}",
    "summary": f"{STORY}\n\nSummarise the text above in a few sentences.",
    "prose": "Write a long story about a dragon who learns to cook.",
}


@dataclass
class Result:
    tokens: int
    seconds: float  # 1 stream: first → last token; more: first sent → last token
    texts: list[str]
    drafted: int = 0
    accepted: int = 0

    @property
    def rate(self) -> float | None:
        done = self.tokens - (1 if len(self.texts) == 1 else 0)
        return done / self.seconds if self.seconds > 0 and done > 0 else None


def prompts(workload: str, streams: int) -> list[str]:
    base = WORKLOADS[workload]
    return [base] if streams == 1 else [f"(Request {i + 1}.)\n{base}" for i in range(streams)]


def run_streams(base: str, workload: str, streams: int, max_tokens: int) -> Result:
    port = int(base.rsplit(":", 1)[1])
    bodies = [{"messages": [{"role": "user", "content": p}], "stream": True, "temperature": 0,
               "max_tokens": max_tokens, "stream_options": {"include_usage": True}}
              for p in prompts(workload, streams)]
    captures = post_streams("127.0.0.1", port, "/v1/chat/completions", bodies)
    tokens, texts, firsts, lasts = 0, [], [], []
    for capture in captures:
        status, events = sse_events(capture)
        if status != 200:
            raise RuntimeError(f"{base} answered HTTP {status}")
        parts: list[str] = []
        first = last = 0.0
        for arrived, chunk in events:
            if "error" in chunk:
                raise RuntimeError(f"{base} sent an error frame: {chunk['error']}")
            if chunk.get("usage"):
                tokens += chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices", []):
                if choice.get("delta", {}).get("content"):
                    first, last = first or arrived, arrived
                    parts.append(choice["delta"]["content"])
        texts.append("".join(parts))
        firsts.append(first)
        lasts.append(last)
    start = firsts[0] if streams == 1 else min(c.sent for c in captures)
    return Result(tokens, max(lasts) - start, texts)


def speculation_counters(base: str) -> tuple[int, int]:
    text = httpx.get(f"{base}/metrics", timeout=10).text

    def total(name: str) -> int:
        return sum(int(float(v)) for v in re.findall(
            rf"^parlance_{name}_total{{[^}}]*}} (\S+)$", text, re.M))

    return total("speculative_tokens_drafted"), total("speculative_tokens_accepted")


def measure(base: str, side: str, workload: str, streams: int, max_tokens: int) -> Result:
    parlance = side in ("spec", "off", "off-stock", "draft")
    before = speculation_counters(base) if parlance else (0, 0)
    result = run_streams(base, workload, streams, max_tokens)
    if parlance:
        after = speculation_counters(base)
        result.drafted, result.accepted = after[0] - before[0], after[1] - before[1]
    return result


def commands(model: Path) -> dict[str, Callable[[int], list[str]]]:
    def parlance(mode: str, *extra: str) -> Callable[[int], list[str]]:
        return lambda port: [sys.executable, "-m", "parlance", "serve", "--model",
                             DEFAULT_MODEL, "--port", str(port), "--threads", str(THREADS),
                             "--parallel", str(SLOTS), "--ctx-size", str(CTX_PER_SLOT),
                             "--speculative", mode, "--prompt-cache-disk-mb", "0",
                             "--request-timeout", "3600", *extra]

    def llama_server(*extra: str) -> Callable[[int], list[str]]:
        return lambda port: [str(llama_server_binary()), "-m", str(model), "--port",
                             str(port), "-t", str(THREADS), "-np", str(SLOTS), "-c",
                             str(SLOTS * CTX_PER_SLOT), "--no-webui", *extra]

    return {"spec": parlance("ngram"), "off": parlance("off"),
            "off-stock": parlance("off", "--no-batch-invariant"),
            "draft": parlance("draft", "--draft-model", str(model), "--draft-cost", DRAFT_COST),
            "llama-server": llama_server(), "ngram-mod": llama_server("--spec-type", "ngram-mod")}


def median_rate(results: list[Result]) -> float | None:
    rates = [r.rate for r in results if r.rate is not None]
    return statistics.median(rates) if rates else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "–" if value is None else f"{value:.{digits}f}{suffix}"


def verdict(value: float | None, target: float) -> str:
    return "–" if value is None else ("PASS" if value >= target else "FAIL")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--streams", default="1,8")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--no-raw", action="store_true", help="skip the raw-loop guard")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    stop_servers_on_sigterm()
    model = builtin_registry()[DEFAULT_MODEL].locate()
    levels = [int(s) for s in args.streams.split(",")]
    workloads = args.workloads.split(",")
    sides = [s for s in args.sides.split(",") if s in SIDES]
    results: dict[tuple[str, str, int], list[Result]] = {}
    bases: dict[str, str] = {}
    with ExitStack() as stack:
        for side in sides:
            try:
                port = free_port()
                bases[side] = stack.enter_context(
                    Server(side, commands(model)[side](port), port)).base
            except PeerUnavailable as exc:
                console.print(f"[yellow]{side} skipped:[/] {exc}")
        for round_ in range(args.runs):
            order = list(bases) if round_ % 2 == 0 else list(reversed(bases))
            for workload in workloads:
                for streams in levels:
                    for side in order:
                        time.sleep(SETTLE_SECONDS)
                        result = measure(bases[side], side, workload, streams, args.tokens)
                        results.setdefault((side, workload, streams), []).append(result)
                        console.print(f"round {round_ + 1} {workload} ×{streams} {side}: "
                                      f"{result.tokens} tokens, {fmt(result.rate)} tok/s"
                                      + (f", {result.accepted}/{result.drafted} drafts kept"
                                         if side in DRAFTING else ""))
    raw_rate = None if args.no_raw or "prose" not in workloads else raw_prose(model, args)
    report(results, bases, workloads, levels, raw_rate)
    return 0


def raw_prose(model: Path, args: argparse.Namespace) -> float | None:
    """The single-stream floor: bench/single_stream.py's raw loop on the prose prompt."""
    raw = RawLlama(model)
    try:
        tokens = raw.chat_tokens(WORKLOADS["prose"])
        rates = [raw.generate(tokens, args.tokens).rate for _ in range(args.runs)]
    finally:
        raw.close()
    return statistics.median([r for r in rates if r is not None] or [0.0]) or None


def drafts_and_text(runs: list[Result], off_runs: list[Result]) -> tuple[str, str]:
    """A drafting side's accepted/drafted tokens, and whether each round's greedy texts
    were off's."""
    drafted = sum(r.drafted for r in runs)
    accepted = sum(r.accepted for r in runs)
    share = fmt(100 * accepted / drafted if drafted else None, 0, "%")
    same = (all(a.texts == b.texts for a, b in zip(runs, off_runs, strict=True))
            if runs and off_runs else None)
    return f"{accepted}/{drafted} ({share})", "–" if same is None else ("yes" if same else "NO")


def report(results: dict[tuple[str, str, int], list[Result]], bases: dict[str, str],
           workloads: list[str], levels: list[int], raw_rate: float | None) -> None:
    table = Table(title="tok/s (median round); acceptance of spec and draft; their greedy "
                        "text = off's")
    for column in ("workload", "streams", *bases, "spec/off", "spec/ngram-mod", "draft/off",
                   "off/off-stock", "spec accepted/drafted", "spec identical",
                   "draft accepted/drafted", "draft identical"):
        table.add_column(column, justify="right")
    checks: list[tuple[str, float | None, float]] = []
    for workload in workloads:
        for streams in levels:
            rates = {s: median_rate(results.get((s, workload, streams), [])) for s in bases}
            off_runs = results.get(("off", workload, streams), [])
            drafting = [cell for side in DRAFTING for cell in drafts_and_text(
                results.get((side, workload, streams), []), off_runs)]
            over_off = ratio(rates.get("spec"), rates.get("off"))
            over_mod = ratio(rates.get("spec"), rates.get("ngram-mod"))
            table.add_row(workload, str(streams), *(fmt(rates[s]) for s in bases),
                          fmt(over_off, 2, "×"), fmt(over_mod, 2, "×"),
                          fmt(ratio(rates.get("draft"), rates.get("off")), 2, "×"),
                          fmt(ratio(rates.get("off"), rates.get("off-stock")), 2, "×"),
                          *drafting)
            # speculation is on by default: no workload may lose more than 2% to it
            checks.append((f"{workload} {streams} stream(s): spec ≥ 0.98× off", over_off, 0.98))
            if workload == "code-edit" and streams == 1:
                checks.append(("code-edit 1 stream: spec ≥ 1.6× off", over_off, 1.6))
                checks.append(("code-edit 1 stream: spec ≥ 1.6× llama-server", ratio(
                    rates.get("spec"), rates.get("llama-server")), 1.6))
                checks.append(("code-edit 1 stream: spec ≥ 1.1× ngram-mod", over_mod, 1.1))
            if workload == "prose" and streams == 1 and raw_rate:
                checks.append(("guard: prose 1 stream off ≥ 0.97× raw loop",
                               ratio(rates.get("off"), raw_rate), 0.97))
            if workload == "prose" and streams == 8:
                checks.append(("guard: prose 8 streams off ≥ 1.0× llama-server",
                               ratio(rates.get("off"), rates.get("llama-server")), 1.0))
    console.print(table)
    if raw_rate:
        console.print(f"raw llama.cpp loop, prose, 1 stream: {raw_rate:.1f} tok/s")
    for name, value, target in checks:
        console.print(f"{verdict(value, target):4} {name}: {fmt(value, 2, '×')}")


if __name__ == "__main__":
    sys.exit(main())

"""Constrained-decoding benchmark: what JSON Schema structured output costs per token.

What is measured
----------------
Every side decodes the same chat prompt (a product catalogue) greedily, up to
`--tokens` new tokens, once free ("unconstrained") and once under a JSON Schema
("constrained": an object holding an array of at least 30 products, so that
at the default max_tokens the grammar cannot complete first and decode dominates):

* **raw** – bench/single_stream.py's floor, plain `llama_cpp` calls: prefill,
  then greedy `llama_sampler_sample` + `llama_decode` one token at a time. The
  constrained run adds exactly what Parlance does per token: an llguidance
  `LLMatcher` compiled from `parlance.engines.grammar.schema_grammar(SCHEMA)`,
  wrapped in `parlance.engines.llamacpp.constraint.TokenConstraint`;
  `apply(ctx, row)` masks the logits before the sample, `accept(token)` follows
  it, and the run ends when the grammar is complete. Their time is summed
  ("grammar µs/tok"), so raw constrained / raw unconstrained is the cost of
  the grammar alone, with no server around it.
* **parlance** – `parlance serve --parallel 1` in a subprocess, streaming
  `POST /v1/chat/completions` (stream=true, temperature=0, max_tokens); the
  constrained request adds `response_format: {"type": "json_schema", ...}`.
* **llama-server** – llama.cpp's C++ server (bench/peers.py), `-np 1 -t 2`, the
  same two requests; it turns the schema into a GBNF grammar. Skipped, with the
  reason, when it cannot run here (`--skip-peer` skips it on purpose).

For each side: decode tok/s (tokens after the first / first → last token; for
the servers from the client side over SSE, and as the server reports it in the
final usage chunk or llama-server's `timings`), TTFT and tokens produced. The
headline is `parlance constrained tok/s / parlance unconstrained tok/s`, which
should be ≥ 0.85: structured output should cost at most 15% of decode speed.

Why it is set up this way
-------------------------
* The machine has 2 cores and every side uses 2 threads, so only one side runs
  at a time: both servers are started first and wait idle, each round runs
  every side once, and the order flips every round so that drift on a shared
  machine hits all sides alike. The CPU other processes took meanwhile is
  recorded, with a warning above 5% (as in bench/single_stream.py).
* Before each server run, an untimed one-token completion replaces the cached
  prompt, so every run prefills the whole prompt, like the raw loop;
  llama-server's host-memory prompt cache is turned off (`--cache-ram 0`) for
  the same reason. Parlance compiles the grammar per request, inside its TTFT;
  the raw loop compiles it before the timed part and reports that time apart.
* The unconstrained model may stop (EOG) early, and a grammar may complete
  before max_tokens; rates use the actual token counts of each run, and the
  report says how each run finished.

Run: `.venv/bin/python bench/constrained_decoding.py [--tokens 256] [--runs 3] [--skip-peer]`.
Exit code is 0 whatever the result; PASS/FAIL is printed against the target.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import llama_cpp
import llguidance
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from light_client import post_streams, sse_events
from peers import PeerUnavailable, llama_server_binary
from servers import Server, free_port, stop_servers_on_sigterm
from single_stream import (
    N_CTX,
    NOISE_WARNING,
    SETTLE_SECONDS,
    THREADS,
    CpuMeter,
    Measurement,
    RawLlama,
    console,
    fmt_ms,
    fmt_rate,
    fmt_share,
    median,
    reset_prefix_cache,
)

from parlance.engines.grammar import schema_grammar
from parlance.engines.llamacpp.constraint import TokenConstraint, build_tokenizer
from parlance.models.registry import DEFAULT_MODEL, builtin_registry

TARGET = 0.85
PROMPT = ("Write the product catalogue of an outdoor gear shop as JSON: an object whose "
          "\"items\" array lists at least 30 products, each with a name, a price and a list "
          "of tags.")
SCHEMA = {
    "type": "object",
    "properties": {"items": {
        "type": "array", "minItems": 30,
        "items": {"type": "object", "properties": {
            "name": {"type": "string"},
            "price": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
        }, "required": ["name", "price", "tags"]},
    }},
    "required": ["items"],
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "catalogue", "schema": SCHEMA}}
ENGINES = ("raw", "parlance", "llama-server")


@dataclass(frozen=True, slots=True)
class Run(Measurement):
    finish: str | None = None  # "length" (max_tokens reached) or "stop" (EOG / grammar done)
    grammar_seconds: float | None = None  # raw: time in TokenConstraint.apply/accept
    compile_seconds: float | None = None  # raw: LLMatcher construction (untimed otherwise)


@dataclass(frozen=True, slots=True)
class Side:
    engine: str
    constrained: bool

    @property
    def label(self) -> str:
        return f"{self.engine} {'constrained' if self.constrained else 'unconstrained'}"


# -- raw llama.cpp, with and without the grammar -------------------------------------------


class RawLoop(RawLlama):
    """single_stream's raw loop; with a schema, each step is masked as Parlance masks it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.tokenizer = build_tokenizer(self.vocab)

    def generate(self, tokens: list[int], max_tokens: int, schema: dict | None = None) -> Run:
        constraint, compile_seconds = None, None
        if schema is not None:
            started = time.perf_counter()
            matcher = llguidance.LLMatcher(self.tokenizer, schema_grammar(schema), log_level=0)
            compile_seconds = time.perf_counter() - started
            if matcher.is_error():
                raise RuntimeError(f"grammar: {matcher.get_error()}")
            # As parlance's ChoiceGuide does: a copy of the request's compiled matcher.
            constraint = TokenConstraint(matcher.deep_copy(), self.tokenizer, self.n_vocab)
        llama_cpp.llama_memory_clear(self.memory, True)
        sampler = llama_cpp.llama_sampler_init_greedy()
        prompt = (llama_cpp.llama_token * len(tokens))(*tokens)
        one = (llama_cpp.llama_token * 1)()
        pieces: list[bytes] = []
        grammar = 0.0

        def sample() -> int:
            nonlocal grammar
            if constraint is not None:
                before = time.perf_counter()
                constraint.apply(self.ctx, -1)
                grammar += time.perf_counter() - before
            return llama_cpp.llama_sampler_sample(sampler, self.ctx, -1)

        finish = "stop"
        try:
            start = time.perf_counter()
            self._decode(llama_cpp.llama_batch_get_one(prompt, len(tokens)))
            token = sample()
            now = first = last = time.perf_counter()
            while not llama_cpp.llama_vocab_is_eog(self.vocab, token):
                last = now
                pieces.append(self.piece(token))
                if constraint is not None:
                    before = time.perf_counter()
                    constraint.accept(token)
                    grammar += time.perf_counter() - before
                    if constraint.failed:
                        raise RuntimeError(f"grammar rejected token {token} after "
                                           f"{len(pieces)} tokens")
                    if constraint.stopped:  # complete: Parlance ends the choice here too
                        break
                if len(pieces) >= max_tokens:
                    finish = "length"
                    break
                one[0] = token
                self._decode(llama_cpp.llama_batch_get_one(one, 1))
                token = sample()
                now = time.perf_counter()
        finally:
            llama_cpp.llama_sampler_free(sampler)
        text = b"".join(pieces).decode("utf-8", errors="replace")
        return Run(len(pieces), first - start, max(last - first, 0.0), text,
                   prompt_tokens=len(tokens), finish=finish,
                   grammar_seconds=grammar if constraint is not None else None,
                   compile_seconds=compile_seconds)


# -- servers ---------------------------------------------------------------------------------


def parlance_command(port: int, model: Path) -> list[str]:
    return [sys.executable, "-m", "parlance", "serve", "--model", DEFAULT_MODEL, "--port",
            str(port), "--ctx-size", str(N_CTX), "--threads", str(THREADS), "--parallel", "1",
            # A run slowed down by other processes is measured (and flagged), not cut off.
            "--request-timeout", "600"]


def llama_server_command(port: int, model: Path) -> list[str]:
    return [str(llama_server_binary()), "-m", str(model), "--port", str(port), "-t",
            str(THREADS), "-np", "1", "-c", str(N_CTX), "--cache-ram", "0", "--no-webui"]


def chat_body(max_tokens: int, constrained: bool) -> dict:
    body = {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": PROMPT}],
            "stream": True, "temperature": 0, "max_tokens": max_tokens,
            "stream_options": {"include_usage": True}}
    if constrained:
        body["response_format"] = RESPONSE_FORMAT
    return body


def stream_chat(base: str, body: dict) -> Run:
    """One streamed chat through bench/light_client.py (timestamps only while streaming)."""
    host, port = base.removeprefix("http://").split(":")
    capture = post_streams(host, int(port), "/v1/chat/completions", [body])[0]
    status, events = sse_events(capture)
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {b''.join(d for _, d in capture.reads)[-300:]!r}")
    parts: list[str] = []
    usage: dict = {}
    timings: dict = {}  # llama-server's own figures
    first = last = 0.0
    chunks, finish = 0, None
    for arrived, chunk in events:
        if "error" in chunk:
            raise RuntimeError(f"error frame: {chunk['error']}")
        usage = chunk.get("usage") or usage
        timings = chunk.get("timings") or timings
        for choice in chunk.get("choices") or []:
            finish = choice.get("finish_reason") or finish
            if content := (choice.get("delta") or {}).get("content"):
                first = first or arrived
                last = arrived
                chunks += 1
                parts.append(content)
    tokens = usage.get("completion_tokens") or timings.get("predicted_n") or chunks
    server_ttft = usage.get("time_to_first_token")
    if server_ttft is None:
        server_ttft = timings.get("prompt_ms")
    return Run(tokens=tokens, ttft=first - capture.sent if first else 0.0,
               decode_seconds=last - first, text="".join(parts),
               server_ttft=server_ttft / 1000 if server_ttft is not None else None,
               server_rate=(usage.get("throughput_after_first_token")
                            or timings.get("predicted_per_second")),
               prompt_tokens=usage.get("prompt_tokens") or timings.get("prompt_n"),
               finish=finish)


def server_runner(client: httpx.Client, base: str, buster: int, max_tokens: int,
                  constrained: bool) -> Callable[[], Run]:
    def run() -> Run:
        reset_prefix_cache(client, base, buster)
        time.sleep(SETTLE_SECONDS)
        return stream_chat(base, chat_body(max_tokens, constrained))
    return run


# -- orchestration ---------------------------------------------------------------------------


def interleave(runners: dict[Side, Callable[[], Run]], runs: int, meter: CpuMeter,
               skipped: dict[str, str]) -> dict[Side, list[Run]]:
    """One warmup per side, then `runs` rounds of every side, the order flipping each round.
    A side that fails is dropped (with the reason), the others go on."""
    results: dict[Side, list[Run]] = {side: [] for side in runners}

    def attempt(side: Side, run: Callable[[], Run]) -> Run | None:
        try:
            return run()
        except (httpx.HTTPError, RuntimeError, OSError) as exc:
            skipped[side.label] = f"{type(exc).__name__}: {exc}"
            del runners[side]
            return None

    for side, run in list(runners.items()):
        console.print(f"[dim]warmup {side.label}…[/]")
        attempt(side, run)
        time.sleep(SETTLE_SECONDS)
    for i in range(runs):
        order = list(runners.items())
        for side, run in order if i % 2 == 0 else reversed(order):
            result = attempt(side, lambda run=run: meter.measure(run))
            if result is not None:
                results[side].append(result)
            time.sleep(SETTLE_SECONDS)
        done = [f"{s.label} {fmt_rate(rs[-1].rate)}" for s, rs in results.items()
                if s in runners and rs]
        console.print(f"[dim]round {i + 1}/{runs} (tok/s): {', '.join(done)}[/]")
    return {side: rs for side, rs in results.items() if rs}


# -- report ----------------------------------------------------------------------------------


def rate_of(results: dict[Side, list[Run]], engine: str, constrained: bool) -> float | None:
    runs = results.get(Side(engine, constrained))
    return median([r.rate for r in runs]) if runs else None


def grammar_per_token(runs: list[Run]) -> float | None:
    return median([r.grammar_seconds / r.tokens for r in runs
                   if r.grammar_seconds is not None and r.tokens])


def summary_table(results: dict[Side, list[Run]], runs: int) -> Table:
    table = Table(title=f"Constrained decoding, median of {runs} runs (2 threads, greedy)")
    table.add_column("side", no_wrap=True)
    for column in ("tokens", "finish", "TTFT ms", "tok/s", "server TTFT ms", "server tok/s",
                   "grammar µs/tok", "other CPU max"):
        table.add_column(column, justify="left" if column == "finish" else "right")
    for engine in ENGINES:
        for constrained in (False, True):
            rs = results.get(Side(engine, constrained))
            if not rs:
                continue
            finishes = sorted({r.finish or "?" for r in rs})
            table.add_row(
                Side(engine, constrained).label, f"{median([r.tokens for r in rs]):g}",
                "/".join(finishes), fmt_ms(median([r.ttft for r in rs])),
                fmt_rate(median([r.rate for r in rs])),
                fmt_ms(median([r.server_ttft for r in rs])),
                fmt_rate(median([r.server_rate for r in rs])),
                fmt_us(grammar_per_token(rs)) if constrained and engine == "raw" else "",
                fmt_share(max((r.other_cpu or 0.0 for r in rs), default=None)))
        table.add_section()
    return table


def fmt_us(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e6:.0f}"


def describe_json(text: str, max_tokens: int, tokens: int) -> str:
    try:
        value = json.loads(text)
    except ValueError:
        return (f"cut at max_tokens ({tokens} tokens), JSON not yet complete"
                if tokens >= max_tokens else f"[red]not JSON, yet it ended at {tokens} tokens[/]")
    items = value.get("items") if isinstance(value, dict) else None
    wanted = SCHEMA["properties"]["items"]["minItems"]
    if not isinstance(items, list) or len(items) < wanted:
        return f"[red]complete JSON that breaks the schema[/] after {tokens} tokens"
    return f"complete JSON, {len(items)} items, after {tokens} tokens"


def report(results: dict[Side, list[Run]], skipped: dict[str, str], runs: int,
           max_tokens: int) -> None:
    console.print(summary_table(results, runs))
    for name, why in skipped.items():
        console.print(f"[yellow]skipped {name}[/]: {why}")
    raw_c = results.get(Side("raw", True))
    if raw_c:
        compile_ms = median([r.compile_seconds for r in raw_c])
        console.print(f"grammar compilation (LLMatcher from schema_grammar): "
                      f"{fmt_ms(compile_ms)} ms per request (in Parlance's TTFT; not in raw's)")
    for engine in ENGINES:
        rs = results.get(Side(engine, True))
        if rs:
            text = rs[-1].text
            console.print(f"{engine} constrained output: "
                          f"{describe_json(text, max_tokens, rs[-1].tokens)}: "
                          f"[dim]{text[:70]!r}…[/]")
    for constrained in (False, True):
        raw, parl = results.get(Side("raw", constrained)), results.get(Side("parlance",
                                                                            constrained))
        if raw and parl:
            same = all(r.text == p.text for r in raw for p in parl)
            console.print(f"greedy outputs raw vs parlance "
                          f"({'constrained' if constrained else 'unconstrained'}): "
                          f"{'identical' if same else '[yellow]DIFFER[/]'}; prompt tokens "
                          f"{raw[0].prompt_tokens} / {parl[0].prompt_tokens}")
    every = [r for rs in results.values() for r in rs]
    noisy = [r.other_cpu for r in every if (r.other_cpu or 0) > NOISE_WARNING]
    if noisy:
        console.print(f"[yellow]warning:[/] other processes used up to {max(noisy):.0%} of the "
                      f"CPU during {len(noisy)} of {len(every)} runs; the figures are noisy, "
                      "rerun on a quiet machine")

    def rate(engine: str, constrained: bool) -> float | None:
        return rate_of(results, engine, constrained)

    ratios = [
        ("parlance constrained / parlance unconstrained", rate("parlance", True),
         rate("parlance", False), TARGET),
        ("raw constrained / raw unconstrained (grammar alone)", rate("raw", True),
         rate("raw", False), None),
        ("parlance constrained / raw constrained", rate("parlance", True), rate("raw", True),
         None),
        ("parlance constrained / llama-server constrained", rate("parlance", True),
         rate("llama-server", True), None),
        ("llama-server constrained / llama-server unconstrained", rate("llama-server", True),
         rate("llama-server", False), None),
    ]
    for label, num, den, target in ratios:
        if num is None or not den:
            console.print(f"{label}: n/a")
            continue
        value = num / den
        verdict = ""
        if target is not None:
            verdict = (f" (target ≥ {target}): "
                       + ("[green]PASS[/]" if value >= target else "[red]FAIL[/]"))
        console.print(f"{label} = {value:.3f}{verdict}")
    rounds = zip(results.get(Side("parlance", True), []), results.get(Side("parlance", False), []),
                 strict=False)
    paired = [c.rate / u.rate for c, u in rounds if c.rate and u.rate]
    if len(paired) > 1:
        console.print(f"[dim]parlance constrained / unconstrained, median of per-round ratios "
                      f"(cancels slow drift): {statistics.median(paired):.3f}[/]")


# -- main ------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=256, help="max_tokens per run")
    parser.add_argument("--runs", type=int, default=3, help="measured runs per side")
    parser.add_argument("--skip-peer", action="store_true", help="do not run llama-server")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    stop_servers_on_sigterm()
    path = builtin_registry()[DEFAULT_MODEL].locate()
    console.print(f"model {path.name}, {THREADS} threads, max_tokens {args.tokens}, "
                  f"{args.runs} runs + 1 warmup per side")
    skipped: dict[str, str] = {}
    commands = {"parlance": parlance_command}
    if args.skip_peer:
        skipped["llama-server"] = "--skip-peer"
    else:
        commands["llama-server"] = llama_server_command
    with ExitStack() as stack:
        raw = RawLoop(path)
        stack.callback(raw.close)
        tokens = raw.chat_tokens(PROMPT)
        buster = next(t for t in raw.tokenize("0", add_special=False, parse_special=False)
                      if t != tokens[0])
        runners: dict[Side, Callable[[], Run]] = {
            Side("raw", False): lambda: raw.generate(tokens, args.tokens),
            Side("raw", True): lambda: raw.generate(tokens, args.tokens, SCHEMA),
        }
        client = stack.enter_context(httpx.Client(timeout=httpx.Timeout(300.0)))
        pids = [os.getpid()]
        for name, command in commands.items():  # all up at once, idle until used
            try:
                port = free_port()
                server = stack.enter_context(Server(name, command(port, path), port))
            except PeerUnavailable as exc:
                skipped[name] = str(exc)
                continue
            pids.append(server.proc.pid)
            for constrained in (False, True):
                runners[Side(name, constrained)] = server_runner(client, server.base, buster,
                                                                 args.tokens, constrained)
        results = interleave(runners, args.runs, CpuMeter(pids), skipped)
    report(results, skipped, args.runs, args.tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Single-stream benchmark: Parlance's streaming chat endpoint vs. a raw llama.cpp loop.

What is measured
----------------
* **raw** – the floor: a decode loop written here with plain `llama_cpp` ctypes
  calls (load model, one context with the same size/batch/threads as
  `parlance serve`, `llama_decode` of the prompt, then greedy
  `llama_sampler_sample` + `llama_decode` one token at a time, `token_to_piece`
  per token). No HTTP, no asyncio, no Python framework around it.
* **parlance** – the product: `parlance serve` in a subprocess, streaming the
  same chat prompt through `POST /v1/chat/completions` (stream=true,
  temperature=0, same max_tokens) and timed from the client side over SSE.
  The client is bench/light_client.py's blocking socket reader: on 2 cores
  every µs the client spends per token is taken from decoding, so it only
  `recv`s and timestamps while streaming, and parses afterwards.
  The server's own `time_to_first_token` / `throughput_after_first_token`
  from the usage chunk are shown too.

For each side we report TTFT (raw: start of prompt decode → first sampled
token; client: request sent → first content chunk) and decode tok/s (tokens
after the first / time from the first to the last token). The headline is
`parlance decode tok/s / raw decode tok/s`, which should be ≥ 0.97: serving
one stream should cost next to nothing over the bare loop.

Why it is set up this way
-------------------------
* The machine has 2 cores and both sides use 2 threads, so they never run at
  the same time: runs alternate (the order flips every round so drift hits both
  sides alike), the idle side is blocked (the raw context just sits, the server
  waits in epoll), and we pause briefly between phases so OpenMP spin-waits
  wind down.
* The server keeps the previous prompt in its KV cache and would only evaluate
  the last prompt token on a repeat. To compare TTFT like for like, a one-token
  `/v1/completions` request with an unrelated token is sent (untimed) before
  every timed server run, so the server prefills the whole prompt, as the raw
  loop does after `llama_memory_clear`.
* The machine may be shared. Each run also records how much CPU other
  processes (and the hypervisor, as steal time) took meanwhile ("other CPU");
  a warning is printed when that exceeds 5%, because two llama.cpp thread
  pools on 2 cores slow each other down by far more than their CPU share.
* SmolLM2 may stop (EOG) before max_tokens; the server cannot ignore EOS, so
  rates are computed from the actual token counts of each run.

Run: `.venv/bin/python bench/single_stream.py [--tokens 256] [--runs 5] [--port 0]`.
Exit code is 0 whatever the result; PASS/FAIL is printed against the target.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import llama_cpp
from rich.console import Console
from rich.table import Table

from parlance.core.messages import Message
from parlance.engines.llamacpp.template import ChatTemplate
from parlance.models.registry import DEFAULT_MODEL, builtin_registry

sys.path.insert(0, str(Path(__file__).parent))
from light_client import post_stream, sse_events  # noqa: E402
from servers import Server, free_port, stop_servers_on_sigterm  # noqa: E402

PROMPT = "Write a long story about a dragon who learns to cook."
THREADS = 2
N_CTX = 4096  # what `parlance serve` uses for the default model (registry ctx_size)
N_BATCH = 512  # parlance's ContextSettings default
TARGET = 0.97
SETTLE_SECONDS = 0.5  # let OpenMP worker threads stop spinning between phases
NOISE_WARNING = 0.05  # warn when other processes took more than this share of the CPU

console = Console(width=None if sys.stdout.isatty() else 110)


@dataclass(frozen=True, slots=True)
class Measurement:
    tokens: int  # completion tokens (EOG not counted)
    ttft: float  # seconds
    decode_seconds: float  # first token → last token
    text: str
    server_ttft: float | None = None  # seconds, from the usage chunk
    server_rate: float | None = None  # tokens/s, from the usage chunk
    prompt_tokens: int | None = None
    other_cpu: float | None = None  # share of the machine used by other processes

    @property
    def rate(self) -> float | None:
        """Decode tokens/s after the first token."""
        if self.tokens < 2 or self.decode_seconds <= 0:
            return None
        return (self.tokens - 1) / self.decode_seconds


# -- raw llama.cpp ----------------------------------------------------------------


class RawLlama:
    """The model and one context, driven by plain llama_cpp calls only."""

    def __init__(self, path: Path) -> None:
        llama_cpp.llama_backend_init()
        self.model = llama_cpp.llama_model_load_from_file(
            str(path).encode(), llama_cpp.llama_model_default_params())
        if not self.model:
            raise RuntimeError(f"could not load {path}")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = N_CTX, N_BATCH, N_BATCH
        params.n_seq_max = 1
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED  # as parlance's context
        params.n_threads = params.n_threads_batch = THREADS
        params.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise RuntimeError("could not create a llama.cpp context")
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self._buf = ctypes.create_string_buffer(256)

    def close(self) -> None:
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)

    def piece(self, token: int, special: bool = False) -> bytes:
        n = llama_cpp.llama_token_to_piece(self.vocab, token, self._buf, len(self._buf), 0,
                                           special)
        return self._buf.raw[:max(n, 0)]

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode() if n >= 0 else None

    def chat_tokens(self, prompt: str) -> list[int]:
        """The prompt rendered and tokenized exactly as LlamaCppEngine._tokens does it."""
        bos = self.piece(llama_cpp.llama_vocab_bos(self.vocab), special=True).decode()
        eos = self.piece(llama_cpp.llama_vocab_eos(self.vocab), special=True).decode()
        template = ChatTemplate(self.meta("tokenizer.chat_template"), bos_token=bos,
                                eos_token=eos)
        text = template.render([Message("user", prompt)])
        add_bos = llama_cpp.llama_vocab_get_add_bos(self.vocab) and not (
            bos and text.startswith(bos))
        return self.tokenize(text, add_special=bool(add_bos), parse_special=True)

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode()
        buf = (llama_cpp.llama_token * (len(data) + 8))()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, len(buf), add_special,
                                     parse_special)
        return list(buf[:n])

    def generate(self, tokens: list[int], max_tokens: int) -> Measurement:
        """Prefill, then greedy sample/decode one token at a time."""
        llama_cpp.llama_memory_clear(self.memory, True)
        sampler = llama_cpp.llama_sampler_init_greedy()
        prompt = (llama_cpp.llama_token * len(tokens))(*tokens)
        one = (llama_cpp.llama_token * 1)()
        pieces: list[bytes] = []
        first = last = 0.0
        try:
            start = time.perf_counter()
            self._decode(llama_cpp.llama_batch_get_one(prompt, len(tokens)))
            token = llama_cpp.llama_sampler_sample(sampler, self.ctx, -1)
            now = time.perf_counter()
            first = now
            while not llama_cpp.llama_vocab_is_eog(self.vocab, token):
                last = now
                pieces.append(self.piece(token))
                if len(pieces) >= max_tokens:
                    break
                one[0] = token
                self._decode(llama_cpp.llama_batch_get_one(one, 1))
                token = llama_cpp.llama_sampler_sample(sampler, self.ctx, -1)
                now = time.perf_counter()
        finally:
            llama_cpp.llama_sampler_free(sampler)
        text = b"".join(pieces).decode("utf-8", errors="replace")
        return Measurement(len(pieces), first - start, max(last - first, 0.0), text,
                           prompt_tokens=len(tokens))

    def _decode(self, batch: llama_cpp.llama_batch) -> None:
        code = llama_cpp.llama_decode(self.ctx, batch)
        if code != 0:
            raise RuntimeError(f"llama_decode returned {code}")


# -- parlance server ----------------------------------------------------------------


def parlance_server(port: int) -> Server:
    command = [sys.executable, "-m", "parlance", "serve", "--model", DEFAULT_MODEL,
               "--ctx-size", str(N_CTX), "--threads", str(THREADS), "--port", str(port)]
    return Server("parlance", command, port)


def reset_prefix_cache(client: httpx.Client, base: str, token: int) -> None:
    """Leave a one-token prompt in the server's KV cache so the next prompt is cold."""
    body = {"prompt": [token], "max_tokens": 1, "temperature": 0}
    client.post(f"{base}/v1/completions", json=body).raise_for_status()


def stream_chat(port: int, max_tokens: int) -> Measurement:
    """Stream one chat completion. While streaming, the client only records when each
    raw read arrived (bench/light_client.py, blocking reads); parsing happens
    afterwards, so the client's own CPU work competes as little as possible with the
    server for the machine's two cores during decoding."""
    body = {
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": True, "temperature": 0, "max_tokens": max_tokens,
        "stream_options": {"include_usage": True},
    }
    capture = post_stream("127.0.0.1", port, "/v1/chat/completions", body)
    status, events = sse_events(capture)
    if status != 200:
        raise RuntimeError(f"parlance answered HTTP {status}")
    parts: list[str] = []
    usage: dict[str, Any] = {}
    first = last = 0.0
    for arrived, chunk in events:
        if "error" in chunk:
            raise RuntimeError(f"parlance sent an error frame: {chunk['error']}")
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            if choice["delta"].get("content"):
                last = arrived
                first = first or arrived
                parts.append(choice["delta"]["content"])
    server_ttft = usage.get("time_to_first_token")
    return Measurement(
        tokens=usage["completion_tokens"], ttft=first - capture.sent,
        decode_seconds=last - first, text="".join(parts),
        server_ttft=server_ttft / 1000 if server_ttft is not None else None,
        server_rate=usage.get("throughput_after_first_token"),
        prompt_tokens=usage.get("prompt_tokens"),
    )


# -- machine noise ----------------------------------------------------------------


class CpuMeter:
    """How much of the machine other processes (and the hypervisor) took during a run.

    System-wide busy ticks from /proc/stat minus the ticks of this process and
    the server. Linux only; elsewhere it reports None.
    """

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.cpus = os.cpu_count() or 1

    def measure(self, run: Callable[[], Measurement]) -> Measurement:
        before, started = self._ticks(), time.perf_counter()
        result = run()
        after, elapsed = self._ticks(), time.perf_counter() - started
        if before is None or after is None:
            return result
        other = (after[0] - before[0]) - (after[1] - before[1])
        share = max(other, 0) / (elapsed * self.hz * self.cpus)
        return dataclasses.replace(result, other_cpu=share)

    def _ticks(self) -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as fh:
                fields = [int(v) for v in fh.readline().split()[1:]]
            idle = fields[3] + fields[4]  # idle + iowait
            ours = sum(self._process_ticks(pid) for pid in self.pids)
        except (OSError, ValueError, IndexError):
            return None
        return sum(fields[:8]) - idle, ours

    @staticmethod
    def _process_ticks(pid: int) -> int:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime


# -- orchestration ----------------------------------------------------------------


def alternate(raw_run: Callable[[], Measurement], server_run: Callable[[], Measurement],
              runs: int, meter: CpuMeter) -> tuple[list[Measurement], list[Measurement]]:
    """One warmup each, then `runs` rounds, flipping which side goes first."""
    for label, run in (("raw", raw_run), ("parlance", server_run)):
        console.print(f"[dim]warmup {label}…[/]")
        run()
        time.sleep(SETTLE_SECONDS)
    raws, servers = [], []
    for i in range(runs):
        order = [(raws, raw_run), (servers, server_run)]
        for results, run in order if i % 2 == 0 else reversed(order):
            results.append(meter.measure(run))
            time.sleep(SETTLE_SECONDS)
        r, s = raws[-1], servers[-1]
        console.print(f"[dim]run {i + 1}/{runs}: raw {fmt_rate(r.rate)} tok/s, "
                      f"parlance {fmt_rate(s.rate)} tok/s, other CPU "
                      f"{fmt_share(r.other_cpu)} / {fmt_share(s.other_cpu)}[/]")
    return raws, servers


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def fmt_rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def fmt_ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f}"


def fmt_share(share: float | None) -> str:
    return "n/a" if share is None else f"{share:.0%}"


def fmt_ratio(num: float | None, den: float | None) -> str:
    return "n/a" if num is None or not den else f"{num / den:.3f}"


def per_run_table(raws: list[Measurement], servers: list[Measurement]) -> Table:
    table = Table("run", "raw tokens", "raw TTFT ms", "raw tok/s", "parlance tokens",
                  "client TTFT ms", "client tok/s", "server TTFT ms", "server tok/s",
                  "other CPU raw/parl.",
                  title="Per run (parlance: client-side and server-reported)")
    for i, (r, s) in enumerate(zip(raws, servers, strict=True), 1):
        table.add_row(str(i), str(r.tokens), fmt_ms(r.ttft), fmt_rate(r.rate), str(s.tokens),
                      fmt_ms(s.ttft), fmt_rate(s.rate), fmt_ms(s.server_ttft),
                      fmt_rate(s.server_rate), f"{fmt_share(r.other_cpu)} / "
                      f"{fmt_share(s.other_cpu)}")
    return table


def summary_table(raws: list[Measurement], servers: list[Measurement]) -> Table:
    raw_ttft, raw_rate = median([r.ttft for r in raws]), median([r.rate for r in raws])
    cli_ttft, cli_rate = median([s.ttft for s in servers]), median([s.rate for s in servers])
    srv_ttft = median([s.server_ttft for s in servers])
    srv_rate = median([s.server_rate for s in servers])
    table = Table("median", "raw llama.cpp", "parlance (client)", "parlance (server usage)",
                  "ratio client/raw", title=f"Single stream, median of {len(raws)} runs")
    table.add_row("completion tokens", f"{median([r.tokens for r in raws]):g}",
                  f"{median([s.tokens for s in servers]):g}", "", "")
    table.add_row("TTFT (ms)", fmt_ms(raw_ttft), fmt_ms(cli_ttft), fmt_ms(srv_ttft),
                  fmt_ratio(cli_ttft, raw_ttft))
    table.add_row("decode tok/s", fmt_rate(raw_rate), fmt_rate(cli_rate), fmt_rate(srv_rate),
                  fmt_ratio(cli_rate, raw_rate))
    return table


def report(raws: list[Measurement], servers: list[Measurement]) -> None:
    console.print(per_run_table(raws, servers))
    console.print(summary_table(raws, servers))
    raw_rate, cli_rate = median([r.rate for r in raws]), median([s.rate for s in servers])
    prompt_match = raws[0].prompt_tokens == servers[0].prompt_tokens
    text_match = all(r.text == s.text for r, s in zip(raws, servers, strict=True))
    console.print(f"prompt tokens: raw {raws[0].prompt_tokens}, parlance "
                  f"{servers[0].prompt_tokens} ({'same' if prompt_match else 'DIFFERENT'}); "
                  f"greedy outputs {'identical' if text_match else 'DIFFER'}")
    noisy = [m.other_cpu for m in raws + servers if (m.other_cpu or 0) > NOISE_WARNING]
    if noisy:
        console.print(f"[yellow]warning:[/] other processes used up to {max(noisy):.0%} of the "
                      f"CPU during {len(noisy)} of {len(raws) + len(servers)} runs; "
                      "the figures are noisy, rerun on a quiet machine")
    if raw_rate and cli_rate:
        ratio = cli_rate / raw_rate
        verdict = "[green]PASS[/]" if ratio >= TARGET else "[red]FAIL[/]"
        console.print(f"decode ratio parlance/raw = {ratio:.3f} (target ≥ {TARGET}): {verdict}")
        paired = median([s.rate / r.rate for r, s in zip(raws, servers, strict=True)
                         if r.rate and s.rate])
        if paired is not None:
            console.print(f"[dim]median of per-round ratios (cancels slow drift): "
                          f"{paired:.3f}[/]")
    else:
        console.print("[red]FAIL[/]: decode rate could not be measured")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=256, help="max_tokens per run")
    parser.add_argument("--runs", type=int, default=5, help="measured runs per side")
    parser.add_argument("--port", type=int, default=0, help="server port (0: pick a free one)")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    stop_servers_on_sigterm()
    path = builtin_registry()[DEFAULT_MODEL].locate()
    console.print(f"model {path.name}, {THREADS} threads, max_tokens {args.tokens}, "
                  f"{args.runs} runs + 1 warmup per side")
    raw = RawLlama(path)
    tokens = raw.chat_tokens(PROMPT)
    buster = next(t for t in raw.tokenize("0", add_special=False, parse_special=False)
                  if t != tokens[0])
    with parlance_server(args.port or free_port()) as server:
        try:
            base = server.base
            with httpx.Client(timeout=httpx.Timeout(300.0)) as client:

                def server_run() -> Measurement:
                    reset_prefix_cache(client, base, buster)
                    time.sleep(SETTLE_SECONDS)
                    return stream_chat(server.port, args.tokens)

                meter = CpuMeter([os.getpid(), server.proc.pid])
                raws, servers = alternate(lambda: raw.generate(tokens, args.tokens),
                                          server_run, args.runs, meter)
        finally:
            raw.close()
    report(raws, servers)
    return 0


if __name__ == "__main__":
    sys.exit(main())

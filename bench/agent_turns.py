"""Agent turns: recorded Claude Code and Codex sessions replayed against Parlance and
llama-server, counting what each evaluates again.

An agent resends its whole conversation every turn (Codex ~9k tokens of instructions
and tools before the first word, Claude Code ~20k), so on a CPU what decides a turn's
latency is how much of the prompt a server evaluates again. For each recording in
`bench/sessions/` (made by `bench/record_agent_session.py`):

1. start `parlance serve` (SmolLM2, a fresh `--data-dir`, the default prompt-cache
   flags) and llama-server built from the same llama.cpp (`bench/peers.py`; its default
   `--cache-ram` prompt cache, `--metrics`), the same slots, context per slot and
   threads;
2. send the first session's turns in order, streamed, each to both servers (who goes
   first alternates). Both get the same tokens: each recorded request as Parlance's
   dialect parses it and SmolLM2's template renders it, as token ids on
   `/v1/completions`. llama-server has `/v1/messages` and `/v1/responses` of its own
   (`--via api` uses them), but for a template without a place for tools it leaves the
   tools out: Claude Code's first request is 3,089 tokens there against 20,321 with
   the tools in the system prompt, and the two sides would not do the same work;
3. stop both, start them again (Parlance on the same data dir, llama-server with its
   RAM cache gone, as after any restart) and send the second session's first request;
4. time prompt processing of fresh text prompts at 2k, 8k and 16k tokens on each.

Per turn it prints: prompt tokens, tokens evaluated (each server's own `/metrics`
counter: Parlance `parlance_prompt_tokens_evaluated_total`, llama-server
`llamacpp:prompt_tokens_total`; both exclude tokens reused from a cache), the new
tokens (this prompt minus the previous turn's), time to the first generated token and
the ratio Parlance / llama-server; then the targets with PASS/FAIL.

The token counts do not depend on load; the times do: run it on a quiet machine.
A full run (both agents, 2k/8k/16k) evaluates a 20k-token cold prompt several times and
takes long on 2 cores; `--quick` replays the Codex session only with parity at 1k and
2k tokens, as a smoke run.

    python bench/agent_turns.py            # the full run
    python bench/agent_turns.py --quick
    python bench/agent_turns.py --agents claude-code --sizes none   # its cold first request
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from peers import PeerUnavailable, llama_server_binary  # noqa: E402
from servers import Server, free_port, stop_servers_on_sigterm  # noqa: E402

from parlance.models.registry import DEFAULT_MODEL, builtin_registry  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.agent_sessions import (  # noqa: E402
    load_session,
    rendered_tokens,
    replayed,
)

THREADS = 2
REQUEST_SECONDS = 7200.0  # a cold 20k-token prompt on 2 busy cores
PARLANCE, LLAMA = "parlance", "llama-server"
SIDES = (PARLANCE, LLAMA)
EVALUATED = {PARLANCE: "parlance_prompt_tokens_evaluated_total",
             LLAMA: "llamacpp:prompt_tokens_total"}
SLACK = 64  # tokens a turn may evaluate beyond its new ones (a re-rendered answer's end)


@dataclass
class Measured:
    side: str
    label: str
    prompt_tokens: int
    evaluated: int
    ttft: float


# -- servers --------------------------------------------------------------------------


def parlance_server(port: int, data_dir: Path, slots: int, ctx: int) -> Server:
    return Server(PARLANCE, [sys.executable, "-m", "parlance", "serve", "--model", DEFAULT_MODEL,
                             "--port", str(port), "--threads", str(THREADS),
                             "--parallel", str(slots), "--ctx-size", str(ctx),
                             "--data-dir", str(data_dir),
                             "--request-timeout", str(int(REQUEST_SECONDS))], port)


def llama_server(port: int, model: Path, slots: int, ctx: int) -> Server:
    """llama-server caps a slot's context at the model's training context (8192 for
    SmolLM2), Parlance does not: the override gives it the same context per slot (the
    model's RoPE has no scaling for that value to change)."""
    return Server(LLAMA, [str(llama_server_binary()), "-m", str(model), "--port", str(port),
                          "-t", str(THREADS), "-np", str(slots), "-c", str(slots * ctx),
                          "--override-kv", f"llama.context_length=int:{ctx}",
                          "--metrics", "--no-webui", "--timeout", str(int(REQUEST_SECONDS))],
                  port)


def counter(base: str, name: str) -> int:
    """The sum of a Prometheus counter over its label sets."""
    text = httpx.get(f"{base}/metrics", timeout=30).text
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", re.M)
    return int(sum(float(v) for v in pattern.findall(text)))


# -- one streamed request -----------------------------------------------------------------


def sse_data(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            yield json.loads(line[5:])


def is_output(event: dict[str, Any]) -> bool:
    """An event carrying generated output: Anthropic and Responses deltas, a completions
    chunk with text."""
    if "delta" in str(event.get("type", "")):
        return True
    return any(c.get("text") for c in event.get("choices", ()))


def prompt_tokens(event: dict[str, Any]) -> int | None:
    """The prompt size an event reports, cached tokens included, if it reports one."""
    usage = (event.get("response") or {}).get("usage") or event.get("usage")
    if usage is None and event.get("type") == "message_start":
        usage = event["message"].get("usage")
    if not usage:
        return None
    if "prompt_tokens" in usage:
        return int(usage["prompt_tokens"])
    if "cache_read_input_tokens" in usage:
        return int(usage["input_tokens"]) + int(usage["cache_read_input_tokens"]) \
            + int(usage.get("cache_creation_input_tokens") or 0)
    return int(usage["input_tokens"]) if "input_tokens" in usage else None


def stream(server: Server, path: str, body: dict[str, Any], label: str) -> Measured:
    before = counter(server.base, EVALUATED[server.name])
    ttft, tokens = 0.0, 0
    sent = time.perf_counter()
    with httpx.stream("POST", server.base + path, json=body,
                      timeout=httpx.Timeout(REQUEST_SECONDS, connect=30)) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{server.name} {path}: {response.status_code} "
                               f"{response.read().decode(errors='replace')[:500]}")
        for event in sse_data(response.iter_lines()):
            if not ttft and is_output(event):
                ttft = time.perf_counter() - sent
            tokens = prompt_tokens(event) or tokens
    ttft = ttft or time.perf_counter() - sent  # no output at all: the whole request
    evaluated = counter(server.base, EVALUATED[server.name]) - before
    return Measured(server.name, label, tokens, evaluated, ttft)


# -- the recorded sessions ----------------------------------------------------------------


def sent(request: dict[str, Any], tokens: list[int], via: str,
         max_tokens: int) -> tuple[str, dict[str, Any]]:
    """What a replayed request sends where: `tokens` (Parlance's rendering of it) to
    `/v1/completions`, or the recorded body to its own path (`via` "api")."""
    if via == "api":
        return request["path"], replayed(request, max_tokens)
    return "/v1/completions", completion(tokens, max_tokens)


def completion(prompt: list[int] | str, max_tokens: int) -> dict[str, Any]:
    return {"model": DEFAULT_MODEL, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}


def replay(servers: dict[str, Server], requests: list[dict[str, Any]],
           rendered: list[list[int]], session: int, args: argparse.Namespace,
           results: list[Measured]) -> None:
    turn = 0
    for request, tokens in zip(requests, rendered, strict=True):
        if request["session"] != session:
            continue
        turn += 1
        order = SIDES if (session + turn) % 2 == 1 else SIDES[::-1]
        for side in order:
            label = f"session {session + 1} turn {turn}"
            path, body = sent(request, tokens, args.via, args.max_tokens)
            measured = stream(servers[side], path, body, label)
            results.append(measured)
            print(f"  {label:<20} {side:<13} prompt {measured.prompt_tokens:>6}  evaluated "
                  f"{measured.evaluated:>6}  ttft {measured.ttft:8.2f} s", flush=True)


# -- prompt processing ------------------------------------------------------------------


def text_of_tokens(server: Server, n_tokens: int) -> str:
    """About `n_tokens` tokens of plain prose (llama-server's tokenizer: the same GGUF)."""
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while",
             "seven", "tired", "sailors", "count", "their", "silver", "coins", "beside", "an",
             "old", "lighthouse", "at", "the", "edge", "of", "the", "northern", "sea"]
    text = " ".join(f"{words[i % len(words)]}{i % 97}" for i in range(n_tokens))
    tokens = httpx.post(f"{server.base}/tokenize", json={"content": text}, timeout=120).json()
    cut = tokens["tokens"][:n_tokens]
    return str(httpx.post(f"{server.base}/detokenize", json={"tokens": cut},
                          timeout=120).json()["content"])


def prompt_processing(servers: dict[str, Server], sizes: list[int],
                      results: list[Measured]) -> None:
    for i, size in enumerate(sizes):
        text = text_of_tokens(servers[LLAMA], size)
        order = SIDES if i % 2 == 0 else SIDES[::-1]
        for side in order:
            # a fresh first word: no side finds any of it cached
            body = completion(f"{side}{time.time_ns()}: {text}", 1)
            measured = stream(servers[side], "/v1/completions", body, f"{size // 1024}k")
            results.append(measured)
            print(f"  prompt {size:>6} tokens  {side:<13} evaluated {measured.evaluated:>6}  "
                  f"ttft {measured.ttft:8.2f} s  "
                  f"({measured.evaluated / measured.ttft:.0f} tok/s)", flush=True)


# -- where consecutive prompts part ----------------------------------------------------------


def renderer() -> Any:
    """A llama.cpp engine on SmolLM2 with a tiny context: for its template and tokenizer."""
    from parlance.engines.llamacpp.engine import LlamaCppEngine
    from parlance.engines.llamacpp.model import ContextSettings

    return LlamaCppEngine.load(builtin_registry()[DEFAULT_MODEL].locate(),
                               ContextSettings(n_ctx=256, parallel=1))


def prefixes(agents: list[str]) -> None:
    """For each recorded request after the first: where its tokens stop matching the
    previous request's (the end of what a cache can reuse), with the text around it."""
    engine = renderer()
    for agent in agents:
        tokens = rendered_tokens(engine, load_session(agent))
        print(f"\n{agent}: {len(tokens[0])} tokens in the first request")
        for before, now in zip(tokens, tokens[1:], strict=False):
            common = next((i for i, (a, b) in enumerate(zip(before, now, strict=False))
                           if a != b), min(len(before), len(now)))
            print(f"  {len(now)} tokens: the first {common} are the previous request's "
                  f"(of {len(before)}); they part at "
                  f"{engine.preparation.text(before[max(0, common - 12):common + 8])!r} | "
                  f"{engine.preparation.text(now[max(0, common - 12):common + 8])!r}")


# -- the report -----------------------------------------------------------------------------


def find(results: list[Measured], side: str, label: str) -> Measured:
    return next(m for m in results if m.side == side and m.label == label)


def targets(agent: str, results: list[Measured], turns: int) -> list[tuple[str, bool, str]]:
    """Each target of the agent's session: its name, whether it held, the figures."""
    checks: list[tuple[str, bool, str]] = []
    for turn in range(2, turns + 1):
        now = find(results, PARLANCE, f"session 1 turn {turn}")
        before = find(results, PARLANCE, f"session 1 turn {turn - 1}")
        new = now.prompt_tokens - before.prompt_tokens
        checks.append((f"{agent} turn {turn}: evaluated <= new tokens + {SLACK}",
                       now.evaluated <= new + SLACK, f"{now.evaluated} <= {new} + {SLACK}"))
    cold = find(results, PARLANCE, "session 1 turn 1")
    restarted = {side: find(results, side, "session 2 turn 1") for side in SIDES}
    ratio = restarted[PARLANCE].ttft / cold.ttft
    checks.append((f"{agent} new session after a restart: ttft <= 0.10 x cold", ratio <= 0.10,
                   f"{restarted[PARLANCE].ttft:.2f} s / {cold.ttft:.2f} s = {ratio:.3f} "
                   f"(evaluated {restarted[PARLANCE].evaluated} of "
                   f"{restarted[PARLANCE].prompt_tokens})"))
    if agent == "claude-code":
        ours, theirs = cold, find(results, LLAMA, "session 1 turn 1")
        ratio = ours.ttft / theirs.ttft
        checks.append((f"{agent} first request cold: ttft <= 0.5 x llama-server", ratio <= 0.5,
                       f"{ours.ttft:.2f} s / {theirs.ttft:.2f} s = {ratio:.2f} "
                       f"({ours.evaluated} / {theirs.evaluated} tokens evaluated)"))
        for turn in range(2, turns + 1):
            label = f"session 1 turn {turn}"
            ours, theirs = find(results, PARLANCE, label), find(results, LLAMA, label)
            ratio = ours.ttft / theirs.ttft
            checks.append((f"{agent} turn {turn}: ttft <= 1.0 x llama-server", ratio <= 1.0,
                           f"{ours.ttft:.2f} s / {theirs.ttft:.2f} s = {ratio:.2f}"))
        ratio = restarted[PARLANCE].ttft / restarted[LLAMA].ttft
        checks.append((f"{agent} new session after a restart: ttft <= 0.2 x llama-server",
                       ratio <= 0.2, f"{restarted[PARLANCE].ttft:.2f} s / "
                       f"{restarted[LLAMA].ttft:.2f} s = {ratio:.3f}"))
    return checks


def parity(results: list[Measured], sizes: list[int]) -> list[tuple[str, bool, str]]:
    checks = []
    for size in sizes:
        ours, theirs = (find(results, side, f"{size // 1024}k") for side in SIDES)
        speed = (ours.evaluated / ours.ttft) / (theirs.evaluated / theirs.ttft)
        checks.append((f"prompt processing at {size // 1024}k: >= 1.0 x llama-server",
                       speed >= 1.0, f"{speed:.2f}x"))
    return checks


def table(results: list[Measured]) -> None:
    print("\n| turn | prompt (P / L) | evaluated (P / L) | TTFT s (P / L) | P/L |")
    print("|---|---|---|---|---|")
    for m in results:
        if m.side != PARLANCE:
            continue
        theirs = find(results, LLAMA, m.label)
        print(f"| {m.label} | "
              f"{m.prompt_tokens} / {theirs.prompt_tokens} | {m.evaluated} / {theirs.evaluated}"
              f" | {m.ttft:.2f} / {theirs.ttft:.2f} | {m.ttft / theirs.ttft:.2f} |")


# -- main -----------------------------------------------------------------------------------


def run_agent(agent: str, model: Path, args: argparse.Namespace, data_root: Path,
              sizes: list[int]) -> list[tuple[str, bool, str]]:
    requests = load_session(agent)
    rendered = rendered_tokens(renderer(), requests)
    turns = sum(1 for r in requests if r["session"] == 0)
    data_dir = data_root / agent
    results: list[Measured] = []
    print(f"\n{agent}: {len(requests)} recorded requests; slots {args.parallel}, "
          f"context per slot {args.ctx_size}, {THREADS} threads", flush=True)
    with parlance_server(free_port(), data_dir, args.parallel, args.ctx_size) as ours, \
            llama_server(free_port(), model, args.parallel, args.ctx_size) as theirs:
        replay({PARLANCE: ours, LLAMA: theirs}, requests, rendered, 0, args, results)
    print("  both servers restarted", flush=True)
    with parlance_server(free_port(), data_dir, args.parallel, args.ctx_size) as ours, \
            llama_server(free_port(), model, args.parallel, args.ctx_size) as theirs:
        servers = {PARLANCE: ours, LLAMA: theirs}
        replay(servers, requests, rendered, 1, args, results)
        if sizes:
            prompt_processing(servers, sizes, results)
    table(results)
    checks = targets(agent, results, turns)
    return checks + (parity(results, sizes) if sizes else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="the Codex session only, prompt processing at 1k and 2k tokens")
    parser.add_argument("--parallel", type=int, default=2, help="slots, on both servers")
    parser.add_argument("--ctx-size", type=int, default=None,
                        help="context per slot (default: 32768; 16384 with --quick)")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--via", choices=("tokens", "api"), default="tokens",
                        help="tokens (default): both servers get the same prompt, Parlance's "
                             "rendering of each recorded request as token ids on "
                             "/v1/completions; api: each its own /v1/messages or "
                             "/v1/responses (llama-server leaves out the tools SmolLM2's "
                             "template has no place for: a much shorter prompt)")
    parser.add_argument("--agents", default=None,
                        help="recordings to replay, comma-separated (default: codex,claude-code; "
                             "codex with --quick)")
    parser.add_argument("--sizes", default=None,
                        help="prompt-processing sizes in tokens, comma-separated, after the "
                             "last agent; 'none' skips them (default: 2048,8192,16384; "
                             "1024,2048 with --quick)")
    parser.add_argument("--prefixes", action="store_true",
                        help="only show where each recorded prompt parts from the previous "
                             "one, token by token after templating (no server, no prefill)")
    args = parser.parse_args()
    args.ctx_size = args.ctx_size or (16384 if args.quick else 32768)
    agents = (args.agents or ("codex" if args.quick else "codex,claude-code")).split(",")
    sizes_text = args.sizes or ("1024,2048" if args.quick else "2048,8192,16384")
    sizes = [] if sizes_text == "none" else [int(size) for size in sizes_text.split(",")]
    if args.prefixes:
        return prefixes(agents)
    stop_servers_on_sigterm()
    model = builtin_registry()[DEFAULT_MODEL].locate()
    checks: list[tuple[str, bool, str]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="agent-turns-") as tmp:
            for i, agent in enumerate(agents):
                last = i == len(agents) - 1
                checks += run_agent(agent, model, args, Path(tmp), sizes if last else [])
    except PeerUnavailable as exc:
        sys.exit(f"llama-server unavailable: {exc}")
    print("\ntargets:")
    for name, held, figures in checks:
        print(f"  {'PASS' if held else 'FAIL'}  {name}: {figures}")


if __name__ == "__main__":
    main()

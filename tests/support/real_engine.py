"""Shared helpers for the real-engine suite (llama.cpp + SmolLM2-135M-Instruct).

The model is loaded once per process (`shared_engine()` is cached), so the
engine-level tests in `tests/engines/llamacpp/` and the HTTP tests in
`tests/dialects/*/test_real_engine*.py` share one engine and one scheduler thread.

Import it as `tests.support.real_engine` (never by another name: a second copy of the
module would load a second model).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import llama_cpp
import pytest

from parlance.core.accumulate import Accumulator, Completion
from parlance.core.events import Event, Failed, Finish, TextDelta, TokenLogprob, Usage
from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams, TextInput
from parlance.engines.llamacpp import LlamaCppEngine
from parlance.engines.llamacpp.model import ContextSettings
from parlance.engines.llamacpp.speculation import NO_SPECULATION, SpeculativeSettings
from parlance.models.registry import DEFAULT_MODEL, builtin_registry
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app

MODEL_ID = DEFAULT_MODEL  # "smollm2-135m-instruct"
N_CTX = 4096  # room for the 2000-token generations the cancellation tests start
SLOTS = 8  # sequences decoded together
GREEDY = SamplingParams(temperature=0.0)
# Tests must pass on a busy machine (load average 5 on 2 cores): every wait is for an
# event, bounded by PATIENCE only so that a broken test ends, and nothing is timed.
PATIENCE = 120.0
# The request deadline of test apps: a burst of requests queued behind 8 slots must not
# hit it, even at a load average of 14 on 2 cores (a 44-request burst then takes 15
# minutes); tests of the deadline itself set their own.
REQUEST_TIMEOUT = 3600.0

# The prompts tests send. What SmolLM2 answers and when it stops vary between CPUs of
# one kind: a test that needs a length bans the end tokens (`no_eog_bias`, `endless`,
# `never_ending`), and expected texts come from another run of the same engine.
CHAT_PROMPT = "Write a haiku about the sea."  # here it ends by itself after ~23 tokens
LONG_CHAT_PROMPT = "What is the capital of France?"  # here it runs past 40 tokens
TEXT_PROMPT = "Once upon a time"
EMOJI_PROMPT = "🐱🐶🐱🐶🐱🐶🐱🐶🐱🐶🐱🐶🐱🐶🐱🐶"  # greedy continues with 🐶, 3 byte tokens each
# A prompt that forces the model to produce its own multi-byte text (CJK + emoji).
CJK_CHAT_PROMPT = "Repeat exactly: 日本語 🐱🐶"
TRANSLATE_PROMPT = "Translate to Japanese: I love cats 🐱"


# -- the engine ---------------------------------------------------------------------


def model_path() -> Path:
    """SmolLM2's file; the test is skipped where it is not installed."""
    try:
        return builtin_registry()[MODEL_ID].locate()
    except FileNotFoundError as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"real-engine tests need the default model: {exc}")


def load_engine(speculative: SpeculativeSettings = NO_SPECULATION) -> LlamaCppEngine:
    """SmolLM2 as the tests use it; by default as `parlance serve` runs it (no drafts,
    llama.cpp's KV layout)."""
    return LlamaCppEngine.load(model_path(), ContextSettings(n_ctx=N_CTX, n_threads=2,
                                                             parallel=SLOTS),
                               speculative=speculative)


@functools.cache
def shared_engine() -> LlamaCppEngine:
    return load_engine()


_closed = False


def close_shared_engine() -> None:
    """Idempotent; called from the session fixtures' teardown.

    A scheduler still generating (a test failed to cancel its job) is left alone:
    freeing the model under a running decode would crash the whole test process.
    """
    global _closed
    if _closed or shared_engine.cache_info().currsize == 0:
        return
    _closed = True
    engine = shared_engine()
    try:
        assert_idle_soon(engine)
    except AssertionError:
        return
    asyncio.run(engine.aclose())


@functools.cache
def eog_tokens(engine: LlamaCppEngine) -> tuple[int, ...]:
    """Every end-of-generation token of the vocabulary (SmolLM2: 0, 2 and 4)."""
    model = engine.model
    return tuple(t for t in range(model.n_vocab) if model.is_eog(t))


def no_eog_bias(engine: LlamaCppEngine) -> dict[str, float]:
    """A wire `logit_bias` that forbids ending: the generation runs to max_tokens."""
    return {str(t): -100.0 for t in eog_tokens(engine)}


@contextlib.contextmanager
def _starting(engine: LlamaCppEngine, start) -> Iterator[None]:
    """`engine.start` is `start` meanwhile (on this instance only; nested, each restores
    what it shadowed)."""
    shadowed = vars(engine).get("start")
    engine.start = start
    try:
        yield
    finally:
        if shadowed is None:
            del engine.start
        else:
            engine.start = shadowed


@contextlib.contextmanager
def never_ending(engine: LlamaCppEngine) -> Iterator[None]:
    """Meanwhile every request the engine starts has its end-of-generation tokens banned,
    as `no_eog_bias` does for a dialect that has no `logit_bias`: an answer runs to its
    token limit (or to the end of a forced grammar), whenever the model would have ended."""
    start = engine.start
    ban = tuple((t, -100.0) for t in eog_tokens(engine))

    async def start_endless(request: GenerationRequest):
        sampling = dataclasses.replace(request.sampling,
                                       logit_bias=request.sampling.logit_bias + ban)
        return await start(dataclasses.replace(request, sampling=sampling))

    with _starting(engine, start_endless):
        yield


@contextlib.contextmanager
def recorded_starts(engine: LlamaCppEngine) -> Iterator[list]:
    """Every generation the engine starts meanwhile, in order (to look at its job or at
    the prompt it rendered)."""
    start, generations = engine.start, []

    async def start_recorded(request: GenerationRequest):
        generation = await start(request)
        generations.append(generation)
        return generation

    with _starting(engine, start_recorded):
        yield generations


def engine_idle(engine: LlamaCppEngine) -> bool:
    return engine.metrics.idle


async def wait_idle(engine: LlamaCppEngine, timeout: float = PATIENCE) -> float:
    """Seconds until the engine was idle (twice in a row); raises if it never was."""
    started = time.perf_counter()
    streak = 0
    while time.perf_counter() - started < timeout:
        streak = streak + 1 if engine_idle(engine) else 0
        if streak >= 2:
            return time.perf_counter() - started
        await asyncio.sleep(0.005)
    raise AssertionError(f"the engine was still busy after {timeout}s")


async def wait_until(predicate, timeout: float, what: str) -> float:
    """Seconds until `predicate()` held; raises if it did not within `timeout`."""
    started = time.perf_counter()
    while not predicate():
        if time.perf_counter() - started > timeout:
            raise AssertionError(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.005)
    return time.perf_counter() - started


def kv_cache_mismatches(engine: LlamaCppEngine) -> list[tuple[int, int, int, int]]:
    """Slots whose bookkeeping disagrees with llama.cpp's KV cache: (slot, pos min,
    pos max, tokens we think it holds). Empty when every cell is accounted for."""
    return stream_mismatches(engine.model.memory,
                             [slot.tokens for slot in engine.scheduler.slots.slots])


def stream_mismatches(memory, streams: list[list[int]]) -> list[tuple[int, int, int, int]]:
    """Sequence ids whose cells in `memory` are not positions 0 … len(streams[id]) - 1."""
    bad = []
    for seq, tokens in enumerate(streams):
        low = llama_cpp.llama_memory_seq_pos_min(memory, seq)
        high = llama_cpp.llama_memory_seq_pos_max(memory, seq)
        if (low, high) != ((0, len(tokens) - 1) if tokens else (-1, -1)):
            bad.append((seq, low, high, len(tokens)))
    return bad


def assert_idle_soon(engine: LlamaCppEngine, timeout: float = PATIENCE) -> None:
    """Synchronous variant for fixture teardown outside an event loop."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if engine_idle(engine):
            return
        time.sleep(0.005)
    raise AssertionError(f"the engine was still busy after {timeout}s")


# -- vocabulary and text helpers --------------------------------------------------------


def token_with_bytes(engine, raw: bytes) -> int:
    """The vocabulary id whose piece is exactly `raw`."""
    model = engine.model
    matches = [t for t in range(model.n_vocab) if model.piece(t) == raw]
    assert len(matches) == 1, (raw, matches)
    return matches[0]


def boundary_stop(tokens: list[str], text: str) -> tuple[str, int]:
    """A stop string straddling two generated tokens, and where it first occurs.

    The last two characters of one token (of three or more, so the cut falls
    inside it) and the first two of the next, all ASCII so characters are whole;
    chosen where this is the first occurrence in `text` and some text precedes it.
    """
    offset = 0
    for here, after in pairwise(tokens):
        offset += len(here)
        stop = here[-2:] + after[:2]
        usable = len(here) >= 3 and len(after) >= 2 and stop.isascii() and stop.strip()
        if usable and text.find(stop) == offset - 2 > 0:
            return stop, offset - 2
    raise AssertionError(f"no token boundary in {tokens!r} gives a usable stop string")


def first_multibyte(text: str) -> str:
    """The first character of `text` that takes more than one UTF-8 byte (U+FFFD aside):
    a stop string to find in the model's own answer instead of a literal it may not write."""
    found = next((c for c in text if len(c.encode()) > 1 and c != "\ufffd"), None)
    assert found, f"no multi-byte character in {text!r}"
    return found


# -- engine-level requests ----------------------------------------------------------


def chat_request(
    content: str, *, sampling: SamplingParams = GREEDY, **kw: Any
) -> GenerationRequest:
    return GenerationRequest(
        model=MODEL_ID, prompts=(ChatInput((Message("user", content),)),), sampling=sampling, **kw
    )


def text_request(
    prompt: str | None = None,
    *,
    token_ids: Iterable[int] | None = None,
    suffix: str | None = None,
    sampling: SamplingParams = GREEDY,
    **kw: Any,
) -> GenerationRequest:
    source = TextInput(
        text=prompt, token_ids=tuple(token_ids) if token_ids is not None else None, suffix=suffix
    )
    return GenerationRequest(model=MODEL_ID, prompts=(source,), sampling=sampling, **kw)


@dataclass
class Run:
    """Everything one engine generation produced."""

    events: list[Event]
    prompt_text: str
    prompt_tokens: int
    result: Completion = field(init=False)

    def __post_init__(self) -> None:
        acc = Accumulator()
        for event in self.events:
            acc.feed(event)
        self.result = acc.result

    @property
    def text(self) -> str:
        return self.result.choice(0).text

    @property
    def deltas(self) -> list[str]:
        return [e.text for e in self.events if isinstance(e, TextDelta)]

    @property
    def finish(self) -> str:
        reasons = [e.reason.value for e in self.events if isinstance(e, Finish)]
        assert len(reasons) == 1, reasons
        return reasons[0]

    @property
    def usage(self) -> Usage:
        usages = [e for e in self.events if isinstance(e, Usage)]
        assert len(usages) == 1, usages
        return usages[0]

    @property
    def logprobs(self) -> list[TokenLogprob]:
        return list(self.result.choice(0).logprobs or [])

    @property
    def failed(self) -> Failed | None:
        return next((e for e in self.events if isinstance(e, Failed)), None)


async def run(engine: LlamaCppEngine, request: GenerationRequest,
              timeout: float = PATIENCE) -> Run:
    generation = await engine.start(request)
    events: list[Event] = []

    async def drain() -> None:
        async for event in generation:
            events.append(event)

    try:
        await asyncio.wait_for(drain(), timeout)
    finally:
        generation.cancel()
    prompt = generation.prompts[0]
    return Run(events, prompt.text, prompt.n_tokens)


# -- long generations -----------------------------------------------------------------


def endless(engine) -> SamplingParams:
    """Greedy, with every end-of-generation token banned: runs to max_tokens."""
    return SamplingParams(temperature=0.0,
                          logit_bias=tuple((t, -100.0) for t in eog_tokens(engine)))


async def first_deltas(generation, count: int) -> list:
    events = []
    async for event in generation:
        events.append(event)
        if sum(isinstance(e, TextDelta) for e in events) >= count:
            return events
    raise AssertionError(f"the generation ended after {events!r}")


async def rest(generation, timeout: float = PATIENCE) -> list:
    async def drain():
        return [event async for event in generation]

    return await asyncio.wait_for(drain(), timeout)


def tokens_generated(generation) -> int:
    """Tokens the engine generated for a (finished or cancelled) generation."""
    return sum(s.generated for group in generation.job.finished_groups for s in group)


async def fill_slots(engine) -> list:
    """Endless generations in every slot, each past its first tokens; long enough
    (3000 tokens) never to end within a test, however slow the machine."""
    running = [await engine.start(text_request(f"{TEXT_PROMPT} {i}", max_tokens=3000,
                                               sampling=endless(engine)))
               for i in range(SLOTS)]
    for generation in running:
        await first_deltas(generation, 1)
    assert engine.metrics.slots_in_use == SLOTS
    return running


async def cancel_all(generations) -> None:
    for generation in generations:
        generation.cancel()
    for generation in generations:
        await rest(generation)


# -- HTTP -----------------------------------------------------------------------------


def local_engine_only(reason: str) -> pytest.MarkDecorator:
    """A test of what only the local engine does: skipped when PARLANCE_TEST_ENGINE=upstream
    runs the real-engine HTTP tests through the upstream engine."""
    return pytest.mark.skipif(os.environ.get("PARLANCE_TEST_ENGINE") == "upstream",
                              reason=f"local engine only: {reason}")


def make_app(engine: LlamaCppEngine, **settings: Any):
    """An app serving the engine; with PARLANCE_TEST_ENGINE=upstream, the same engine one
    hop away behind the upstream engine (tests/upstream_replicas.through_upstream)."""
    spec = builtin_registry()[MODEL_ID]
    settings.setdefault("request_timeout", REQUEST_TIMEOUT)
    if os.environ.get("PARLANCE_TEST_ENGINE") == "upstream":
        from tests.support.upstream_replicas import through_upstream

        return through_upstream(engine, spec, ServerSettings(**settings))
    models = ServedModels([ServedModel(spec, engine, int(time.time()))])
    return create_app(models, ServerSettings(**settings))


def asgi_client(app) -> httpx.AsyncClient:
    """In-process client. ASGITransport buffers the whole body, streams included."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://parlance.test",
        timeout=REQUEST_TIMEOUT,
    )


def _stream_texts(frames: list[Any], text_of) -> tuple[list[str], str | None]:
    deltas, finish = [], None
    for frame in frames:
        if not isinstance(frame, dict) or not frame.get("choices"):
            continue
        choice = frame["choices"][0]
        if text := text_of(choice):
            deltas.append(text)
        finish = choice["finish_reason"] or finish
    return deltas, finish


def chat_stream_content(frames: list[Any]) -> tuple[list[str], str | None]:
    """(content deltas in order, finish_reason) of a streamed chat completion."""
    return _stream_texts(frames, lambda choice: choice["delta"].get("content"))


def completion_stream_text(frames: list[Any]) -> tuple[list[str], str | None]:
    """(text deltas in order, finish_reason) of a streamed legacy completion."""
    return _stream_texts(frames, lambda choice: choice["text"])

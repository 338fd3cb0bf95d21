"""The prompt cache beyond the slots, on SmolLM2: a conversation's next turn after more
other conversations than slots, and after the engine was closed and another opened on
the same data dir, evaluates only its new tokens; broken files are ignored and
removed; the bounds hold; with both tiers off nothing is kept beyond the slots.

Each test loads its own small engine (2 slots of 512 cells)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from parlance.engines.llamacpp import LlamaCppEngine
from parlance.engines.llamacpp.model import ContextSettings
from parlance.engines.llamacpp.prompt_cache import CacheSettings
from parlance.engines.llamacpp.prompt_cache_entry import Entry
from parlance.engines.llamacpp.prompt_cache_file import SUFFIX, encode, key_digest
from parlance.models.registry import builtin_registry
from tests.support.real_engine import MODEL_ID, Run, run, text_request

pytestmark = pytest.mark.model

# batch-invariant, as the server runs by default: a restored prefix then continues exactly
# as a kept one (stock kernels promise no such thing)
SETTINGS = ContextSettings(n_ctx=512, n_threads=2, parallel=2, batch_invariant=True)
MB = 1 << 20
# Conversations that share nothing past their first token or so
AGENT = "You are a coding agent. Tools: " + " ".join(f"tool_{i}(path, text)," for i in range(40))
OTHERS = [f"Story {k}: " + " ".join(f"{word}{k}" for word in ("red", "blue", "green") * 20)
          for k in range(3)]
NEXT_TURN = " The user now asks: list the tools."


@asynccontextmanager
async def engine_with(cache: CacheSettings) -> AsyncIterator[LlamaCppEngine]:
    path = builtin_registry()[MODEL_ID].locate()
    engine = await asyncio.to_thread(LlamaCppEngine.load, path, SETTINGS, prompt_cache=cache)
    try:
        yield engine
    finally:
        await engine.aclose()


async def turn(engine: LlamaCppEngine, prompt: str) -> tuple[Run, int]:
    """A greedy turn, and the prompt tokens the engine evaluated for it."""
    before = engine.metrics.prompt_tokens_evaluated
    result = await run(engine, text_request(prompt, max_tokens=8))
    return result, engine.metrics.prompt_tokens_evaluated - before


async def agent_then_others(engine: LlamaCppEngine) -> Run:
    """The agent's first turn, then more other conversations than there are slots."""
    first, _ = await turn(engine, AGENT)
    for other in OTHERS:
        await turn(engine, other)
    return first


def assert_only_new_tokens(result: Run, evaluated: int, first: Run) -> None:
    """The next turn reuses the whole first prompt but its last token (which may merge
    with the new text when tokenized again)."""
    assert result.usage.cached_tokens >= first.usage.prompt_tokens - 1
    assert evaluated == result.usage.prompt_tokens - result.usage.cached_tokens
    assert evaluated <= result.usage.prompt_tokens - first.usage.prompt_tokens + 1


def cache_files(root: Path) -> list[Path]:
    return sorted(root.glob(f"*/*{SUFFIX}"))


async def test_a_next_turn_after_more_conversations_than_slots_comes_from_ram():
    async with engine_with(CacheSettings(ram_bytes=256 * MB)) as engine:
        first = await agent_then_others(engine)
        result, evaluated = await turn(engine, AGENT + NEXT_TURN)
        assert_only_new_tokens(result, evaluated, first)
        metrics = engine.metrics
        assert metrics.prompt_cache_ram_hits == 1
        assert metrics.prompt_cache_ram_tokens_restored == result.usage.cached_tokens
        assert 0 < metrics.prompt_cache_ram_bytes <= 256 * MB
        assert result.text == await kept_in_its_slot(engine)


async def kept_in_its_slot(engine: LlamaCppEngine) -> str:
    """The next turn's greedy text when the first turn's prefix stayed in its slot:
    a restored prefix continues exactly as a kept one."""
    await engine.clear_cache()
    await turn(engine, AGENT)
    restores = restored(engine)
    kept, _ = await turn(engine, AGENT + NEXT_TURN)
    assert kept.usage.cached_tokens and restored(engine) == restores  # from the slot
    return kept.text


def restored(engine: LlamaCppEngine) -> int:
    return engine.metrics.prompt_cache_ram_hits + engine.metrics.prompt_cache_disk_hits


async def test_with_the_cache_off_the_next_turn_starts_from_zero():
    async with engine_with(CacheSettings(ram_bytes=0, disk_bytes=0)) as engine:
        assert engine.scheduler.slots.cache is None
        await agent_then_others(engine)
        result, evaluated = await turn(engine, AGENT + NEXT_TURN)
        assert result.usage.cached_tokens <= 1  # at most the first token, shared by all
        assert evaluated >= result.usage.prompt_tokens - 1
        assert engine.metrics.prompt_cache_ram_hits == 0


async def test_the_ram_bound_evicts_the_least_recently_used_entry():
    async with engine_with(CacheSettings(ram_bytes=256 * MB)) as probe:
        await agent_then_others(probe)
        sizes = [e.size for e in probe.scheduler.slots.cache.ram.entries()]  # type: ignore[union-attr]
    bound = max(sizes) + min(sizes) // 2  # room for the agent's entry, never beside another
    async with engine_with(CacheSettings(ram_bytes=bound)) as engine:
        await agent_then_others(engine)
        ram = engine.scheduler.slots.cache.ram  # type: ignore[union-attr]
        assert 0 < ram.bytes <= bound
        result, _ = await turn(engine, AGENT + NEXT_TURN)  # the agent's entry went first
        assert result.usage.cached_tokens <= 1
        assert engine.metrics.prompt_cache_ram_hits == 0


async def test_a_next_turn_after_a_restart_comes_from_disk(tmp_path):
    cache = CacheSettings(ram_bytes=256 * MB, disk_bytes=512 * MB, directory=tmp_path)
    async with engine_with(cache) as engine:
        first, _ = await turn(engine, AGENT)  # kept in its slot until the engine closes
    assert len(cache_files(tmp_path)) == 1
    async with engine_with(cache) as engine:
        result, evaluated = await turn(engine, AGENT + NEXT_TURN)
        assert_only_new_tokens(result, evaluated, first)
        assert engine.metrics.prompt_cache_disk_hits == 1
        assert engine.metrics.prompt_cache_disk_tokens_restored == result.usage.cached_tokens
        assert result.text == await kept_in_its_slot(engine)


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


@pytest.mark.parametrize("damage", [flip_a_byte, truncate])
async def test_a_damaged_or_foreign_cache_file_is_ignored_and_removed(
        tmp_path, damage: Callable[[Path], None]):
    cache = CacheSettings(ram_bytes=256 * MB, disk_bytes=512 * MB, directory=tmp_path)
    async with engine_with(cache) as engine:
        await turn(engine, AGENT)
    [saved] = cache_files(tmp_path)
    damage(saved)
    foreign = saved.with_name("foreign" + SUFFIX)  # a valid file made for another key
    foreign.write_bytes(encode(Entry((1, 2, 3), b"state"), key_digest({"model": "other"})))
    async with engine_with(cache) as engine:
        result, evaluated = await turn(engine, AGENT + NEXT_TURN)
        assert result.usage.cached_tokens == 0 and evaluated == result.usage.prompt_tokens
        assert engine.metrics.prompt_cache_disk_hits == 0
        assert not saved.exists() and not foreign.exists()


async def test_the_disk_bound_evicts_the_least_recently_used_files(tmp_path):
    probe_dir = tmp_path / "probe"
    cache = CacheSettings(ram_bytes=256 * MB, disk_bytes=512 * MB, directory=probe_dir)
    async with engine_with(cache) as engine:
        await turn(engine, AGENT)
    [file] = cache_files(probe_dir)
    bound = file.stat().st_size + 1  # the agent's file fits alone, never beside another
    cache = CacheSettings(ram_bytes=256 * MB, disk_bytes=bound, directory=tmp_path / "data")
    async with engine_with(cache) as engine:
        await agent_then_others(engine)  # four entries written, one by one
    files = cache_files(tmp_path / "data")
    assert files
    assert sum(f.stat().st_size for f in files) <= bound
    async with engine_with(cache) as engine:  # the agent's entry was the oldest
        result, _ = await turn(engine, AGENT + NEXT_TURN)
        assert result.usage.cached_tokens <= 1

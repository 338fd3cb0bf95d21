"""How long an idle model stays loaded: models loaded just in time are unloaded again
after an idle TTL, and any model after the `keep_alive` the last call on it asked for
(Ollama's), counted from the end of its last call. A reaper task sleeps until the next
expiry; a model a call still holds (`ServedModel.busy`) is never unloaded, only looked at
again shortly: keep_alive 0 unloads a model once its call is done, never during it."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable

from parlance.core.errors import ModelNotFound
from parlance.models.loaded import Loaded, ServedModel
from parlance.models.names import Names

_BUSY_RECHECK = 0.1  # seconds between looks at a model whose time is up while it is busy


class Lifetime:
    def __init__(self, loaded: Loaded, names: Names, unload: Callable[[str], Awaitable[bool]],
                 idle_ttl: float | None) -> None:
        self._loaded = loaded
        self._names = names
        self._unload = unload
        self.idle_ttl = idle_ttl
        self._reaper: asyncio.Task[None] | None = None
        self._wake_reaper = asyncio.Event()  # an expiry may have changed

    def ttl(self, model: ServedModel) -> float | None:
        """Seconds `model` may stay idle before it is unloaded; None: forever. The last
        call's keep_alive rules; without one, a model loaded just in time has the idle
        TTL and the others stay."""
        if model.keep_alive is not None:
            return None if math.isinf(model.keep_alive) else model.keep_alive
        return self.idle_ttl if model.jit else None

    def keep(self, model: ServedModel, seconds: float | None) -> None:
        """A call asks that `model` stay loaded `seconds` once idle (None: the server's
        rule), as every Ollama request sets its model's keep_alive."""
        model.keep_alive = seconds
        self._wake_reaper.set()

    def hold(self, model: ServedModel) -> None:
        """A call runs on `model` until it `release`s it: it is not unloaded meanwhile."""
        model.calls += 1

    def release(self, model: ServedModel) -> None:
        """A call on `model` has ended: its idle time starts now."""
        model.calls -= 1
        model.last_used = time.monotonic()
        self._wake_reaper.set()

    async def expire(self, requested: str) -> None:
        """Unload the model `requested` names now, or, while calls run on it, as soon as
        they end (Ollama's keep_alive 0 without a prompt). Not loaded: nothing to do."""
        try:
            model, _ = self._names.resolve(requested)
        except ModelNotFound:
            return
        model.keep_alive = 0.0
        if not model.busy:
            await self._unload(model.spec.id)
        else:
            self._wake_reaper.set()

    async def unload_idle(self, now: float | None = None) -> list[str]:
        """Unload the idle models whose time is up (`ttl`)."""
        now = time.monotonic() if now is None else now
        stale = [m.spec.id for m in self._loaded.local if self._expired(m, now)]
        for model_id in stale:
            await self._unload(model_id)
        return stale

    def _expired(self, model: ServedModel, now: float) -> bool:
        ttl = self.ttl(model)
        return (ttl is not None and not model.busy
                and (ttl == 0 or now - model.last_used > ttl))

    def _next_check(self, now: float) -> float | None:
        """Seconds until the reaper must look again: the earliest expiry, or soon when
        a model's time is up but a call still runs on it; None: nothing expires."""
        waits = []
        for model in self._loaded.local:
            ttl = self.ttl(model)
            if ttl is not None:
                left = model.last_used + ttl - now
                waits.append(left if left > 0 else _BUSY_RECHECK)
        return min(waits, default=None)

    def expires_at(self, model: ServedModel) -> float | None:
        """When (wall-clock seconds) `model` will be unloaded if nothing uses it before
        (`ttl`); None: never. A busy model is never unloaded, so its time is at least now."""
        ttl = self.ttl(model)
        if ttl is None:
            return None
        return time.time() + max(model.last_used + ttl - time.monotonic(), 0.0)

    def start_reaper(self) -> None:
        """Unload models when their time is up: the reaper sleeps until the next expiry
        and wakes early when a call changes one (keep_alive, a call ending)."""
        if self._reaper is not None:
            return

        async def reap() -> None:
            while True:
                self._wake_reaper.clear()
                await self.unload_idle()
                # (not wait_for: on 3.11 it loses a cancel that meets the wake-up)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._next_check(time.monotonic())):
                        await self._wake_reaper.wait()

        self._reaper = asyncio.ensure_future(reap())

    async def stop_reaper(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper

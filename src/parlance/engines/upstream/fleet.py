"""Every upstream replica of the server, what each serves, and one engine (pool) per
model they serve.

Each replica is asked for `GET /v1/models` when the server starts and then every
`health_interval` seconds: the answer is both its health check (a replica that
fails it is ejected; one that answers again rejoins) and model discovery (a
replica configured without `models` serves what it lists). Where a server says
more about itself it is read too: vLLM's `max_model_len`, llama-server's `/props`
(context per slot, slots), Parlance's LM Studio model list (context, parallel).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx2

from parlance.engines.upstream.affinity import AffinityTable
from parlance.engines.upstream.engine import UpstreamEngine
from parlance.engines.upstream.pool import Pool
from parlance.engines.upstream.replica import ClientSettings, Replica, ReplicaConfig

log = logging.getLogger("parlance.upstream")


@dataclass(frozen=True, slots=True)
class FleetSettings:
    health_interval: float = 5.0  # seconds between health checks (and model discovery)
    startup_wait: float = 10.0  # how long the server waits for the first discovery
    strict_max_tokens: bool = False  # refuse max_tokens beyond the context (engines/budget.py)
    client: ClientSettings = ClientSettings()


class Fleet:
    def __init__(self, configs: Iterable[ReplicaConfig],
                 settings: FleetSettings | None = None) -> None:
        self.settings = settings or FleetSettings()
        self.replicas = [Replica(c, self.settings.client) for c in configs]
        self._affinity: AffinityTable[Replica] = AffinityTable()
        self._engines: dict[str, UpstreamEngine] = {}
        self._loop_task: asyncio.Task[None] | None = None

    # -- models -----------------------------------------------------------------------

    def models(self) -> list[str]:
        """Every model some replica serves, in the order the replicas list them."""
        seen: dict[str, None] = {}
        for replica in self.replicas:
            for name in sorted(replica.models):
                seen.setdefault(name, None)
        return list(seen)

    def engine(self, model: str) -> UpstreamEngine | None:
        if model not in self.models():
            return None
        engine = self._engines.get(model)
        if engine is None:
            engine = UpstreamEngine(Pool(model, lambda: self.replicas, self._affinity),
                                    strict_max_tokens=self.settings.strict_max_tokens)
            self._engines[model] = engine
        return engine

    def engines(self) -> list[UpstreamEngine]:
        return [e for name in self.models() if (e := self.engine(name)) is not None]

    # -- health and discovery -----------------------------------------------------------

    async def start(self) -> None:
        """Discover once (waiting at most `startup_wait`), then keep checking."""
        if self._loop_task is not None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.check(), self.settings.startup_wait)
        self._loop_task = asyncio.ensure_future(self._keep_checking())

    async def _keep_checking(self) -> None:
        while True:
            await asyncio.sleep(self.settings.health_interval)
            try:
                await self.check()
            except Exception:  # never let the loop die
                log.exception("upstream health check failed")

    async def check(self) -> None:
        """One health check and discovery round over every replica, at once."""
        await asyncio.gather(*(self._check(r) for r in self.replicas))
        for engine in self._engines.values():
            engine.refresh()

    async def _check(self, replica: Replica) -> None:
        timeout = replica.health_timeout
        try:
            response = await replica.client.get("/v1/models", timeout=timeout)
            listing = response.json() if response.status_code == 200 else None
        except (httpx2.HTTPError, ValueError) as exc:
            if replica.healthy:
                log.warning("upstream %s failed its health check: %s", replica.label, exc)
            replica.down()
            return
        if not isinstance(listing, dict) or not isinstance(listing.get("data"), list):
            log.warning("upstream %s: GET /v1/models answered %s", replica.label,
                        response.status_code)
            replica.down()
            return
        if not replica.healthy:
            log.info("upstream %s is back", replica.label)
        replica.up()
        entries = [e for e in listing["data"] if isinstance(e, dict) and e.get("id")]
        if not replica.config.models:
            replica.models = frozenset(str(e["id"]) for e in entries)
            replica.discovered = True
        for entry in entries:
            replica.owned_by = str(entry.get("owned_by") or replica.owned_by or "")
            length = entry.get("max_model_len") or entry.get("context_length")
            if isinstance(length, int) and length > 0:
                replica.context_lengths[str(entry["id"])] = length
        with contextlib.suppress(httpx2.HTTPError, ValueError, TypeError, KeyError):
            await self._details(replica)

    async def _details(self, replica: Replica) -> None:
        """What llama-server and Parlance say of their contexts and slots."""
        if replica.owned_by == "llamacpp":
            response = await replica.client.get("/props", timeout=replica.health_timeout)
            if response.status_code == 200:
                props: dict[str, Any] = response.json()
                slots = props.get("total_slots")
                if isinstance(slots, int) and slots > 0:
                    replica.slots = slots
                n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
                if isinstance(n_ctx, int) and n_ctx > 0:
                    for name in replica.models:
                        replica.context_lengths[name] = n_ctx
        elif replica.owned_by == "parlance":
            response = await replica.client.get("/api/v1/models",
                                                timeout=replica.health_timeout)
            if response.status_code == 200:
                for model in response.json().get("models", []):
                    for instance in model.get("loaded_instances") or ():
                        config = instance.get("config") or {}
                        if isinstance(config.get("context_length"), int):
                            replica.context_lengths[str(model["key"])] = config["context_length"]
                        if isinstance(config.get("parallel"), int):
                            replica.slots = config["parallel"]

    async def aclose(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        for engine in self._engines.values():
            await engine.aclose()
        for replica in self.replicas:
            await replica.aclose()

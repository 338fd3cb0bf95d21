"""The composition root: a resolved `ServeConfig` made into the app `serve` runs. Every
mapping of a serve setting into the settings of the rooms below (`ServerSettings`,
`ContextSettings`, the prompt cache's tiers, the load plan's defaults, the connection
limits, the upstream fleet) is here, and nowhere else.

The engines are imported on first use: `parlance chat --url` or `parlance ps` never
load llama.cpp."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

from rich.console import Console

from parlance.config import ServeConfig, default_threads
from parlance.console.load_progress import LoadProgressView
from parlance.core.errors import InvalidRequest
from parlance.models.load_plan import LoadDefaults, LoadOptions, LoadPlan, check_fits, plan_load
from parlance.models.memory_estimate import available_memory
from parlance.models.registry import ModelSpec, resolve_spec
from parlance.models.served import Loader, LoadProgress, ServedModel, ServedModels

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from parlance.engines.base import Engine
    from parlance.engines.llamacpp.prompt_cache import CacheSettings
    from parlance.engines.llamacpp.rpc import RpcServers
    from parlance.engines.llamacpp.speculation import SpeculativeSettings
    from parlance.integrations.settings import IntegrationSettings
    from parlance.models.upstream import UpstreamModels
    from parlance.server import ServerSettings
    from parlance.server.http.connections import ConnectionLimits

Registry = dict[str, ModelSpec]

console = Console(stderr=True)  # what `serve` says of itself: stderr, beside uvicorn's log
load_progress = LoadProgressView(console)  # every load of `serve`, at start and on demand

# The flags behind a load plan's parameters, to name them in a refusal.
_FLAGS = {"context_length": "--ctx-size (or the preset's ctx_size)", "parallel": "--parallel",
          "model": "--model"}


def build_app(config: ServeConfig, registry: Registry) -> Starlette:
    """The app `serve` runs: the first model loaded, the others on demand."""
    from parlance.models.catalog import catalog
    from parlance.server import create_app

    loader = engine_loader(config)
    models = ServedModels(
        first_model(config, registry, loader),
        catalog=catalog(registry, Path(config.models_dir)), loader=loader,
        idle_ttl=config.jit_ttl or None, memory_budget=memory_budget(config),
        defaults=load_defaults(config), free_memory=free_memory(config),
        upstreams=upstream_models(config))
    return create_app(models, server_settings(config))


# -- the llama.cpp engine ------------------------------------------------------------


def engine_loader(config: ServeConfig) -> Loader:
    """Loads one model into a fresh llama.cpp engine (blocking; run off the loop), with
    the settings of a load plan (checked and resolved by `models.load_plan`); its layers
    on the --rpc servers when given (checked here, before any load)."""
    from parlance.engines.llamacpp import LlamaCppEngine
    from parlance.engines.llamacpp.model import ContextSettings

    rpc = rpc_servers(config)
    prompt_cache = prompt_cache_settings(config)
    speculative = speculative_settings(config)
    batch_invariant = batch_invariant_setting(config)

    def load(spec: ModelSpec, plan: LoadPlan, on_progress: LoadProgress | None) -> Engine:
        with load_progress.load(spec.id) as shown:
            return _load(spec, plan, _both(shown, on_progress))

    def _load(spec: ModelSpec, plan: LoadPlan, on_progress: LoadProgress) -> Engine:
        settings = ContextSettings(
            n_ctx=plan.context_length,
            n_threads=config.threads or default_threads(),
            n_batch=plan.eval_batch_size,
            parallel=plan.parallel,
            kv_unified=plan.kv_unified,
            batch_invariant=batch_invariant,
        )
        return LlamaCppEngine.load(spec.locate(), settings, chat_template=spec.chat_template,
                                   chat_format=spec.chat_format or config.chat_format,
                                   on_progress=on_progress, max_waiting=config.queue_size,
                                   rpc=rpc, prompt_cache=prompt_cache,
                                   strict_max_tokens=config.strict_max_tokens,
                                   speculative=speculative,
                                   draft=spec.draft.locate() if spec.draft else None)

    return load


def _both(shown: LoadProgress, asked: LoadProgress | None) -> LoadProgress:
    """Report a load's progress to the terminal and to the request that asked for it."""
    if asked is None:
        return shown

    def both(fraction: float) -> None:
        shown(fraction)
        asked(fraction)

    return both


def batch_invariant_setting(config: ServeConfig) -> bool:
    """As configured; unset: on where the build carries the patched attention kernels,
    which make it free (without them, the fallback layout costs prompt speed)."""
    from parlance.engines.llamacpp import invariant_attention

    if config.batch_invariant is None:
        return invariant_attention.available()
    return config.batch_invariant


def speculative_settings(config: ServeConfig) -> SpeculativeSettings:
    """--speculative (checked by `config.resolve_config`, wherever it came from); unset:
    n-gram drafts wherever batch-invariant attention is on, which they need to leave
    the answer as it is (turned off, or a build without the patch: no drafts)."""
    from parlance.engines.llamacpp.speculation import SpeculativeMode, SpeculativeSettings

    mode = config.speculative
    if mode is None:
        mode = "ngram" if batch_invariant_setting(config) else "off"
    return SpeculativeSettings(mode=cast(SpeculativeMode, mode), draft_cost=config.draft_cost)


def prompt_cache_settings(config: ServeConfig) -> CacheSettings:
    """The prompt cache's tiers: the flags, else the defaults from this machine's free
    memory and disk space."""
    from parlance.engines.llamacpp.prompt_cache import CacheSettings, default_ram_bytes
    from parlance.engines.llamacpp.prompt_cache_disk import default_disk_bytes

    directory = Path(config.data_dir) / "prompt-cache"
    ram = (config.prompt_cache_mb * 2**20 if config.prompt_cache_mb is not None
           else default_ram_bytes(available_memory()))
    if not config.data_dir:  # (a config not resolved from the command line)
        disk = 0
    elif config.prompt_cache_disk_mb is not None:
        disk = config.prompt_cache_disk_mb * 2**20
    else:
        existing = next((p for p in (directory, *directory.parents) if p.exists()), None)
        disk = default_disk_bytes(shutil.disk_usage(existing).free if existing else None)
    settings = CacheSettings(ram_bytes=max(0, ram), disk_bytes=max(0, disk),
                             directory=directory)
    console.print(f"Prompt cache: {_mib(settings.ram_bytes)} in RAM, "
                  f"{_mib(settings.disk_bytes)} on disk"
                  + (f" in {directory}" if settings.disk_bytes else "") + " (per model)")
    return settings


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB" if size else "off"


def rpc_servers(config: ServeConfig) -> RpcServers | None:
    """The --rpc servers, each checked (a clear error for one that does not answer)."""
    if not config.rpc:
        return None
    from parlance.engines.llamacpp.rpc import RpcServers

    servers = RpcServers.parse(config.rpc)
    for device in servers.connect():
        console.print(f"RPC device {device.name} on {device.endpoint}: "
                      f"{device.free_bytes / 2**20:.0f} MiB free "
                      f"of {device.total_bytes / 2**20:.0f} MiB")
    return servers


# -- the models ----------------------------------------------------------------------


def load_defaults(config: ServeConfig) -> LoadDefaults:
    return LoadDefaults(context_length=config.ctx_size, parallel=config.parallel,
                        kv_unified=config.kv_unified)


def memory_budget(config: ServeConfig) -> int | None:
    return config.memory_budget_mb * 2**20 if config.memory_budget_mb else None


def free_memory(config: ServeConfig) -> Callable[[], int | None]:
    """What limits a load besides the budget: this machine's free memory, except with
    --rpc, where the layers and their KV cache live on the rpc-servers (a server out of
    memory fails the load there)."""
    return (lambda: None) if config.rpc else available_memory


def first_model(config: ServeConfig, registry: Registry, loader: Loader) -> list[ServedModel]:
    """The model the server starts with, loaded; none for a gateway in front of
    upstream servers that was not told to load one."""
    if not config.local_model:
        return []
    started = time.perf_counter()
    spec, engine, plan = _load_first(config, registry, loader)
    ctx = engine.model.settings  # type: ignore[attr-defined]  # (llama.cpp's engine)
    console.print(f"[green]Loaded[/] {spec.id} in {time.perf_counter() - started:.2f}s "
                  f"({ctx.parallel} slots, context {ctx.n_ctx} "
                  f"{'shared' if ctx.kv_unified else 'each'}, {ctx.n_threads} threads)"
                  + (f", drafts from {spec.draft.id}" if spec.draft else "")
                  + _format_note(engine))
    return [ServedModel(spec, engine, int(time.time()), plan.memory.total)]


def _format_note(engine: Engine) -> str:
    """The startup line's word on the chat format the model's output is parsed in."""
    template = getattr(engine, "template", None)
    fmt = getattr(template, "format", None)
    return f", chat format {fmt.name}" if fmt is not None else ""


def _load_first(config: ServeConfig, registry: Registry,
                loader: Loader) -> tuple[ModelSpec, Engine, LoadPlan]:
    """Plan the first load (absurd settings fail here, before anything is allocated),
    then load it (the loader shows its progress)."""
    spec = _with_draft(resolve_spec(config.model, registry), config, registry)
    spec.locate()  # (a missing file is said first)
    try:
        plan = plan_load(spec, LoadOptions(), load_defaults(config))
        check_fits(plan, spec.id, budget=memory_budget(config),
                   available=free_memory(config)())
    except InvalidRequest as exc:
        raise InvalidRequest(f"{exc.message} [{_FLAGS.get(exc.param or '', exc.param)}]",
                             param=exc.param, code=exc.code) from None
    return spec, loader(spec, plan, None), plan


def _with_draft(spec: ModelSpec, config: ServeConfig, registry: Registry) -> ModelSpec:
    """The model --model names, with the --draft-model that drafts for it (its memory is
    planned with the model's, and it is loaded and unloaded with it)."""
    if not config.draft_model:
        return spec
    try:
        draft = resolve_spec(config.draft_model, registry)
        draft.locate()
    except InvalidRequest as exc:
        raise InvalidRequest(f"{exc.message} [--draft-model]", param="draft_model") from None
    return replace(spec, draft=draft)


def upstream_models(config: ServeConfig) -> UpstreamModels | None:
    """The upstream servers (--upstream, [[upstreams]]) as served models; None without."""
    entries: list[tuple[str, str | None, tuple[str, ...], float]] = [
        (url, config.upstream_api_key or None, (), 1.0) for url in config.upstream]
    entries += [(e.url, e.api_key, e.models, e.weight) for e in config.upstreams]
    if not entries:
        return None
    from parlance.engines.upstream import ClientSettings, Fleet, FleetSettings, ReplicaConfig
    from parlance.models.upstream import UpstreamModels

    client = ClientSettings(max_event_bytes=config.upstream_max_event_mb * 2**20)
    fleet = Fleet([ReplicaConfig(*entry) for entry in entries],
                  FleetSettings(health_interval=config.upstream_health_interval, client=client,
                                strict_max_tokens=config.strict_max_tokens))
    for replica in fleet.replicas:
        models = ", ".join(sorted(replica.models)) or "the models it lists"
        console.print(f"Upstream {replica.label} (weight {replica.weight:g}): {models}")
    return UpstreamModels(fleet)


# -- the server ----------------------------------------------------------------------


def server_settings(config: ServeConfig) -> ServerSettings:
    """The app's settings; the Host check follows the address it listens on (--host)."""
    from parlance.models.downloads import DownloadLimits
    from parlance.server import ServerSettings

    return ServerSettings(
        api_keys=config.api_key,
        keepalive_seconds=config.keepalive_seconds,
        request_timeout=config.request_timeout,
        shutdown_grace=config.shutdown_grace,
        data_dir=Path(config.data_dir),
        responses_retention=config.responses_retention,
        integrations=integration_settings(config),
        models_dir=Path(config.models_dir),
        max_body_bytes=config.max_body_mb * 2**20,
        download_allow_hosts=config.download_allow_host,
        catalog_url=config.catalog_url,
        download_limits=DownloadLimits(max_jobs=config.download_max_jobs,
                                       timeout=config.download_timeout,
                                       min_free_bytes=config.download_min_free_mb * 2**20),
        allowed_origins=config.allowed_origin,
        allowed_hosts=config.allowed_host,
        bind_host=config.host,
    )


def integration_settings(config: ServeConfig) -> IntegrationSettings:
    from parlance.integrations.settings import IntegrationSettings, load_mcp_json

    path = Path(config.mcp_config) if config.mcp_config else Path(config.data_dir) / "mcp.json"
    configured = load_mcp_json(path) if config.mcp_config or path.is_file() else {}
    if configured:
        console.print(f"MCP plugins from {path}: " + ", ".join(f"mcp/{k}" for k in configured))
    return IntegrationSettings(allow_request_servers=config.allow_request_mcp,
                               allowed_hosts=config.mcp_allow_host, configured=configured,
                               max_rounds=config.mcp_max_rounds)


def connection_limits(config: ServeConfig) -> ConnectionLimits:
    from parlance.server.http.connections import ConnectionLimits

    return ConnectionLimits(max_connections=config.max_connections,
                            header_timeout=config.header_timeout,
                            keepalive_timeout=config.keepalive_timeout)

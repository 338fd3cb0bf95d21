"""`parlance serve` / `parlance models`: build settings, load the model, run uvicorn; and
the commands that talk to a running server (`chat`, `ps`, `load`, `unload`, `pull`,
`models --url`: `parlance.console`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import cast

from rich.console import Console
from rich.table import Table

from parlance.config import (
    CHOICES,
    SERVE_DEFAULTS,
    ServeConfig,
    default_data_dir,
    env_name,
    resolve_config,
)
from parlance.console import entry as console_entry
from parlance.console.load_progress import LoadProgressView
from parlance.core.errors import EngineFailure, InvalidRequest, Unavailable

console = Console(stderr=True)
load_progress = LoadProgressView(console)  # every load of `serve`, at start and on demand


def _parser() -> argparse.ArgumentParser:
    from parlance.models.load_plan import DEFAULT_CONTEXT

    parser = argparse.ArgumentParser(prog="parlance", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a model over HTTP")
    serve.add_argument("--model", help="registry key, preset name or path to a .gguf file "
                       "(none is loaded at start with --upstream and no --model)")
    serve.add_argument("--model-alias", dest="model_alias", action="append",
                       help="PATTERN=MODEL: requests naming PATTERN (a name or a glob such "
                            "as 'claude-*') get the registry model MODEL; repeatable "
                            "(default: none)")
    serve.add_argument("--host", help="address to listen on (0.0.0.0: every interface)")
    serve.add_argument("--port", type=int, help="TCP port to listen on")
    serve.add_argument("--allowed-origin", dest="allowed_origin", action="append",
                       help="a web page origin (scheme://host[:port]) that may call this "
                            "server from a browser, beside loopback ones; '*': any "
                            "(repeatable; default: loopback origins only)")
    serve.add_argument("--allowed-host", dest="allowed_host", action="append",
                       help="a Host name requests may use beside loopback names (the only ones "
                            "accepted when --host is a loopback address); '*': any "
                            "(repeatable; default: none)")
    serve.add_argument("--ctx-size", dest="ctx_size", type=int,
                       help="context of each sequence, in tokens (default: the preset's "
                            f"ctx_size, else {DEFAULT_CONTEXT} or the model's training "
                            "context if smaller)")
    serve.add_argument("--threads", type=int,
                       help="CPU threads that decode (default: every CPU this process may "
                            "run on)")
    serve.add_argument("--parallel", type=int,
                       help="sequences decoded together (slots sharing the context)")
    serve.add_argument("--queue-size", dest="queue_size", type=int,
                       help="sequences (prompts × n) that may wait for a slot before 429; "
                            "also the most one request may ask for")
    serve.add_argument("--kv-unified", dest="kv_unified", action="store_const", const=True,
                       help="one KV cache of --ctx-size cells shared by all slots, instead of "
                            "--ctx-size per slot (less memory; results then depend on batching)")
    serve.add_argument("--strict-max-tokens", dest="strict_max_tokens", action="store_const",
                       const=True, help="refuse a request whose prompt plus max_tokens "
                       "exceeds the context, as OpenAI does (otherwise max_tokens is a "
                       "ceiling: the answer ends with 'length' where the context is full)")
    serve.add_argument("--batch-invariant", dest="batch_invariant", action="store_const",
                       const=True, help="attention whose greedy answers are bit-identical "
                       "whether a request runs alone or batched, cold or over a cached "
                       "prefix (default: on where `make` built llama-cpp-python with "
                       "Parlance's patch, which makes it free; see README)")
    serve.add_argument("--no-batch-invariant", dest="batch_invariant", action="store_const",
                       const=False, help="llama.cpp's own attention kernels, chosen by "
                       "each batch's shape (a greedy answer may then differ between runs; "
                       "the default only where llama-cpp-python lacks Parlance's patch)")
    serve.add_argument("--speculative", choices=CHOICES["speculative"],
                       help="speculative decoding: 'ngram' drafts tokens from the prompt and "
                            "the text so far and verifies them in the same decode step "
                            "(the same output either way: it implies --batch-invariant); "
                            "'draft' drafts them with --draft-model (implied by it); "
                            "'off' (the default) decodes one token per step")
    serve.add_argument("--draft-model", dest="draft_model",
                       help="a smaller model with the same tokenizer (path to a .gguf file "
                            "or registry name) whose guesses the --model model verifies: "
                            "speculative decoding with a draft model (--speculative draft); "
                            "default: none")
    serve.add_argument("--draft-cost", dest="draft_cost", type=float,
                       help="what a decode of the draft model costs, relative to one of "
                            "the model, as speculation weighs it against the tokens its "
                            "drafts are expected to save (default: the ratio of their "
                            "weights' sizes)")
    serve.add_argument("--max-body-mb", dest="max_body_mb", type=int,
                       help="largest request body accepted, in MiB (larger: 413)")
    serve.add_argument("--api-key", dest="api_key", action="append",
                       help="require this API key (repeatable; default: none, no key needed)")
    serve.add_argument("--keepalive-seconds", dest="keepalive_seconds", type=float,
                       help="seconds a stream may stay silent before the server sends a "
                            "keepalive (an SSE comment, or the dialect's ping; 0: never)")
    serve.add_argument("--request-timeout", dest="request_timeout", type=float,
                       help="seconds a request may run, its whole stream included, before it "
                            "is ended with a timeout error")
    serve.add_argument("--shutdown-grace", dest="shutdown_grace", type=float,
                       help="seconds running generations may finish on SIGTERM/SIGINT before "
                            "they are ended with an error (new requests get 503 meanwhile)")
    serve.add_argument("--max-connections", dest="max_connections", type=int,
                       help="open connections served; one more is answered 503 and closed")
    serve.add_argument("--keepalive-timeout", dest="keepalive_timeout", type=float,
                       help="seconds an idle kept-alive connection stays open")
    serve.add_argument("--header-timeout", dest="header_timeout", type=float,
                       help="seconds a connection has to send its request headers")
    serve.add_argument("--data-dir", dest="data_dir", type=Path,
                       help="where stored responses (SQLite) and the disk prompt cache live "
                            "(default: $XDG_DATA_HOME/parlance, else ~/.local/share/parlance)")
    serve.add_argument("--responses-retention", dest="responses_retention", type=int,
                       help="how many stored responses to keep (the newest)")
    serve.add_argument("--allow-request-mcp", dest="allow_request_mcp", action="store_const",
                       const=True, help="let requests name their own MCP servers "
                       "(LM Studio's ephemeral_mcp integrations)")
    serve.add_argument("--mcp-allow-host", dest="mcp_allow_host", action="append",
                       help="a private or loopback host those servers may reach "
                            "(repeatable; default: none)")
    serve.add_argument("--mcp-config", dest="mcp_config", type=Path,
                       help="mcp.json with the MCP servers requests may use as plugins "
                            "(default: mcp.json in the data dir, when present)")
    serve.add_argument("--mcp-max-rounds", dest="mcp_max_rounds", type=int,
                       help="model calls that may end in server-side tool calls per request")
    serve.add_argument("--models-dir", dest="models_dir", type=Path,
                       help="GGUF files (publisher/repo/file.gguf) loaded on first use, "
                            "and where downloads go (default: models in the data dir)")
    serve.add_argument("--download-allow-host", dest="download_allow_host", action="append",
                       help="a private or loopback host model downloads may reach "
                            "(repeatable; default: none)")
    serve.add_argument("--download-max-jobs", dest="download_max_jobs", type=int,
                       help="model downloads running at once; one more is refused until one "
                            "has finished")
    serve.add_argument("--download-timeout", dest="download_timeout", type=float,
                       help="seconds one model download may take; a slower one fails and "
                            "resumes when asked for again")
    serve.add_argument("--download-min-free-mb", dest="download_min_free_mb", type=int,
                       help="free disk, in MiB, that model downloads always leave; a file "
                            "that does not fit is refused or stopped")
    serve.add_argument("--jit-ttl", dest="jit_ttl", type=float,
                       help="seconds a model loaded on first use may stay idle (0: forever)")
    serve.add_argument("--memory-budget-mb", dest="memory_budget_mb", type=int,
                       help="unload idle models so the loaded ones (weights, KV cache and "
                            "compute buffers, estimated) stay within this; loads larger "
                            "than this or than the free memory are refused (0: no budget)")
    serve.add_argument("--prompt-cache-mb", dest="prompt_cache_mb", type=int,
                       help="MiB of RAM per model for evaluated prompt prefixes kept beyond "
                            "the slots, restored when a prompt shares one (default: the least "
                            "of 1/8 of the available memory and 2048; 0: off)")
    serve.add_argument("--prompt-cache-disk-mb", dest="prompt_cache_disk_mb", type=int,
                       help="MiB of disk per model for prompt prefixes kept across restarts, "
                            "under prompt-cache/ in the data dir (default: the least of 1/10 "
                            "of the free space and 4096; 0: off)")
    serve.add_argument("--upstream", action="append", metavar="URL",
                       help="an OpenAI-compatible server (vLLM, SGLang, llama-server, Ollama, "
                            "LM Studio, Parlance) whose models this server serves too, "
                            "balanced over every server that lists the same model "
                            "(repeatable; default: none); with no --model, no local model "
                            "is loaded")
    serve.add_argument("--upstream-api-key", dest="upstream_api_key",
                       help="the API key sent to the --upstream servers (default: none)")
    serve.add_argument("--upstream-health-interval", dest="upstream_health_interval",
                       type=float, help="seconds between health checks (and model "
                       "discovery) of the upstream servers")
    serve.add_argument("--upstream-max-event-mb", dest="upstream_max_event_mb", type=int,
                       help="largest event of an upstream stream (and largest "
                            "embeddings answer), in MiB; a server that sends a larger one "
                            "has that stream or answer ended with an error")
    serve.add_argument("--rpc", action="append", metavar="HOST:PORT",
                       help="a llama.cpp rpc-server to hold the models' layers (repeatable: "
                            "they are split by the servers' free memory; to use this machine "
                            "as well, run an rpc-server here too; default: none)")
    for action in serve._actions:
        if action.dest != "help":
            action.help = f"{action.help} [{_default_and_env(action.dest)}]"
    models = commands.add_parser("models", help="list the models you can serve (with --url: "
                                                "the models a running server has)")
    for sub in (serve, models):
        sub.add_argument("--config", type=Path, help="TOML file with [serve] and [presets.*]"
                         f" [env {env_name('config')}; default ./parlance.toml]")
    console_entry.add_server_flags(models, default_url=False, what="list the models of the "
                                   "server at this URL instead of this machine's registry")
    console_entry.add_commands(commands)
    return parser


def _default_and_env(field: str) -> str:
    """`default X; env PARLANCE_X` for a flag whose default is a value (the others say
    theirs in words), `env PARLANCE_X` otherwise."""
    default = SERVE_DEFAULTS.get(field)
    env = f"env {env_name(field)}"
    if default is False:
        return f"default off; {env}"
    if default in (None, "", ()):
        return env
    shown = f"{default:g}" if isinstance(default, float) else str(default)
    return f"default {shown}; {env}"


def _engine_loader(config: ServeConfig):
    """Loads one model into a fresh llama.cpp engine (blocking; run off the loop), with
    the settings of a load plan (checked and resolved by `models.load_plan`); its layers
    on the --rpc servers when given (checked here, before any load)."""
    from parlance.config import default_threads
    from parlance.engines.llamacpp import LlamaCppEngine
    from parlance.engines.llamacpp.model import ContextSettings

    rpc = _rpc_servers(config)
    prompt_cache = prompt_cache_settings(config)
    speculative = speculative_settings(config)
    batch_invariant = batch_invariant_setting(config)

    def load(spec, plan, on_progress):
        with load_progress.load(spec.id) as shown:
            return _load(spec, plan, _both(shown, on_progress))

    def _load(spec, plan, on_progress):
        settings = ContextSettings(
            n_ctx=plan.context_length,
            n_threads=config.threads or default_threads(),
            n_batch=plan.eval_batch_size,
            parallel=plan.parallel,
            kv_unified=plan.kv_unified,
            batch_invariant=batch_invariant,
        )
        return LlamaCppEngine.load(spec.locate(), settings, chat_template=spec.chat_template,
                                   on_progress=on_progress, max_waiting=config.queue_size,
                                   rpc=rpc, prompt_cache=prompt_cache,
                                   strict_max_tokens=config.strict_max_tokens,
                                   speculative=speculative,
                                   draft=spec.draft.locate() if spec.draft else None)

    return load


def _both(shown, asked):
    """Report a load's progress to the terminal and to the request that asked for it."""
    if asked is None:
        return shown
    return lambda fraction: (shown(fraction), asked(fraction))


def batch_invariant_setting(config: ServeConfig) -> bool:
    """As configured; unset: on where the build carries the patched attention kernels,
    which make it free (without them, the fallback layout costs prompt speed)."""
    from parlance.engines.llamacpp import invariant_attention

    if config.batch_invariant is None:
        return invariant_attention.available()
    return config.batch_invariant


def speculative_settings(config: ServeConfig):
    """--speculative (checked by `config.resolve_config`, wherever it came from)."""
    from parlance.engines.llamacpp.speculation import SpeculativeMode, SpeculativeSettings

    return SpeculativeSettings(mode=cast(SpeculativeMode, config.speculative),
                               draft_cost=config.draft_cost)


def prompt_cache_settings(config: ServeConfig):
    """The prompt cache's tiers: the flags, else the defaults from this machine's free
    memory and disk space."""
    import shutil

    from parlance.engines.llamacpp.prompt_cache import CacheSettings, default_ram_bytes
    from parlance.engines.llamacpp.prompt_cache_disk import default_disk_bytes
    from parlance.models.memory_estimate import available_memory

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


def load_defaults(config: ServeConfig):
    from parlance.models.load_plan import LoadDefaults

    return LoadDefaults(context_length=config.ctx_size, parallel=config.parallel,
                        kv_unified=config.kv_unified)


def memory_budget(config: ServeConfig) -> int | None:
    return config.memory_budget_mb * 2**20 if config.memory_budget_mb else None


# The flags behind a load plan's parameters, to name them in a refusal.
_FLAGS = {"context_length": "--ctx-size (or the preset's ctx_size)", "parallel": "--parallel",
          "model": "--model"}


def _rpc_servers(config: ServeConfig):
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


def _free_memory(config: ServeConfig):
    """What limits a load besides the budget: this machine's free memory, except with
    --rpc, where the layers and their KV cache live on the rpc-servers (a server out of
    memory fails the load there)."""
    from parlance.models.memory_estimate import available_memory

    return (lambda: None) if config.rpc else available_memory


def _load_first(config: ServeConfig, registry: dict, loader):
    """Plan the first load (absurd settings fail here, before anything is allocated),
    then load it (the loader shows its progress)."""
    from parlance.models.load_plan import LoadOptions, check_fits, plan_load
    from parlance.models.registry import resolve_spec

    spec = _with_draft(resolve_spec(config.model, registry), config, registry)
    spec.locate()  # (a missing file is said first)
    try:
        plan = plan_load(spec, LoadOptions(), load_defaults(config))
        check_fits(plan, spec.id, budget=memory_budget(config),
                   available=_free_memory(config)())
    except InvalidRequest as exc:
        raise InvalidRequest(f"{exc.message} [{_FLAGS.get(exc.param or '', exc.param)}]",
                             param=exc.param, code=exc.code) from None
    return spec, loader(spec, plan, None), plan


def _with_draft(spec, config: ServeConfig, registry: dict):
    """The model --model names, with the --draft-model that drafts for it (its memory is
    planned with the model's, and it is loaded and unloaded with it)."""
    from dataclasses import replace

    from parlance.models.registry import resolve_spec

    if not config.draft_model:
        return spec
    try:
        draft = resolve_spec(config.draft_model, registry)
        draft.locate()
    except InvalidRequest as exc:
        raise InvalidRequest(f"{exc.message} [--draft-model]", param="draft_model") from None
    return replace(spec, draft=draft)


def _first_model(config: ServeConfig, registry: dict, loader) -> list:
    """The model the server starts with, loaded; none for a gateway in front of
    upstream servers that was not told to load one."""
    from parlance.models.served import ServedModel

    if not config.local_model:
        return []
    started = time.perf_counter()
    spec, engine, plan = _load_first(config, registry, loader)
    ctx = engine.model.settings
    console.print(f"[green]Loaded[/] {spec.id} in {time.perf_counter() - started:.2f}s "
                  f"({ctx.parallel} slots, context {ctx.n_ctx} "
                  f"{'shared' if ctx.kv_unified else 'each'}, {ctx.n_threads} threads)"
                  + (f", drafts from {spec.draft.id}" if spec.draft else ""))
    return [ServedModel(spec, engine, int(time.time()), plan.memory.total)]


def _upstreams(config: ServeConfig):
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


def build_app(config: ServeConfig, registry: dict):
    """The app `serve` runs: the first model loaded, the others on demand."""
    from parlance.models.catalog import catalog
    from parlance.models.served import ServedModels
    from parlance.server import create_app

    loader = _engine_loader(config)
    models = ServedModels(
        _first_model(config, registry, loader),
        catalog=catalog(registry, Path(config.models_dir)), loader=loader,
        idle_ttl=config.jit_ttl or None, memory_budget=memory_budget(config),
        defaults=load_defaults(config), free_memory=_free_memory(config),
        upstreams=_upstreams(config))
    return create_app(models, server_settings(config))


def _limits(config: ServeConfig):
    from parlance.server.http.connections import ConnectionLimits

    return ConnectionLimits(max_connections=config.max_connections,
                            header_timeout=config.header_timeout,
                            keepalive_timeout=config.keepalive_timeout)


def serve(config: ServeConfig, registry: dict) -> int:
    app = build_app(config, registry)
    console.print(f"Serving on [bold]http://{config.host}:{config.port}[/] "
                  f"(OpenAI base URL http://{config.host}:{config.port}/v1, LM Studio API "
                  f"/api/v1; more models from {config.models_dir})")
    from parlance.server.runner import Listen, run

    run(app, Listen(config.host, config.port, _limits(config)))
    return 0


@contextlib.contextmanager
def local_server(config: ServeConfig, registry: dict) -> Iterator[str]:
    """`parlance chat` without --url: the server `serve` would run, on a free loopback
    port in a thread of this process, logging warnings only (the terminal is the
    chat's); yields its URL, and drains it on the way out."""
    from parlance.server.runner import Listen, log_config, server

    app = build_app(config, registry)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    running = server(app, Listen("127.0.0.1", port, _limits(config)),
                     log_config=log_config("WARNING"))
    thread = threading.Thread(target=running.run, kwargs={"sockets": [sock]},
                              name="parlance-server", daemon=True)
    try:
        thread.start()
        while not running.started:
            if not thread.is_alive():
                raise Unavailable("the in-process server did not start")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        running.should_exit = True
        if thread.is_alive():
            thread.join()
        sock.close()


def server_settings(config: ServeConfig):
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
        download_limits=DownloadLimits(max_jobs=config.download_max_jobs,
                                       timeout=config.download_timeout,
                                       min_free_bytes=config.download_min_free_mb * 2**20),
        allowed_origins=config.allowed_origin,
        allowed_hosts=config.allowed_host,
        bind_host=config.host,
    )


def integration_settings(config: ServeConfig):
    from parlance.integrations.settings import IntegrationSettings, load_mcp_json

    path = Path(config.mcp_config) if config.mcp_config else Path(config.data_dir) / "mcp.json"
    configured = load_mcp_json(path) if config.mcp_config or path.is_file() else {}
    if configured:
        console.print(f"MCP plugins from {path}: " + ", ".join(f"mcp/{k}" for k in configured))
    return IntegrationSettings(allow_request_servers=config.allow_request_mcp,
                               allowed_hosts=config.mcp_allow_host, configured=configured,
                               max_rounds=config.mcp_max_rounds)


def list_models(registry: dict) -> int:
    table = Table("id", "aliases", "context", "sampling defaults")
    for spec in registry.values():
        table.add_row(spec.id, ", ".join(spec.aliases), str(spec.ctx_size or ""),
                      ", ".join(f"{k}={v}" for k, v in spec.sampling.items()))
    Console().print(table)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if console_entry.wants_server(args):
            data_dir = os.environ.get(env_name("data_dir")) or default_data_dir()
            return console_entry.run(args, lambda: local_server(*_resolved(args)),
                                     history=Path(data_dir) / "chat_history")
        config, registry = _resolved(args)
        if args.command == "models":
            return list_models(registry)
        return serve(config, registry)
    except (InvalidRequest, Unavailable, EngineFailure, FileNotFoundError, ValueError) as exc:
        console.print(f"[red]error:[/] {getattr(exc, 'message', exc)}")
        return 2


def _resolved(args: argparse.Namespace) -> tuple[ServeConfig, dict]:
    config_path = args.config or (Path(os.environ[env_name("config")])
                                  if os.environ.get(env_name("config")) else None)
    return resolve_config(vars(args), os.environ, config_path)


if __name__ == "__main__":
    sys.exit(main())

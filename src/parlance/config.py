"""Serve settings from flags, `PARLANCE_*` environment variables and a TOML file.

Precedence: command-line flag > environment > the file's `[serve]` table >
built-in default. The file's `[presets.NAME]` tables add models to the
registry (model file, context size, chat template override, default sampling)
that `--model NAME` then serves; `model_alias` (`--model-alias PATTERN=MODEL`) gives a
registry model more names, glob patterns included.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from parlance.models.registry import (
    DEFAULT_MODEL,
    ModelSpec,
    builtin_registry,
    with_aliases,
    with_preset,
)
from parlance.server.settings import DEFAULT_MAX_BODY_MB

DEFAULT_CONFIG_FILE = "parlance.toml"
# Request bodies above this get a 413. A 1M-token text prompt is about 4 MiB (6 when
# JSON-escaped), so any prompt a local model can evaluate fits with room to spare,
# while decoding the largest body stays a fraction of a second of one worker thread.


@dataclass(frozen=True, slots=True)
class UpstreamEntry:
    """An OpenAI-compatible server whose models this one serves. `models` empty: the
    models its /v1/models lists."""

    url: str
    api_key: str | None = None
    models: tuple[str, ...] = ()
    weight: float = 1.0


def upstream_entries(tables: Any) -> tuple[UpstreamEntry, ...]:
    """The file's `[[upstreams]]` tables, checked."""
    if not isinstance(tables, list):
        raise ValueError("[[upstreams]] must be an array of tables")
    out = []
    for i, table in enumerate(tables):
        where = f"[[upstreams]] #{i + 1}"
        if not isinstance(table, dict) or not isinstance(table.get("url"), str):
            raise ValueError(f"{where} needs a url")
        unknown = set(table) - {"url", "api_key", "models", "weight"}
        if unknown:
            raise ValueError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
        models = table.get("models", [])
        if isinstance(models, str):
            models = [models]
        weight = table.get("weight", 1.0)
        if not isinstance(weight, int | float) or isinstance(weight, bool) or weight <= 0:
            raise ValueError(f"{where}: weight must be a positive number")
        out.append(UpstreamEntry(table["url"], table.get("api_key") or None,
                                 tuple(str(m) for m in models), float(weight)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ServeConfig:
    model: str = DEFAULT_MODEL
    host: str = "127.0.0.1"
    port: int = 8080
    allowed_origin: tuple[str, ...] = ()  # browser origins beside loopback ones ("*": any)
    allowed_host: tuple[str, ...] = ()  # Host names beside loopback ones ("*": any)
    ctx_size: int | None = None
    threads: int | None = None
    parallel: int = 4
    queue_size: int = 64  # sequences (prompts × n) that may wait for a slot
    kv_unified: bool = False
    strict_max_tokens: bool = False  # refuse max_tokens beyond the context (OpenAI's rule)
    # Speculative decoding in the llama.cpp engine: "ngram" (prompt-lookup drafts),
    # "draft" (a draft model's guesses: --draft-model, which implies it) or "off". Off
    # by default: it pays only on text that copies long spans of its input.
    speculative: str = "off"
    draft_model: str = ""  # a path or registry name: drafts for the --model model
    # A decode of the draft model relative to one of the target; None: the ratio of
    # their weights' sizes
    draft_cost: float | None = None
    # Batch-invariant attention (greedy answers repeat whatever the batch or cache).
    # None: on where this build has Parlance's attention patch, whose kernels cost
    # nothing (README); off where it has not (the fallback layout slows prompts).
    # Speculation turns it on either way.
    batch_invariant: bool | None = None
    api_key: tuple[str, ...] = ()
    keepalive_seconds: float = 10.0
    request_timeout: float = 120.0
    shutdown_grace: float = 10.0  # seconds running generations may finish on SIGTERM/SIGINT
    max_connections: int = 256  # open connections; one more is answered 503 and closed
    keepalive_timeout: float = 5.0  # seconds an idle kept-alive connection stays open
    header_timeout: float = 10.0  # seconds a connection has to send its request headers
    data_dir: str = ""  # empty: the user's data directory (default_data_dir)
    responses_retention: int = 10_000
    allow_request_mcp: bool = False  # MCP servers named by a request (ephemeral_mcp)
    mcp_allow_host: tuple[str, ...] = ()  # private hosts those may reach
    mcp_config: str = ""  # mcp.json; empty: <data dir>/mcp.json when it exists
    mcp_max_rounds: int = 8
    models_dir: str = ""  # GGUF files to serve on demand; empty: <data dir>/models
    download_allow_host: tuple[str, ...] = ()  # private hosts model downloads may reach
    download_max_jobs: int = 4  # downloads running at once; one more is refused
    download_timeout: float = 21600.0  # seconds one download may take (resumed when asked again)
    download_min_free_mb: int = 1024  # free disk downloads always leave
    jit_ttl: float = 3600.0  # seconds a model loaded on demand may stay idle; 0: forever
    memory_budget_mb: int = 0  # loaded models' estimated memory; 0: no limit
    # Evaluated prompt prefixes kept beyond the slots, per model; None: the default
    # (RAM: min(1/8 of the available memory, 2 GiB); disk: min(1/10 of the free
    # space, 4 GiB), under <data dir>/prompt-cache); 0: off
    prompt_cache_mb: int | None = None
    prompt_cache_disk_mb: int | None = None
    max_body_mb: int = DEFAULT_MAX_BODY_MB  # larger request bodies are refused (413)
    model_alias: tuple[str, ...] = ()  # PATTERN=MODEL: more names (globs: claude-*) for MODEL
    rpc: tuple[str, ...] = ()  # HOST:PORT of llama.cpp rpc-servers that hold the layers
    upstream: tuple[str, ...] = ()  # URLs of OpenAI-compatible servers whose models we serve
    upstream_api_key: str = ""  # the key sent to the --upstream servers
    upstream_health_interval: float = 5.0  # seconds between health checks of upstreams
    upstream_max_event_mb: int = 8  # one event of an upstream stream; larger ends it
    # The file's [[upstreams]] tables (url, api_key, models, weight); not a flag
    upstreams: tuple[UpstreamEntry, ...] = ()
    # Whether a local model is loaded at start: yes unless upstreams are configured
    # and no model was named (a gateway in front of other servers)
    local_model: bool = True


# Each setting's built-in default (what `parlance serve --help` shows).
SERVE_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(ServeConfig)}
# Settings with a closed set of values, checked here whichever source gave them
# (argparse's `choices` cover only the flags). `speculative` is the llama.cpp engine's
# `SPECULATIVE_MODES` (not imported: that would load llama.cpp for every command).
CHOICES: dict[str, tuple[str, ...]] = {"speculative": ("ngram", "draft", "off")}
_TYPES = {f.name: str(f.type) for f in fields(ServeConfig)}  # ("int | None", …)


def env_name(field: str) -> str:
    return f"PARLANCE_{field.upper()}"


def _coerce(field: str, raw: Any) -> Any:
    kind = _TYPES[field]
    if "tuple" in kind:  # repeatable flags; comma-separated in env and file
        items = raw.split(",") if isinstance(raw, str) else list(raw)
        return tuple(k.strip() for k in items if k.strip())
    if "bool" in kind:
        if isinstance(raw, bool):
            return raw
        return str(raw).strip().lower() in ("1", "true", "yes", "on")
    if "int" in kind:
        return int(raw)
    if "float" in kind:
        return float(raw)
    return str(raw)


def _setting(field: str, raw: Any, source: str) -> Any:
    """`raw` as the setting's type (and one of its `CHOICES`); a value that is neither
    is refused naming where it came from."""
    try:
        value = _coerce(field, raw)
    except (ValueError, TypeError):
        raise ValueError(f"{source}: {field} must be {_TYPES[field]}, not {raw!r}") from None
    choices = CHOICES.get(field)
    if choices is not None:
        value = value.strip().lower()
        if value not in choices:
            raise ValueError(f"{source}: {field} must be one of {', '.join(choices)}, "
                             f"not {raw!r}")
    return value


def _draft_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """A draft model drafts in `draft` mode, which it implies; either without the other,
    or a draft for no local model, is refused."""
    draft, mode = values.get("draft_model"), values.get("speculative")
    if not draft:
        if mode == "draft":
            raise ValueError("speculative 'draft' needs a draft model (--draft-model)")
        if values.get("draft_cost") is not None:
            raise ValueError("draft_cost prices a draft model: give one (--draft-model)")
        return {}
    if mode not in (None, "draft"):
        raise ValueError(f"--draft-model drafts with that model: speculative must be "
                         f"'draft' (or left out), not {mode!r}")
    if not values["local_model"]:
        raise ValueError("--draft-model drafts for the model --model loads; none is given")
    cost = values.get("draft_cost")
    if cost is not None and not 0 <= cost < float("inf"):
        raise ValueError(f"draft_cost must be a number of 0 or more, not {cost!r}")
    return {"speculative": "draft"}


def read_config_file(path: Path | None) -> tuple[dict[str, Any], Path | None]:
    """The file's document and the file read (None: no file)."""
    if path is None:
        default = Path(DEFAULT_CONFIG_FILE)
        if not default.is_file():
            return {}, None
        path = default
    with path.open("rb") as fh:
        return tomllib.load(fh), path


def resolve_config(
    flags: Mapping[str, Any], env: Mapping[str, str], config_path: Path | None
) -> tuple[ServeConfig, dict[str, ModelSpec]]:
    document, read = read_config_file(config_path)
    base_dir = read.parent if read is not None else Path.cwd()
    registry = builtin_registry()
    for name, table in document.get("presets", {}).items():
        registry = with_preset(registry, name, table, base_dir)
    values: dict[str, Any] = {}
    file_defaults = document.get("serve", {})
    for field in (f.name for f in fields(ServeConfig)):
        if flags.get(field) not in (None, (), []):
            values[field] = _setting(field, flags[field], "--" + field.replace("_", "-"))
        elif env.get(env_name(field)):
            values[field] = _setting(field, env[env_name(field)], env_name(field))
        elif field in file_defaults:
            values[field] = _setting(field, file_defaults[field], f"[serve] in {read}")
    values["upstreams"] = upstream_entries(document.get("upstreams", []))
    if "local_model" not in values:
        values["local_model"] = "model" in values or not (values.get("upstream")
                                                         or values["upstreams"])
    values.update(_draft_settings(values))
    config = ServeConfig(**values)
    registry = with_aliases(registry, config.model_alias)
    if not config.data_dir:
        config = replace(config, data_dir=str(default_data_dir()))
    if not config.models_dir:
        config = replace(config, models_dir=str(Path(config.data_dir) / "models"))
    return config, registry


def default_data_dir() -> Path:
    """$XDG_DATA_HOME/parlance, else ~/.local/share/parlance."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "parlance"


def default_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else (os.cpu_count() or 1))

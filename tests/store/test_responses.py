"""The response store refuses a data directory it cannot write with one line naming
the file and why (issue 39: a read-only `--data-dir` ended `serve` with a traceback)."""

from __future__ import annotations

import os
import sqlite3

import pytest

from parlance.core.errors import Unavailable
from parlance.store.responses import ResponseStore


def test_a_data_dir_through_a_file_is_one_clear_error(tmp_path):
    (tmp_path / "plain-file").write_text("")
    path = tmp_path / "plain-file" / "data" / "responses.sqlite3"
    with pytest.raises(Unavailable) as caught:
        ResponseStore(path)
    assert str(path) in caught.value.message and "--data-dir" in caught.value.message
    assert "\n" not in caught.value.message


def test_a_store_sqlite_cannot_write_is_one_clear_error(tmp_path, monkeypatch):
    """What a read-only directory gives (as root, permissions cannot make one here)."""
    real = sqlite3.connect

    def read_only(database: str, **kwargs: object) -> sqlite3.Connection:
        return real(f"file:{database}?mode=ro", uri=True, **kwargs)

    path = tmp_path / "responses.sqlite3"
    ResponseStore(path).close()  # the file exists; it may not be written
    monkeypatch.setattr(sqlite3, "connect", read_only)
    with pytest.raises(Unavailable) as caught:
        ResponseStore(path)
    assert "readonly" in caught.value.message or "read-only" in caught.value.message


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_read_only_data_dir_is_one_clear_error(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o555)
    with pytest.raises(Unavailable):
        ResponseStore(data / "responses.sqlite3")

"""The prompt cache's disk tier: entries found by a later process, a writer that waits
for an idle engine, its bound, damaged and foreign files removed, a full queue."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from parlance.engines.llamacpp import prompt_cache_file
from parlance.engines.llamacpp.prompt_cache_disk import (
    DEFAULT_DISK_CAP,
    DiskTier,
    default_disk_bytes,
)
from parlance.engines.llamacpp.prompt_cache_entry import Entry
from parlance.engines.llamacpp.prompt_cache_file import SUFFIX, decode, encode, key_digest
from tests.support.prompt_cache import FACTS, KEY, entry, written


def test_written_entries_are_found_by_another_tier_on_the_same_directory(tmp_path):
    disk = DiskTier(tmp_path, FACTS, 1 << 20)
    disk.write(entry(range(40)), wait=True)
    assert len(written(disk)) == 1
    later = DiskTier(tmp_path, FACTS, 1 << 20)  # a restart: the index is read by refresh
    try:
        assert later.longest([*range(30), -1], limit=30) is None  # (not yet: no file read)
        later.refresh()
        found = later.longest([*range(30), -1], limit=30)
        assert found is not None and found.length == 30 and found.tier == "disk"
        loaded = later.load(found.entry)
        assert loaded is not None and loaded.state == bytes(100)
        assert later.count == 1 and later.bytes == len(encode(entry(range(40)), KEY))
    finally:
        later.close()
    other = DiskTier(tmp_path, {**FACTS, "size": 2}, 1 << 20)  # another model file
    try:
        other.refresh()
        assert other.longest(list(range(30)), limit=29) is None
    finally:
        other.close()


class WatchedDisk(DiskTier):
    """A disk tier that says when its writer begins to wait for the engine (`holding`)."""

    def __init__(self, *args: object) -> None:
        self.holding = threading.Event()  # (before the writer thread starts)
        super().__init__(*args)  # type: ignore[arg-type]

    def _holding(self) -> None:
        self.holding.set()


def test_the_writer_waits_while_the_engine_runs_and_writes_once_it_is_idle(tmp_path):
    disk = WatchedDisk(tmp_path, FACTS, 1 << 20)
    disk.engine_busy(True)
    disk.write(entry(range(40)))
    assert disk.holding.wait(30)  # it holds the entry, and has written nothing
    assert not list(tmp_path.rglob(f"*{SUFFIX}")) and not list(tmp_path.rglob(".tmp-*"))
    disk.engine_busy(False)
    assert len(written(disk)) == 1


def test_a_state_larger_than_a_write_piece_reads_back_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(prompt_cache_file, "WRITE_PIECE", 64)
    big = Entry(tuple(range(40)), bytes(range(256)) * 3 + b"tail")
    disk = DiskTier(tmp_path, FACTS, 1 << 20)
    disk.write(big, wait=True)
    (path,) = written(disk)
    assert path.read_bytes() == encode(big, KEY)
    back = decode(path.read_bytes(), KEY)
    assert (back.tokens, back.state) == (big.tokens, big.state)



def file_holding(disk: DiskTier, first_token: int) -> Path:
    return next(p for p in disk.directory.glob(f"*{SUFFIX}")
                if decode(p.read_bytes(), KEY).tokens[0] == first_token)


def test_the_disk_bound_evicts_the_least_recently_used_files(tmp_path):
    size = len(encode(entry(range(40)), KEY))
    disk = DiskTier(tmp_path, FACTS, 2 * size + 10)
    for k, start in enumerate((100, 200)):
        disk.write(entry(range(start, start + 40)), wait=True)
        disk.close()
        disk = DiskTier(tmp_path, FACTS, 2 * size + 10)
        then = time.time() - 100 + k
        os.utime(file_holding(disk, start), (then, then))
    disk.refresh()
    used = disk.longest(list(range(100, 140)), limit=39)
    assert used is not None and disk.load(used.entry) is not None  # now the newest
    disk.write(entry(range(300, 340)), wait=True)
    files = written(disk)
    assert len(files) == 2 and sum(f.stat().st_size for f in files) <= 2 * size + 10
    survivor = DiskTier(tmp_path, FACTS, 1 << 20)
    try:
        survivor.refresh()
        assert survivor.longest(list(range(200, 240)), limit=39) is None
        assert survivor.longest(list(range(100, 140)), limit=39) is not None
    finally:
        survivor.close()


def test_damaged_and_foreign_files_are_removed_and_never_used(tmp_path):
    disk = DiskTier(tmp_path, FACTS, 1 << 20)
    disk.write(entry(range(40)), wait=True)
    disk.write(entry(range(500, 540)), wait=True)
    written(disk)
    first, second = file_holding(disk, 0), file_holding(disk, 500)
    data = bytearray(first.read_bytes())
    data[-50] ^= 0xFF  # the state: noticed only when loaded
    first.write_bytes(bytes(data))
    second.write_bytes(second.read_bytes()[:-7])  # truncated: noticed by the index
    foreign = first.with_name("foreign" + SUFFIX)
    foreign.write_bytes(encode(entry(range(40)), key_digest({"model": "other"})))
    stray = first.with_name("notes.txt")
    stray.write_text("left alone")
    later = DiskTier(tmp_path, FACTS, 1 << 20)
    try:
        later.refresh()
        assert later.longest(list(range(500, 540)), limit=39) is None
        assert not second.exists() and not foreign.exists() and stray.exists()
        found = later.longest(list(range(40)), limit=39)
        assert found is not None and later.load(found.entry) is None
        assert not first.exists() and later.count == 0
    finally:
        later.close()


def test_a_full_write_queue_drops_the_write_instead_of_waiting(tmp_path):
    disk = DiskTier(tmp_path, FACTS, 1 << 20)
    disk.close()  # no writer: nothing drains the queue
    for k in range(10):
        disk.write(entry(range(k * 100, k * 100 + 40)))
    assert disk.dropped > 0



def test_the_default_bound_follows_the_free_disk_space():
    assert default_disk_bytes(10 << 30) == 1 << 30
    assert default_disk_bytes(1 << 40) == DEFAULT_DISK_CAP


def test_a_directory_or_fifo_by_an_entrys_name_costs_the_cache_nothing(tmp_path, monkeypatch):
    """Issue 39: a directory named `*.kv` raised IsADirectoryError out of the index read
    (inside the scheduler's admission: the model was dead for good), and a FIFO by that
    name blocked the open forever (under the scheduler's lock: the whole server hung).
    Only regular files are opened, without blocking; other names are skipped, left
    alone; any OS error of a read is a miss."""
    disk = DiskTier(tmp_path, FACTS, 1 << 20)
    disk.write(entry(range(40)), wait=True)
    (good,) = written(disk)
    directory = good.with_name("a-directory" + SUFFIX)
    directory.mkdir()
    fifo = good.with_name("a-fifo" + SUFFIX)
    os.mkfifo(fifo)
    later = DiskTier(tmp_path, FACTS, 1 << 20)
    found: list[object] = []
    def read() -> None:
        later.refresh()
        found.append(later.longest(list(range(40)), limit=39))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)  # (only a bound on a hang: the FIFO's open blocked for ever)
    try:
        assert not reader.is_alive(), "the index read blocked on the FIFO"
        assert found[0] is not None and later.count == 1
        assert directory.is_dir() and fifo.exists()  # not ours to remove
        # an entry that cannot be read (EIO, ESTALE, EACCES on a shared data dir): a miss
        def unreadable(*args: object, **kwargs: object) -> int:
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(os, "open", unreadable)
        assert later.load(found[0].entry) is None  # type: ignore[attr-defined]
    finally:
        later.close()


def test_the_bound_holds_for_the_whole_tree_and_older_layouts_go_first(tmp_path):
    """Issue 39: each key (context size, model file, llama.cpp version) had a budget of
    its own, so every change of layout stranded a full one."""
    size = len(encode(entry(range(40)), KEY))
    bound = 2 * size + 10
    old = DiskTier(tmp_path, {**FACTS, "n_ctx_seq": 256}, bound)  # an earlier layout
    for start in (100, 200):
        old.write(entry(range(start, start + 40)), wait=True)
    assert len(written(old)) == 2
    then = time.time() - 100
    for path in old.directory.glob(f"*{SUFFIX}"):
        os.utime(path, (then, then))
    new = DiskTier(tmp_path, FACTS, bound)
    for start in (300, 400):
        new.write(entry(range(start, start + 40)), wait=True)
    kept = written(new)
    everything = list(tmp_path.glob(f"*/*{SUFFIX}"))
    assert len(kept) == 2 and sorted(everything) == kept  # the old layout's files went
    assert sum(f.stat().st_size for f in everything) <= bound


def test_a_temporary_file_a_crash_left_goes_at_start_and_a_live_one_stays(tmp_path):
    import fcntl

    first = DiskTier(tmp_path, FACTS, 1 << 20)
    first.write(entry(range(40)), wait=True)
    written(first)
    orphan = first.directory / ".tmp-crashed"
    orphan.write_bytes(b"half a file")
    live = first.directory / ".tmp-writing"
    with live.open("wb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another server's writer, mid-write
        later = DiskTier(tmp_path, FACTS, 1 << 20)
        later.close()  # (its writer has swept before it stops)
        assert not orphan.exists() and live.exists()

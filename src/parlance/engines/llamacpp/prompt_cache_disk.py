"""The prompt cache's disk tier: saved sequences that outlive the process.

An agent's system prompt and tools (10–20k tokens, minutes of prompt processing on
a CPU) are evaluated once and read back after a restart or a reload of the model.

One directory per cache key (`prompt_cache_file.key_digest`: the model file, the
context layout, KV type, RoPE settings and llama.cpp's version), one file per entry,
in `prompt_cache_file.py`'s format. A file whose size disagrees with its header,
whose key is not ours, or whose checksum fails is removed, never used. Files are
written to a temporary name and renamed into place (a reader sees a whole file or
none), and the directory's bound is enforced under an `fcntl` lock, so two servers
may share a data dir.
Writing runs on a thread of its own behind a bounded queue: a write that finds
the queue full is dropped, a stream never waits for the disk. The bound holds for the
whole tree, every key's directory together: a change of layout, model file or
llama.cpp version starts a new directory, and the old ones' files are the least
recently used, so they go first. A temporary file no writer holds (a writer locks its
own) was left by a crash and is removed when the writer starts. The writer works only
while the engine is idle (`engine_busy`), a piece at a time: checksumming and copying
a 20k-token prefix (hundreds of MB) beside a prefill would take CPU from ggml's
threads, whose spinning barriers make any such contention cost several times its own
time on a small machine. The index (each file's tokens) is held in memory: lookups
(`longest`, `covers`) touch no file, because they run on the scheduler's thread under its
lock, where a stalled file system (NFS, a FIFO, EIO) would stall every stream. `refresh`
reads the directory again when another process changed it; the prompt cache runs it on
its reader thread before a prompt is admitted, the writer before it writes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import queue
import stat
import struct
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from parlance.engines.llamacpp.prompt_cache_entry import Entry, Found, common_prefix
from parlance.engines.llamacpp.prompt_cache_file import (
    SUFFIX,
    Unusable,
    decode,
    encoded,
    file_name,
    file_size,
    key_digest,
    read_head,
    read_tokens,
)

log = logging.getLogger(__name__)

QUEUE_ENTRIES = 4  # writes waiting for the writer; more are dropped
# Seconds a write waits for room in the queue at shutdown (the scheduler's close waits
# 30 s for its thread, which writes the slots' prefixes before the model is freed)
SHUTDOWN_WAIT = 5.0
STALE_TEMP_SECONDS = 3600.0  # a temporary file this old was left by a crashed writer
DEFAULT_DISK_CAP = 4 << 30  # bytes: the default is the least of this and
DISK_SHARE = 10  # 1/10 of the free space where the data dir lives


def default_disk_bytes(free: int | None) -> int:
    return DEFAULT_DISK_CAP if free is None else min(DEFAULT_DISK_CAP, free // DISK_SHARE)


@dataclass(slots=True)
class _Indexed:
    path: Path
    tokens: tuple[int, ...]
    size: int


class DiskTier:
    def __init__(self, root: Path, facts: Mapping[str, object], capacity: int) -> None:
        self.key = key_digest(facts)
        self.directory = root / self.key.hex()[:16]
        self.capacity = capacity
        self.dropped = 0  # writes dropped because the queue was full
        self._index: dict[Path, _Indexed] | None = None  # read on first use
        self._seen_mtime = 0
        self._index_lock = threading.Lock()  # the writer adds what it wrote
        self._queue: queue.Queue[Entry | None] = queue.Queue(QUEUE_ENTRIES)
        self._idle = threading.Event()  # the engine runs nothing: the writer may work
        self._idle.set()
        self._writer = threading.Thread(target=self._write_loop, name="parlance-kv-writer",
                                         daemon=True)
        self._writer.start()

    # -- the scheduler thread ---------------------------------------------------------

    @property
    def bytes(self) -> int:
        with self._index_lock:
            return sum(i.size for i in (self._index or {}).values())

    @property
    def count(self) -> int:
        with self._index_lock:
            return len(self._index or {})

    def covers(self, tokens: list[int] | tuple[int, ...]) -> bool:
        """(In memory: no file-system call.)"""
        n = len(tokens)
        return any(len(i.tokens) >= n and common_prefix(i.tokens, tokens) == n
                   for i in self._entries())

    def longest(self, prompt: list[int], limit: int) -> Found | None:
        """(In memory: no file-system call.)"""
        best: _Indexed | None = None
        length = 0
        for item in self._entries():
            common = min(common_prefix(item.tokens, prompt), limit)
            if common > length:
                best, length = item, common
        if best is None:
            return None
        return Found(Entry(best.tokens, b""), length, "disk")  # the state is read on load

    # -- off the scheduler's thread ----------------------------------------------------

    def refresh(self) -> None:
        """Read the index (again) if this is the first time or another process changed
        the directory. File-system calls: never on the scheduler's thread."""
        if self._index is not None and not self._changed_elsewhere():
            return
        mtime, scanned = self._scan()
        with self._index_lock:
            self._index, self._seen_mtime = scanned, mtime

    def load(self, stub: Entry) -> Entry | None:
        """The whole entry behind a lookup's answer; None (and the file removed) when it is
        gone, truncated or corrupt."""
        item = next((i for i in self._entries() if i.tokens == stub.tokens), None)
        if item is None:
            return None
        try:
            with _open_regular(item.path) as fh:
                entry = decode(fh.read(), self.key)
        except FileNotFoundError:
            self._forget(item.path)
            return None
        except Unusable as exc:
            log.warning("prompt cache: removing %s (%s)", item.path.name, exc)
            self._discard(item.path)
            return None
        except OSError as exc:  # not a regular file, no permission, EIO, ESTALE, ...
            log.warning("prompt cache: cannot read %s (%s); left alone", item.path.name, exc)
            self._forget(item.path)
            return None
        with contextlib.suppress(OSError):
            os.utime(item.path)  # recently used: evicted last
        return entry

    def write(self, entry: Entry, *, wait: bool = False) -> None:
        try:
            self._queue.put(entry, block=wait, timeout=SHUTDOWN_WAIT if wait else None)
        except queue.Full:
            self.dropped += 1

    def engine_busy(self, busy: bool) -> None:
        """The engine started (True) or stopped (False) running requests."""
        if busy:
            self._idle.clear()
        else:
            self._idle.set()

    def close(self, timeout: float = 4 * SHUTDOWN_WAIT) -> None:
        """Finish the queued writes (within `timeout`), then stop the writer."""
        self._idle.set()  # nothing runs any more
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout)
        self._writer.join(timeout)

    # -- the index --------------------------------------------------------------------

    def _entries(self) -> list[_Indexed]:
        with self._index_lock:
            return list((self._index or {}).values())

    def _changed_elsewhere(self) -> bool:
        try:
            return self.directory.stat().st_mtime_ns != self._seen_mtime
        except FileNotFoundError:
            return self._seen_mtime != 0
        except OSError:  # (EACCES, ESTALE, EIO): read again, which costs the cache only
            return True

    def _scan(self) -> tuple[int, dict[Path, _Indexed]]:
        """The directory's modification time and its readable entries."""
        try:
            mtime = self.directory.stat().st_mtime_ns
            paths = list(self.directory.iterdir())
        except FileNotFoundError:
            return 0, {}
        except OSError as exc:  # any failure of the cache costs the cache only
            log.warning("prompt cache: cannot list %s (%s)", self.directory, exc)
            return 0, {}
        found: dict[Path, _Indexed] = {}
        for path in paths:
            if path.suffix == SUFFIX:
                item = self._read_index(path)
                if item is not None:
                    found[path] = item
            elif path.name.startswith(".tmp-"):
                self._remove_stale(path)
        return mtime, found

    def _read_index(self, path: Path) -> _Indexed | None:
        """The tokens of one file; None for anything that is no readable entry (left
        alone unless it is a regular file we wrote that proved unusable)."""
        try:
            with _open_regular(path) as fh:
                size = os.fstat(fh.fileno()).st_size
                head = read_head(fh)
            return _Indexed(path, read_tokens(head, self.key, size), size)
        except FileNotFoundError:
            return None
        except (Unusable, struct.error) as exc:
            log.warning("prompt cache: removing %s (%s)", path.name, exc)
            _unlink(path)
            return None
        except OSError as exc:  # a directory, FIFO or socket by that name, EACCES, EIO
            log.warning("prompt cache: skipping %s (%s)", path.name, exc)
            return None

    def _remove_stale(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            if time.time() - path.stat().st_mtime > STALE_TEMP_SECONDS:
                path.unlink()

    def _forget(self, path: Path) -> None:
        with self._index_lock:
            if self._index is not None:
                self._index.pop(path, None)

    def _discard(self, path: Path) -> None:
        _unlink(path)
        self._forget(path)

    # -- the writer thread --------------------------------------------------------------

    def _write_loop(self) -> None:
        try:  # what a crash or an older layout left, before the first write
            self._remove_orphans()
            if self._tree_files():
                self.directory.mkdir(parents=True, exist_ok=True)
                with self._locked():
                    self._evict(keep=None)
        except OSError as exc:
            log.warning("prompt cache: could not tidy %s (%s)", self.directory.parent, exc)
        while (entry := self._queue.get()) is not None:
            try:
                self._store(entry)
            except OSError as exc:  # a full or read-only disk: the cache is an optimization
                log.warning("prompt cache: could not write an entry: %s", exc)

    def _when_idle(self) -> None:
        if not self._idle.is_set():
            self._holding()
            self._idle.wait()

    def _holding(self) -> None:
        """Called on the writer thread when it holds an entry and waits for the engine
        to be idle: nothing here; a hook for a subclass that must see the wait begin
        (a test's, without polling)."""

    def _store(self, entry: Entry) -> None:
        size = file_size(entry)
        if size > self.capacity:
            return
        self._when_idle()
        self.refresh()
        if self.covers(entry.tokens):
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / file_name(entry.tokens)
        temp = self.directory / f".tmp-{uuid.uuid4().hex}"
        try:
            with temp.open("wb") as fh:  # a name of its own, locked so no sweep takes it
                fcntl.flock(fh, fcntl.LOCK_EX)
                for piece in encoded(entry, self.key):  # (the engine is looked at per piece)
                    self._when_idle()
                    fh.write(piece)
                fh.flush()
                with self._locked():
                    os.replace(temp, path)
                    self._settle(path, entry)
        finally:
            _unlink(temp)
        mtime = self.directory.stat().st_mtime_ns
        with self._index_lock:
            if self._index is not None:
                self._index[path] = _Indexed(path, entry.tokens, size)
                self._seen_mtime = mtime

    def _settle(self, path: Path, entry: Entry) -> None:
        """After `path` was written (under the lock): what it makes redundant goes, then
        the least recently used files until the directory fits its bound."""
        self.refresh()
        for old in self._entries():  # a shorter entry this one extends serves nothing more
            if old.path != path and common_prefix(old.tokens, entry.tokens) == len(
                    old.tokens):
                self._discard(old.path)
        self._evict(keep=path)

    def _evict(self, keep: Path | None) -> None:
        """The least recently used files of the whole tree (every key's directory) go
        until it fits its bound; a directory left empty goes too."""
        files = []
        for path in self._tree_files():
            with contextlib.suppress(FileNotFoundError):
                stat = path.stat()
                files.append((stat.st_mtime_ns, path, stat.st_size))
        total = sum(size for _, _, size in files)
        for _, path, size in sorted(files):
            if total <= self.capacity:
                break
            if path != keep:
                self._discard(path)
                total -= size
                if path.parent != self.directory:
                    _remove_if_empty(path.parent)

    def _tree_files(self) -> list[Path]:
        return list(self.directory.parent.glob(f"*/*{SUFFIX}"))

    def _remove_orphans(self) -> None:
        """Temporary files no writer holds: a crash left them (a live writer, in this
        process or another, keeps its own locked)."""
        for temp in self.directory.parent.glob("*/.tmp-*"):
            try:
                fd = os.open(temp, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: OSError, kept
                    _unlink(temp)
            except OSError:
                pass
            finally:
                os.close(fd)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One writer at a time per directory, across processes."""
        with (self.directory / ".lock").open("a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


def _open_regular(path: Path) -> BinaryIO:
    """`path` opened for reading only if it is a regular file: without blocking (a FIFO
    by an entry's name would hold the opener until a writer came) and without
    following a link out of the directory. Anything else is an `OSError`."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _remove_if_empty(directory: Path) -> None:
    """(A directory whose lock file another server may hold stays, empty of entries.)"""
    with contextlib.suppress(OSError):
        directory.rmdir()


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()

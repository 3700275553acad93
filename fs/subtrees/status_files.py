"""``/.trax``: the status files, JSON snapshots of the filesystem's counters (``engine.json``,
``log.json``, ``buffer.json``, ``data.json``, ``filesystem.json``) and of the volume it is on
(``volume.json``). Read-only: every change is refused with EPERM, an open for writing with
EACCES.

The size a ``stat`` reports is the number of bytes a read of the file then returns, so that
tools and Spark, which trust ``st_size``, read whole JSON documents. The contents change all the
time (counters), so each file's bytes are kept as *snapshots*, made when a reader first asks
(lookup, getattr, readdir or open) and handed out so that every reader reads what it was told
the size of:

* **an open file** serves the snapshot fixed at its open; a ``stat``/``fstat`` from a process
  holding it open reports that snapshot's size (``open; fstat; read st_size bytes``);
* **a reader** (a process, by thread-group id) keeps the snapshot whose size it was last told
  for ``HOLD`` seconds, and its next open serves that one (``stat; open; read st_size bytes``,
  also from another thread of the process, as a JVM does). The kernel also asks for the size in
  the permission check of every open: that ask gets the same snapshot, not a new one;
* **a new reader** is given the latest snapshot if nobody has opened it yet and it is younger
  than ``FRESH`` seconds (``stat f; cat f`` in a shell: two processes, one snapshot), else a new
  one. Once a reader opens a snapshot (or its hold ends), the next ask makes a new one: a
  process reading the file in a loop sees fresh contents each time.

The files are *volatile* (the kernel caches none of their attributes: it asks at every ``stat``
and open) and their handles ``direct_io`` (no page cache).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import FsError
from ..keys import Inode
from .protocol import BytesFile, Caller, OpenFile, Subtree, read_only_dir, subtree_ino

HOLD = 60.0  # seconds a reader keeps the snapshot it was told the size of
FRESH = 1.0  # seconds an unopened snapshot is shared with new readers
STATUS_FILES = ("engine.json", "log.json", "buffer.json", "data.json", "filesystem.json", "volume.json")
FIRST_FILE = 16  # local inode number of the first status file


@dataclass
class Snapshot:
    data: bytes
    made: float
    opened: bool = False


@dataclass
class StatusSnapshots:
    clock: Callable[[], float] = time.monotonic
    _latest: dict[str, Snapshot] = field(default_factory=dict)
    _told: dict[tuple[int, str], Snapshot] = field(default_factory=dict)  # (reader, file) -> snapshot
    _open: dict[int, tuple[int, str, Snapshot]] = field(default_factory=dict)  # fh -> reader, file, snapshot

    def known(self, name: str, reader: int) -> bytes | None:
        """The bytes ``reader`` is to see of ``name`` now, or None if a new snapshot is needed
        (then make it and pass it to :meth:`made`)."""
        now = self.clock()
        held = [snap for r, n, snap in self._open.values() if (r, n) == (reader, name)]
        if held:
            return max(held, key=lambda s: s.made).data
        told = self._told.get((reader, name))
        if told is not None and now - told.made < HOLD:
            return told.data
        latest = self._latest.get(name)
        if latest is not None and not latest.opened and now - latest.made < FRESH:
            self._told[(reader, name)] = latest
            return latest.data
        return None

    def made(self, name: str, reader: int, data: bytes) -> bytes:
        """Record a new snapshot of ``name``, told to ``reader``; returns ``data``."""
        now = self.clock()
        for key in [k for k, s in self._told.items() if now - s.made >= HOLD]:
            del self._told[key]
        self._latest[name] = self._told[(reader, name)] = Snapshot(data, now)
        return data

    def opened(self, fh: int, name: str, reader: int) -> bool:
        """Fix the snapshot ``reader`` is to see at the open of ``fh``; False if a new one is
        needed first (see :meth:`known`)."""
        if self.known(name, reader) is None:
            return False
        held = [snap for r, n, snap in self._open.values() if (r, n) == (reader, name)]
        snap = max(held, key=lambda s: s.made) if held else self._told.pop((reader, name))
        snap.opened = True
        self._open[fh] = (reader, name, snap)
        return True

    def read(self, fh: int) -> bytes | None:
        entry = self._open.get(fh)
        return None if entry is None else entry[2].data

    def released(self, fh: int) -> bool:
        return self._open.pop(fh, None) is not None


def reader_of(pid: int) -> int:
    """The process (thread-group id) of the thread ``pid`` that sent a request: the kernel
    names the calling thread, and a process's threads share what they were told."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return pid


class StatusFiles(Subtree):
    """The ``/.trax`` subtree. ``status`` returns the filesystem's counters (``FileSystem.status``);
    two callbacks add what only the server knows, set by whoever serves the mount:
    :attr:`fuse_counters` (merged into ``filesystem.json``: the FUSE adapter's counters) and
    :attr:`volume_info` (``volume.json``: what the filesystem was opened on)."""

    name = b".trax"
    tag = 1

    def __init__(self, status: Callable[[], dict], clock: Callable[[], float] = time.monotonic) -> None:
        self._status = status
        self.fuse_counters: Callable[[], dict] = dict
        self.volume_info: Callable[[], dict] = dict
        self._snaps = StatusSnapshots(clock)
        self._lock = threading.Lock()  # the snapshots: held for moments, never across a wait
        self._opens = 0  # numbers the opens, for the snapshots
        self._made_ns = time.time_ns()
        self._names = {subtree_ino(self.tag, FIRST_FILE + i): name for i, name in enumerate(STATUS_FILES)}
        self._inos = {name.encode(): ino for ino, name in self._names.items()}

    def _file(self, ino: int) -> str:
        name = self._names.get(ino)
        if name is None:
            raise FsError(errno.ENOENT, f"inode {ino} does not exist")
        return name

    def _document(self, name: str) -> bytes:
        if name == "volume.json":
            doc = self.volume_info()
        else:
            doc = self._status()
            doc["filesystem"].update(self.fuse_counters())
            if name != "engine.json":
                doc = doc[name.removesuffix(".json")]
        return (json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n").encode()

    def _bytes_for(self, name: str, reader: int) -> bytes:
        """The bytes of ``name`` that ``reader`` is to see (a new snapshot if need be)."""
        with self._lock:
            data = self._snaps.known(name, reader)
        if data is None:
            data = self._document(name)  # outside the lock: it waits for the filesystem's
            with self._lock:
                self._snaps.made(name, reader, data)
        return data

    # ----- the protocol -------------------------------------------------------------------------
    def getattr(self, ino: int, caller: Caller) -> Inode:
        if ino == self.top_ino:
            return read_only_dir(ino, self._made_ns)
        name = self._file(ino)
        t = self._made_ns
        return Inode(ino, stat.S_IFREG | 0o444, 0, 0, 1, size=len(self._bytes_for(name, reader_of(caller.pid))),
                     atime_ns=t, mtime_ns=t, ctime_ns=t, crtime_ns=t)

    def volatile(self, ino: int) -> bool:
        return ino != self.top_ino

    def lookup(self, parent: int, name: bytes, caller: Caller) -> Inode:
        ino = self._inos.get(name)
        if parent != self.top_ino or ino is None:
            raise FsError(errno.ENOENT, f"{name!r} not found in /.trax")
        return self.getattr(ino, caller)

    def readdir(self, ino: int, after: int, limit: int, caller: Caller) -> list[tuple[bytes, Inode, int]]:
        if ino != self.top_ino:
            raise FsError(errno.ENOTDIR, f"inode {ino} is not a directory")
        inos = list(self._names)[after : after + limit]  # cookie: the file's place in the listing, from 1
        return [(self._names[i].encode(), self.getattr(i, caller), after + k + 1) for k, i in enumerate(inos)]

    def open(self, ino: int, flags: int, caller: Caller) -> OpenFile:
        if ino == self.top_ino:
            raise FsError(errno.EISDIR, "/.trax is a directory")
        name = self._file(ino)
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise FsError(errno.EACCES, f"/.trax/{name} is read-only")
        reader = reader_of(caller.pid)
        while True:
            with self._lock:
                self._opens += 1
                key = self._opens
                if self._snaps.opened(key, name, reader):
                    return _StatusFile(self, key, self._snaps.read(key))
            self._bytes_for(name, reader)

    def released(self, key: int) -> None:
        """An open of a status file ended: its snapshot may go."""
        with self._lock:
            self._snaps.released(key)


class _StatusFile(BytesFile):
    """An open status file: the snapshot fixed at its open."""

    def __init__(self, files: StatusFiles, key: int, data: bytes) -> None:
        super().__init__(data)
        self.files, self.key = files, key

    def release(self) -> None:
        self.files.released(self.key)

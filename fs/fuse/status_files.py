"""The ``/.trax`` status files: the size a ``stat`` reports is the number of bytes a read of the
file then returns, so that tools and Spark, which trust ``st_size``, read whole JSON documents.

The contents change all the time (counters), so each file's bytes are kept as *snapshots*,
made when a reader first asks (lookup, getattr, readdir or open) and handed out so that every
reader reads what it was told the size of:

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

The FUSE layer reports these files with an attribute timeout of 0, so the kernel asks on every
``stat`` and open and never caches a size; reads bypass the page cache (``direct_io``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

HOLD = 60.0  # seconds a reader keeps the snapshot it was told the size of
FRESH = 1.0  # seconds an unopened snapshot is shared with new readers


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

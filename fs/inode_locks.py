"""Per-inode reader/writer locks for file data.

Reads of one file run in parallel; a write or truncate of a file excludes its readers and other
writers (so two writers never allocate the same hole twice, and a truncate never frees blocks
under a read in flight). Locks exist only while someone holds or waits for them; a lock nobody
uses any more is kept for the next inode (up to :data:`SPARE`): making one (a ``Condition``) was
a tenth of a 4 KiB overwrite's Python (py-spy).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

SPARE = 64  # unused locks kept for reuse


class _RW:
    __slots__ = ("cv", "readers", "writer", "users")

    def __init__(self) -> None:
        self.cv = threading.Condition(threading.Lock())
        self.readers = 0
        self.writer = False
        self.users = 0


class InodeLocks:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[int, _RW] = {}
        self._spare: list[_RW] = []  # nobody holds or waits for them: no reader, no writer, no waiter

    def _get(self, ino: int) -> _RW:
        with self._lock:
            rw = self._locks.get(ino)
            if rw is None:
                rw = self._locks[ino] = self._spare.pop() if self._spare else _RW()
            rw.users += 1
            return rw

    def _put(self, ino: int, rw: _RW) -> None:
        with self._lock:
            rw.users -= 1
            if rw.users == 0:
                del self._locks[ino]
                if len(self._spare) < SPARE:
                    self._spare.append(rw)

    @contextmanager
    def shared(self, ino: int):
        rw = self._get(ino)
        try:
            with rw.cv:
                while rw.writer:
                    rw.cv.wait()
                rw.readers += 1
            try:
                yield
            finally:
                with rw.cv:
                    rw.readers -= 1
                    rw.cv.notify_all()
        finally:
            self._put(ino, rw)

    @contextmanager
    def exclusive(self, ino: int):
        rw = self._get(ino)
        try:
            with rw.cv:
                while rw.writer or rw.readers:
                    rw.cv.wait()
                rw.writer = True
            try:
                yield
            finally:
                with rw.cv:
                    rw.writer = False
                    rw.cv.notify_all()
        finally:
            self._put(ino, rw)

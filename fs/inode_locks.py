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
    __slots__ = ("lock", "cv", "readers", "writer", "users", "waiting")

    def __init__(self) -> None:
        self.lock = threading.Lock()  # taken as ``with rw.lock``: a Condition's __enter__ is Python code
        self.cv = threading.Condition(self.lock)
        self.readers = 0
        self.writer = False
        self.users = 0
        self.waiting = 0  # threads in ``wait``: a release with none to wake notifies nobody

    def wait(self) -> None:
        """Wait for a change (``cv`` held). ``Condition.notify_all`` is Python and cost a third
        of an uncontended read's lock (4.5 µs a pair): releases skip it when nobody waits."""
        self.waiting += 1
        try:
            self.cv.wait()
        finally:
            self.waiting -= 1


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

    def acquire_shared(self, ino: int) -> _RW:
        """Take ``ino``'s lock shared; give it back with :meth:`release_shared` (the read path
        calls the pair directly: a ``with`` over a generator costs a microsecond more)."""
        rw = self._get(ino)
        try:
            with rw.lock:
                while rw.writer:
                    rw.wait()
                rw.readers += 1
        except BaseException:
            self._put(ino, rw)
            raise
        return rw

    def release_shared(self, ino: int, rw: _RW) -> None:
        try:
            with rw.lock:
                rw.readers -= 1
                if rw.waiting and not rw.readers:  # only a writer waits for readers
                    rw.cv.notify_all()
        finally:
            self._put(ino, rw)

    @contextmanager
    def shared(self, ino: int):
        rw = self.acquire_shared(ino)
        try:
            yield
        finally:
            self.release_shared(ino, rw)

    def acquire_exclusive(self, ino: int) -> _RW:
        """Take ``ino``'s lock exclusive; give it back with :meth:`release_exclusive` (writes
        call the pair directly, as reads do)."""
        rw = self._get(ino)
        try:
            with rw.lock:
                while rw.writer or rw.readers:
                    rw.wait()
                rw.writer = True
        except BaseException:
            self._put(ino, rw)
            raise
        return rw

    def release_exclusive(self, ino: int, rw: _RW) -> None:
        try:
            with rw.lock:
                rw.writer = False
                if rw.waiting:
                    rw.cv.notify_all()
        finally:
            self._put(ino, rw)

    @contextmanager
    def exclusive(self, ino: int):
        rw = self.acquire_exclusive(ino)
        try:
            yield
        finally:
            self.release_exclusive(ino, rw)

"""Destroying removed files off the request path (XFS's background inode inactivation).

When the kernel drops the last reference to an inode no entry names any more (the FORGET that
follows an ``rm``), the inode is destroyed: its extents, checksums, xattrs and inode records
deleted and its pages freed (:meth:`Lifetime.collect`). Done on the reader thread that read the
FORGET, that work held the metadata lock while the next request waited for it: through the
mount, an ``rm`` of 1 KiB files took ~900 µs each, and 320–400 µs with the destruction left out
(``BENCHMARKS.md``). A FORGET therefore hands the inode to the reaper's thread, which destroys
what waits in batches, one transaction per batch, between the requests.

Nothing can be lost by waiting: the transaction that dropped the inode's last link put it on
the ``orphans`` tree, so after a crash the next mount destroys it (``Lifetime.reap_orphans``).
What a user can see is settled before it is seen (:meth:`Reaper.drain`): ``statfs`` (``df``),
a snapshot's creation (which would otherwise keep the removed file's pages), the FUSE adapter's
retry of an operation that met ENOSPC, and a clean close. The backlog is bounded
(:data:`BACKLOG`): past it a FORGET destroys its inode itself, as before.
"""

from __future__ import annotations

import logging
import threading
import time

from .lifetime import Lifetime

log = logging.getLogger("traxfs.fs")

BACKLOG = 1024  # inodes waiting: past this a FORGET destroys its own (bounds what drain waits for)
BATCH = 32  # inodes destroyed in one transaction (the metadata lock is held for the batch)
GATHER = 0.05  # seconds the thread waits for a batch to fill


class Reaper:
    def __init__(self, lifetime: Lifetime) -> None:
        self._lifetime = lifetime
        self._cv = threading.Condition()
        self._waiting: list[int] = []
        self._busy = 0  # inodes taken by the thread, not yet destroyed
        self._thread: threading.Thread | None = None
        self._stop = False
        self._draining = 0  # callers of drain waiting: the thread does not gather

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="inode-reaper", daemon=True)
        self._thread.start()

    def collect(self, ino: int) -> None:
        """``ino`` lost its last reference: destroy it (if no entry names it) soon, on the
        reaper's thread — or now, in the caller, when there is no thread or the backlog is full."""
        with self._cv:
            if self._thread is not None and not self._stop and len(self._waiting) < BACKLOG:
                self._waiting.append(ino)
                if len(self._waiting) in (1, BATCH):  # the thread sleeps, or gathers a batch
                    self._cv.notify_all()
                return
        self._lifetime.collect(ino)

    def pending(self) -> int:
        with self._cv:
            return len(self._waiting) + self._busy

    def drain(self) -> bool:
        """Wait until every inode handed over so far is destroyed; True if there was any. The
        caller must hold no inode lock and not the metadata lock (the thread takes them)."""
        with self._cv:
            if not self._waiting and not self._busy:
                return False
            self._draining += 1
            self._cv.notify_all()  # no more gathering
            try:
                while (self._waiting or self._busy) and self._thread is not None and self._thread.is_alive():
                    self._cv.wait(0.5)
            finally:
                self._draining -= 1
            return True

    def stop(self, drain: bool = True) -> None:
        """A clean close drains the backlog first; a crash leaves it (orphans) to the next mount."""
        if drain:
            self.drain()
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=None if drain else 5)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._waiting and not self._stop:
                    self._cv.wait()
                if self._stop:  # after a drain (a clean close), or a crash: left to the next mount
                    return
                until = time.monotonic() + GATHER  # a burst of rm: gather a batch
                while len(self._waiting) < BATCH and not (self._stop or self._draining):
                    left = until - time.monotonic()
                    if left <= 0:
                        break
                    self._cv.wait(left)
                if self._stop:
                    return
                batch, self._waiting = self._waiting[:BATCH], self._waiting[BATCH:]
                self._busy = len(batch)
            try:
                self._destroy(batch)
            finally:
                with self._cv:
                    self._busy = 0
                    self._cv.notify_all()

    def _destroy(self, batch: list[int]) -> None:
        """One transaction for the batch; if it fails (a log too full for it, a damaged page),
        one per inode, so that one inode's trouble keeps no other's space. What still fails
        stays an orphan, which the next mount destroys."""
        try:
            self._lifetime.collect_all(batch)
            return
        except Exception:  # noqa: BLE001
            if len(batch) == 1:
                log.exception("destroying removed inode %d", batch[0])
                return
        for ino in batch:
            try:
                self._lifetime.collect(ino)
            except Exception:  # noqa: BLE001
                log.exception("destroying removed inode %d", ino)

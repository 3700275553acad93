"""The log manager: the Aether log buffer, a flush daemon with group commit, durability handles.

Inserting a record reserves its LSN in the log buffer (``traxfs.ext.logbuffer``: the
consolidation array with decoupled fill, Aether's "CD", or the single-mutex baseline). One
daemon thread owns all log I/O. It sleeps until the group-commit policy says to flush — X
commits waiting, L bytes unflushed, or T seconds since the first waiter, whichever comes first
(Aether's group commit) — or until someone forces the log; then it writes everything released so far with
one write and one fsync, advances ``durable_lsn`` and wakes exactly the waiters it satisfied.

Flush pipelining: ``commit`` returns a :class:`Durability` handle instead of blocking. A thread
may ``wait()`` on it; a trio task registers a callback that wakes it, so a FUSE request awaits
durability while the worker threads and the event loop go on serving others.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from _thread import allocate_lock as _allocate_lock
from collections.abc import Callable
from dataclasses import dataclass

from ...ext.logapply import LogAppender
from .logstore import LogStore


class LogClosed(Exception):
    """The log was stopped (unclean shutdown) before the LSN someone forces became durable."""


class LogFull(Exception):
    """The log region is full of records recovery still needs (a long-running transaction)."""


@dataclass
class GroupCommitPolicy:
    max_commits: int = 16  # X: flush once this many commits wait
    max_bytes: int = 1 << 20  # L: ... or this many bytes are unflushed
    max_delay: float = 0.0  # T: ... or the oldest waiter has waited this long (seconds)


class Durability:
    """A promise that the log is durable up to ``lsn`` (a commit record's end)."""

    __slots__ = ("lsn", "_log")

    def __init__(self, log: LogManager, lsn: int):
        self.lsn, self._log = lsn, log

    def done(self) -> bool:
        return self._log.durable_lsn >= self.lsn

    def wait(self, timeout: float | None = None) -> bool:
        return self._log.wait_durable(self.lsn, timeout)

    def add_callback(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` (from the log daemon's thread, or at once) when durable."""
        self._log.on_durable(self.lsn, fn)


class LogManager:
    def __init__(self, store: LogStore, start_lsn: int, epoch: int, buffer_factory: Callable[[int, int], object],
                 buffer_size: int = 8 << 20, policy: GroupCommitPolicy | None = None,
                 on_pressure: Callable[[], None] | None = None):
        self.store, self.epoch = store, epoch
        self.buffer = buffer_factory(min(buffer_size, store.size // 2), start_lsn)
        self.policy = policy or GroupCommitPolicy()
        self.durable_lsn = start_lsn
        # inserting (``append``) is in C (``traxfs.ext.logapply``). Log bytes recovery still needs:
        # past a quarter of the region a checkpoint is asked for; ordinary records may not use the
        # last reserve, which is kept for checkpoints
        self.appender = LogAppender(self.buffer, epoch, store.seed, start_lsn, store.size // 4,
                                    store.size - min(1 << 18, store.size // 8), store.size - (1 << 14), store.size,
                                    on_pressure, LogFull)
        self.append = self.appender.append
        # log barriers (``add_barrier``), replaced as a whole when one is added or removed, so
        # the flusher reads them without a lock
        self._barriers: tuple[Callable[[], None], ...] = ()
        # one lock; the daemon waits on ``_daemon_cv``, which only work it must do itself
        # signals (soft commits, callbacks, stop). A committer that waits leads its own flush or
        # parks as a follower (``wait_durable``), so waking the daemon for it would only cost two
        # context switches per commit. (``with self._lock``, not ``with self._daemon_cv``: a
        # Condition's __enter__ is Python code.)
        self._lock = threading.Lock()
        self._daemon_cv = threading.Condition(self._lock)
        self._followers: list[tuple[int, object]] = []  # (LSN, parked lock) of blocked committers
        self._pending_commits: list[int] = []  # end LSNs of soft commits not yet durable
        self._first_wait: float | None = None
        self._forced = 0  # highest LSN someone is blocked on
        self._callbacks: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._stop = False
        self._flushing = False  # one flusher at a time: the daemon or a blocked committer
        self._error: BaseException | None = None
        self._stats = {"flushes": 0, "bytes_flushed": 0, "commits": 0}
        self._daemon = threading.Thread(target=self._run, name="log-daemon", daemon=True)
        self._daemon.start()

    # ----- inserting ----------------------------------------------------------------------------
    # ``append(rtype, xid=0, prev_lsn=0, page=NO_PAGE, opcode=0, undo_next=0, payload=b"",
    # system=False) -> (lsn, end lsn)``, bound in ``__init__``: insert a record; not durable until
    # flushed. ``system`` records (checkpoints) may use the last reserve of the log region, so a
    # checkpoint can always run to free space even when ordinary work is refused with
    # :class:`LogFull`.

    @property
    def trunc_lsn(self) -> int:
        """The oldest LSN recovery still needs (set by each checkpoint)."""
        return self.appender.trunc_lsn

    @trunc_lsn.setter
    def trunc_lsn(self, lsn: int) -> None:
        self.appender.trunc_lsn = lsn

    @property
    def stats(self) -> dict[str, int]:
        return {**self._stats, "records": self.appender.records}

    def reserved(self) -> int:
        return self.buffer.reserved()

    # ----- log barriers -------------------------------------------------------------------------
    def add_barrier(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` in every flush, after the records to write are chosen and before they
        are written. A user that writes bytes outside the log (file data in unlogged extents)
        flushes the device there, so no record reaches the disk before the bytes it describes
        (ordered mode). Every barrier added runs, in the order added."""
        with self._lock:
            self._barriers = (*self._barriers, fn)

    def remove_barrier(self, fn: Callable[[], None]) -> None:
        """Stop calling ``fn`` (added by :meth:`add_barrier`); a flush running may still call it."""
        with self._lock:
            if fn not in self._barriers:
                raise ValueError(f"log barrier {fn!r} was never added (or was removed already)")
            barriers = list(self._barriers)
            barriers.remove(fn)
            self._barriers = tuple(barriers)

    # ----- durability ---------------------------------------------------------------------------
    def commit_handle(self, end_lsn: int, will_wait: bool = False) -> Durability:
        """A commit record ending at ``end_lsn`` was inserted: count it toward the group.
        ``will_wait``: the caller blocks on the handle at once, and so flushes for itself (or
        rides on the flush running): the daemon is not woken for it."""
        with self._lock:
            self._stats["commits"] += 1
            if not will_wait:  # the daemon's group: X, L and T count these
                self._pending_commits.append(end_lsn)
                first = self._first_wait is None
                if first:
                    self._first_wait = time.monotonic()
                # wake the daemon only when it must act: to arm its timer for the group's first
                # commit, or when the group is due; a wake-up per soft commit that only finds
                # the group not due yet cost two context switches and a turn of the GIL each
                if first or self._due():
                    self._daemon_cv.notify()
        return Durability(self, end_lsn)

    def force(self, lsn: int) -> None:
        """Block until the log is durable up to ``lsn`` (write-ahead rule, abort, checkpoint)."""
        if self.durable_lsn >= lsn:
            return
        with self._lock:
            self._forced = max(self._forced, lsn)
        if not self.wait_durable(lsn, None):  # stopped: a page write relying on this must not happen
            raise LogClosed(f"log stopped before LSN {lsn} was durable (closed or unclean shutdown)")

    def wait_durable(self, lsn: int, timeout: float | None) -> bool:
        """Block until durable up to ``lsn``. If no flush is running, this thread runs it
        itself (leader/follower group commit): a lone committer pays one fsync and no thread
        hand-offs, and commits that arrive while a flush runs are all covered by the next.

        A follower parks on a lock of its own, which the leader releases once the follower's
        LSN is durable (or to make it the next leader): one wake-up per follower, and no
        re-acquiring of a shared lock by every woken thread, as a Condition would."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.durable_lsn < lsn:
            with self._lock:
                if self.durable_lsn >= lsn:
                    break
                if self._error is not None:
                    raise RuntimeError("log daemon failed") from self._error
                if self._stop:
                    return False
                lead = not self._flushing
                if lead:
                    self._flushing = True
                else:
                    park = _allocate_lock()
                    park.acquire()
                    self._followers.append((lsn, park))
            if lead:
                self._lead(lsn)
                continue
            remaining = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            if remaining <= 0 or not park.acquire(timeout=remaining):
                with self._lock:  # timed out (or the re-check slice ended): leave the queue
                    if (lsn, park) in self._followers:
                        self._followers.remove((lsn, park))
                if deadline is not None and time.monotonic() >= deadline and self.durable_lsn < lsn:
                    return False
        return True

    def _try_flush(self, want: int) -> None:
        """The daemon's way in: flush unless a flush is running (then it has nothing to do)."""
        with self._lock:
            if self._flushing or self._stop or self._error is not None:
                return
            self._flushing = True
        self._lead(want)

    def _lead(self, want: int) -> None:
        """Run one flush as the leader (``_flushing`` already claimed), then, under one acquisition
        of the lock: publish the new durable LSN, wake the followers it satisfied and one more to
        lead the next flush, take the callbacks now due, and wake the daemon if work is left."""
        released, ready, error = self.durable_lsn, [], None
        try:
            released = self._write(want)
        except BaseException as e:
            error = e
        with self._lock:
            self._flushing = False
            if error is not None:
                self._error = error
            if released > self.durable_lsn:
                self.durable_lsn = released
            durable = self.durable_lsn
            if self._pending_commits:
                self._pending_commits = [c for c in self._pending_commits if c > durable]
                # commits that arrived during this flush form the next group; their clock starts now
                self._first_wait = time.monotonic() if self._pending_commits else None
            while self._callbacks and self._callbacks[0][0] <= durable:
                ready.append(heapq.heappop(self._callbacks)[2])
            if self._followers:
                waiting = []
                for lsn, park in self._followers:
                    if lsn <= durable or self._error is not None:
                        park.release()
                    else:
                        waiting.append((lsn, park))
                if waiting:
                    waiting.pop(0)[1].release()  # the next leader; it takes everything released
                self._followers = waiting
            if self._pending_commits:
                self._daemon_cv.notify()  # soft commits that came in meanwhile (callbacks make no flush due)
        if error is not None:
            raise error
        for fn in ready:
            fn()

    def on_durable(self, lsn: int, fn: Callable[[], None]) -> None:
        """Call ``fn`` once the log is durable up to ``lsn``: at once if it is, else from the
        flush that makes it so. The daemon is not woken: a callback makes no flush due (the
        commit it follows already counts toward its group, or its committer flushes it), and
        every free registers one — a wake-up each that only found nothing due."""
        with self._lock:
            if self.durable_lsn < lsn:
                heapq.heappush(self._callbacks, (lsn, next(self._seq), fn))
                return
        fn()

    # ----- the daemon ---------------------------------------------------------------------------
    def _due(self) -> bool:
        p = self.policy
        pending = self.buffer.released() - self.durable_lsn
        if self._forced > self.durable_lsn:
            return True
        if len(self._pending_commits) >= p.max_commits or pending >= p.max_bytes:
            return True
        return self._first_wait is not None and time.monotonic() - self._first_wait >= p.max_delay

    def _run(self) -> None:
        """The daemon: flushes by policy for commits nobody blocks on (durability handles)."""
        while True:
            with self._lock:
                while not self._stop and (self._flushing or not self._due()):
                    timeout = 0.05
                    if self._first_wait is not None:
                        timeout = max(0.0005, self.policy.max_delay - (time.monotonic() - self._first_wait))
                    self._daemon_cv.wait(timeout)
                if self._stop or self._error is not None:
                    return
                target = max(self._forced, self.durable_lsn)
            try:
                self._try_flush(target)
            except BaseException:  # recorded in _error; every waiter sees it
                return

    def _write(self, want: int) -> int:
        """Write everything released (waiting for ``want`` to be released first) and return the
        LSN now durable; the caller publishes it."""
        start = self.durable_lsn
        buffer = self.buffer
        released = buffer.released()
        if want > released:  # someone waits on a record still being filled: let it finish
            released = buffer.wait_released(want, 1.0)
        if released > start:
            for barrier in self._barriers:
                barrier()
            self.store.append_from(buffer, start, released)
            buffer.mark_flushed(released)
            stats = self._stats
            stats["flushes"] += 1
            stats["bytes_flushed"] += released - start
        return released

    def flush_all(self) -> None:
        self.force(self.buffer.reserved())

    def close(self, flush: bool = True) -> None:
        """Stop the daemon; with ``flush`` (a clean shutdown) make everything durable first."""
        if flush and self._error is None:
            self.flush_all()
        with self._lock:
            self._stop = True
            for _, park in self._followers:  # they see _stop and give up
                park.release()
            self._followers = []
            self._daemon_cv.notify()
        self._daemon.join(timeout=10)

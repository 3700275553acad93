"""Groups of data pages marked for overwrites: one log force per group, not one per overwrite.

**Why.** An overwrite of checksummed bytes in place must never leave, after a crash, a page
whose bytes match no sum the log holds for it: a read would fail with EIO though nothing is
damaged. So each overwrite's intent (``fs/datasums.py``: the new sum, the old one kept as the
alternative) was made durable before its bytes were written — a log force per overwrite,
half the time of a 4 KiB random overwrite through the mount (py-spy, BENCHMARKS.md).

**The mark.** The first overwrite in a group of :data:`~traxfs.fs.datasums.GROUP` device pages
(one ``datasums`` record) also marks the group — a key in the ``datamarked`` tree, format 5 —
and waits until that is durable. Later overwrites in a marked group record their intents
softly and write their bytes at once. After an unclean stop the mount settles every summed
page of every marked group (:meth:`DataMarks.settle`) as it settles a pending page: the page
keeps the logged sum its content matches, or — an overwrite whose intent the crash lost — the
sum is recomputed from what is on disk (counted as ``unlogged_recomputed``): old or new bytes,
never an I/O error. md RAID's write-intent bitmap, one bit per datasums record.

**Unmarking.** A mark goes (softly, with the inode flusher's transaction) once its group has seen
no overwrite for :data:`MARK_IDLE` seconds, the oldest first when more than :data:`MAX_MARKS`
are held (what a recovery may have to read: 512 KiB each), and all of them at a clean unmount.
Marks are made and removed under the filesystem's lock, and an overwrite that finds its group
marked records its intent in that same hold: the intent is in the log before any unmark that
follows, so once the unmark is durable the intent is too, and the page is pending.

**What it costs.** A recovery after a crash reads every summed page of the marked groups; and
damage that struck one of those pages while it was marked (not an overwrite: a bad sector) is
taken for an unlogged overwrite and its sum recomputed — as for a torn pending page.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from .datasums import GROUP, DataSums, Sum
from .keys import U64
from .struct.btree import BTree

if TYPE_CHECKING:
    from .inodes import FsTransaction

MARK_IDLE = 30.0  # seconds without an overwrite before a group's mark goes
MAX_MARKS = 1024  # groups marked at once (the most a recovery reads: 512 MiB)
LOOK_EVERY = 1.0  # seconds between two looks for marks to drop (an fsync flushes the inodes too)

log = logging.getLogger("traxfs.fs")


class DataMarks:
    """The marked groups: the ``datamarked`` tree and, in memory, each group's mark LSN and the
    time of its last overwrite. Every method but :meth:`settle` runs under the filesystem's lock."""

    def __init__(self, sums: DataSums, tree: BTree):
        self.sums, self.tree = sums, tree
        self._marks: dict[int, list] = {}  # group -> [LSN its mark is durable at, last overwrite]
        self._looked = 0.0  # when expire last looked for marks to drop
        self.stats = sums.stats
        for name in ("groups_marked", "groups_unmarked", "marks_settled", "unlogged_recomputed"):
            self.stats.setdefault(name, 0)

    def cover(self, ftx: FsTransaction, pages) -> None:
        """In the transaction that records the overwrite intents of device ``pages``: mark every
        group of them not marked yet. :meth:`durable_at` tells, once it committed, what to wait for."""
        now = time.monotonic()
        fresh = []
        for g in {p // GROUP for p in pages}:
            m = self._marks.get(g)
            if m is None:
                self.tree.put(ftx.tx, U64.pack(g), b"")
                self._marks[g] = [None, now]
                fresh.append(g)
            else:
                m[1] = now
        if fresh:
            self.stats["groups_marked"] += len(fresh)
            ftx.tx.post_commit.append(lambda handle: self._committed(fresh, handle.lsn))
            ftx.tx.on_abort.append(lambda _tx: self._forget(fresh))

    def covers(self, pages) -> bool:
        """Are the groups of ``pages`` all marked (by a committed transaction)? Counts as their
        use (the idle clock starts again)."""
        groups = {p // GROUP for p in pages}
        if not all(g in self._marks for g in groups):
            return False
        now = time.monotonic()
        for g in groups:
            self._marks[g][1] = now
        return True

    def _committed(self, groups: list[int], lsn: int) -> None:
        for g in groups:
            self._marks[g][0] = lsn

    def _forget(self, groups: list[int]) -> None:
        for g in groups:
            self._marks.pop(g, None)

    def durable_at(self, pages) -> int:
        """The LSN up to which the log must be durable before the bytes of ``pages`` (covered,
        their transaction committed) may be written: their groups' marks."""
        return max(self._marks[g][0] for g in {p // GROUP for p in pages})

    def marked(self) -> int:
        return len(self._marks)

    def due(self, everything: bool = False) -> bool:
        """Would :meth:`expire` look now? (Not more than once every :data:`LOOK_EVERY` seconds:
        every inode flush calls it, an fsync's too.)"""
        return bool(self._marks) and (everything or time.monotonic() - self._looked >= LOOK_EVERY)

    def expire(self, ftx: FsTransaction, everything: bool = False) -> int:
        """Unmark, in ``ftx``, the groups idle for :data:`MARK_IDLE` seconds and the oldest of
        those beyond :data:`MAX_MARKS` (``everything``: all, at a clean unmount), but none that
        holds a sum not yet logged. Returns how many."""
        if not self.due(everything):
            return 0
        now = self._looked = time.monotonic()
        # a group holding a sum not yet logged (an intent kept in memory, the sum of its write)
        # stays marked: an unmark logged before that sum would leave its page with an old sum
        # and new bytes after a crash (the sums this same transaction logs are still held: the
        # unmount flushes the inodes first)
        held = self.sums.deferred_groups()
        idle = sorted((m[1], g) for g, m in self._marks.items() if g not in held)
        if everything:
            gone = [g for _, g in idle]
        else:
            gone = [g for t, g in idle if now - t >= MARK_IDLE]
            over = len(self._marks) - len(gone) - MAX_MARKS
            if over > 0:
                gone += [g for t, g in idle if now - t < MARK_IDLE][:over]
        for g in gone:
            self.tree.delete(ftx.tx, U64.pack(g))
            del self._marks[g]
        self.stats["groups_unmarked"] += len(gone)
        return len(gone)

    def settle(self, tx) -> int:
        """At open (before any write, before the pending pages of unmarked groups): settle
        every summed page of every marked group, pending or not — the logged sum its content
        matches, or one recomputed from its content (counted as ``unlogged_recomputed``: in a
        marked group the bytes on disk may be any overwrite's since the mark, whole or torn, its
        record lost or not) — and drop the marks (none is left after a clean unmount). Returns
        the pages whose sum changed."""
        groups = [U64.unpack(key)[0] for key, _ in self.tree.items()]
        if not groups:
            return 0
        sums = self.sums
        sums.raw.flush()  # what is judged here must be on disk before the verdict is logged
        updates: dict[int, Sum] = {}
        for g in groups:
            first = g * GROUP
            for k, s in enumerate(sums.get_run(first, GROUP)):
                if s is None:
                    continue
                chosen = sums.settle_page(first + k, s, marked=True)
                if s.pending:
                    self.stats["pending_resolved"] += 1
                if s.pending or chosen != s:
                    updates[first + k] = chosen
            self.tree.delete(tx, U64.pack(g))
        sums.put_settled(tx, updates)
        self.stats["marks_settled"] += len(groups)
        log.info("%d marked group(s) of data pages settled after an unclean stop; %d sum(s) changed",
                 len(groups), len(updates))
        return len(updates)

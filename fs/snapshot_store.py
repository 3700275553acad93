"""Snapshots: taking, listing and deleting them (the records; ``fs/history.py`` says how a
snapshot sees the tree, ``fs/snapshot_view.py`` serves it).

**Records** (tree ``snapshots``): epoch (8 bytes, big-endian; the snapshot's id) -> state
(live, or being deleted), creation time, name.

**Create** (:meth:`SnapshotStore.create`), O(1) in the data: under the snapshot barrier held
exclusive (no data change in flight) the inodes whose size and times are only cached are logged
(with their deferred checksums, as ``syncfs`` does); then, under the metadata lock, one
transaction records the snapshot with the current epoch ``E`` and sets the epoch to ``E + 1``;
it is made durable before the call returns. The same transaction holds what each of
:attr:`SnapshotStore.holders` freezes (the tables' versions: ``fs/tables/store.py``), so a
snapshot and its frozen tables are both there or neither.

**Delete** (:meth:`SnapshotStore.delete`) of snapshot ``s`` (previous snapshot ``p``, next
``n``): the record is marked *deleting* (durable; the name is gone from then on); its history
entries are re-keyed to ``p`` (when ``p`` has none of the key) or dropped, in transactions of
:data:`BATCH` entries; then ``s`` leaves the chain, and the dead-list entries freed in ``(s, n]``
(or after ``s`` when it was the latest) and born after ``p`` are freed — ZFS's dead-list rule:
no other snapshot can see them —; the record goes last. A crash anywhere leaves the record
marked deleting, and the next mount finishes the delete (:meth:`SnapshotStore.finish`) before
the filesystem is served; every step is idempotent.
"""

from __future__ import annotations

import errno
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice

from .datamap import DEAD
from .engine.page import PageCorrupt
from .errors import FsError
from .history import Barrier, Chain, epoch_key, hist_key
from .inodes import Inodes
from .keys import U64, U64X2
from .limits import check_name
from .trees import KEY_EPOCH

LIVE, DELETING = 0, 1
_REC = struct.Struct(">BQ")  # state, created (ns); then the name
BATCH = 256  # history or dead-list entries per transaction of a delete
MAX_ID = (1 << 16) - 1  # snapshot ids (epochs) fit the 16 bits of a view's inode numbers


@dataclass(frozen=True)
class Snapshot:
    epoch: int
    name: bytes
    created_ns: int
    state: int = LIVE


def load_chain(trees: dict) -> Chain:
    """The epochs of every recorded snapshot and the current epoch, from the trees."""
    epochs = [U64.unpack(k)[0] for k in trees["snapshots"].keys()]
    try:
        raw = trees["meta"].get(KEY_EPOCH)
    except PageCorrupt:  # (fsck: a damaged meta tree, rebuilt with the record: fsck_damage.meta_issues)
        raw = None
    current = U64.unpack(raw)[0] if raw is not None and len(raw) == 8 else max(epochs, default=0) + 1
    return Chain(current, epochs)


class SnapshotStore:
    def __init__(self, inodes: Inodes, chain: Chain, settle: Callable[[], object]) -> None:
        self.inodes = inodes
        self.e = inodes.e
        self.t = inodes.t
        self.chain = chain
        self.data = inodes.data
        self._deleting = threading.Lock()  # one delete at a time
        self.readers = Barrier()  # held shared by reads of snapshot data; a delete waits for them
        self._snaps: dict[int, Snapshot] = {}
        # what keeps state of its own per snapshot (the tables: fs/tables/store.py): prepare()
        # with no lock held, then freeze(tx, epoch) in the create transaction, thaw(tx, epoch) in
        # the one dropping the record
        self.holders: list = []
        # what the filesystem still owes, settled before a snapshot is taken (removed files whose
        # destruction waits: ``fs/reaper.py``); no lock held
        self.settle = settle
        for k, v in self.t["snapshots"].items():
            state, created = _REC.unpack_from(v)
            epoch = U64.unpack(k)[0]
            self._snaps[epoch] = Snapshot(epoch, bytes(v[_REC.size:]), created, state)

    # ----- reading ------------------------------------------------------------------------------
    def live(self) -> list[Snapshot]:
        """The snapshots one can see, oldest first."""
        return sorted((s for s in list(self._snaps.values()) if s.state == LIVE), key=lambda s: s.epoch)

    def by_name(self, name: bytes) -> Snapshot | None:
        return next((s for s in self.live() if s.name == name), None)

    def by_epoch(self, epoch: int) -> Snapshot | None:
        s = self._snaps.get(epoch)
        return s if s is not None and s.state == LIVE else None

    def unique_pages(self, epoch: int) -> int:
        """Pages only snapshot ``epoch`` holds: what deleting it would free."""
        with self.inodes.lock:
            prev, nxt = self.chain.neighbours(epoch)
            return sum(count for _, _, count in self._freeable(epoch, prev, nxt))

    # ----- create -------------------------------------------------------------------------------
    def create(self, name: bytes) -> Snapshot:
        """Take snapshot ``name`` (EEXIST if one has it); durable when this returns."""
        check_name(name, "snapshot name")
        inodes = self.inodes
        self.settle()
        for holder in self.holders:
            holder.prepare_snapshot()
        with inodes.barrier.exclusive():
            inodes.flush()  # cached sizes and times (and their sums) reach the trees first
            with inodes.lock:
                if self.by_name(name) is not None:
                    raise FsError(errno.EEXIST, f"snapshot {name!r} exists")
                epoch = self.chain.current
                if epoch > MAX_ID:
                    raise FsError(errno.ENOSPC, f"every snapshot id up to {MAX_ID} has been used")
                inodes.flush()
                snap = Snapshot(epoch, name, time.time_ns())
                with inodes.transaction() as ftx:
                    self.t["snapshots"].put(ftx.tx, U64.pack(epoch), _REC.pack(LIVE, snap.created_ns) + name)
                    self.t["meta"].put(ftx.tx, KEY_EPOCH, U64.pack(epoch + 1))
                    for holder in self.holders:
                        holder.freeze(ftx.tx, epoch)
                self.chain.add(epoch)
                self._snaps[epoch] = snap
        self.e.make_durable(ftx.durability.lsn)
        return snap

    # ----- delete -------------------------------------------------------------------------------
    def delete(self, name: bytes) -> None:
        """Delete snapshot ``name`` (ENOENT if there is none) and free what only it held."""
        with self._deleting:
            inodes = self.inodes
            with inodes.lock:
                snap = self.by_name(name)
                if snap is None:
                    raise FsError(errno.ENOENT, f"no snapshot {name!r}")
                snap = Snapshot(snap.epoch, snap.name, snap.created_ns, DELETING)
                with inodes.transaction() as ftx:
                    self.t["snapshots"].put(ftx.tx, U64.pack(snap.epoch), _REC.pack(DELETING, snap.created_ns) + name)
                self._snaps[snap.epoch] = snap
            self.e.make_durable(ftx.durability.lsn)
            with self.readers.exclusive():  # reads begun before still see its pages; none begins now
                pass
            self._finish_one(snap.epoch)

    def finish(self) -> int:
        """At mount: finish the deletes a stop interrupted. Returns how many."""
        todo = [s.epoch for s in self._snaps.values() if s.state == DELETING]
        with self._deleting:
            for epoch in sorted(todo):
                self._finish_one(epoch)
        return len(todo)

    def _finish_one(self, s: int) -> None:
        inodes, t = self.inodes, self.t
        hist, epochs = t["hist"], t["hist_epochs"]
        while True:  # the history: re-keyed to the previous snapshot, or dropped
            with inodes.lock:
                prev, nxt = self.chain.neighbours(s)
                batch = list(islice(epochs.keys(U64.pack(s), U64.pack(s + 1)), BATCH))
                if not batch:  # (under the lock: no entry can be added before s leaves the chain)
                    if s in self.chain.epochs:
                        self.chain.remove(s)
                    break
                with inodes.transaction() as ftx:
                    for ek in batch:
                        tid, key = ek[8], ek[9:]
                        raw = hist.delete(ftx.tx, hist_key(tid, key, s))
                        epochs.delete(ftx.tx, ek)
                        if prev is not None and raw is not None and hist.get(hist_key(tid, key, prev)) is None:
                            hist.put(ftx.tx, hist_key(tid, key, prev), raw)
                            epochs.put(ftx.tx, epoch_key(prev, tid, key), b"")
        start = U64.pack(s + 1)
        while True:  # the dead list: what only s saw is freed (a cursor: kept entries are passed once)
            with inodes.lock:
                seen = list(islice(self._dead_range(start, nxt), BATCH))
                if not seen:
                    break
                with inodes.transaction() as ftx:
                    for key, first, count, birth in seen:
                        if self._only_seen_by(birth, prev):
                            t["dead"].delete(ftx.tx, key)
                            self.e.free_region(ftx.tx, first, count)
                            self.data.sums.forget(ftx.tx, first, count)
                start = seen[-1][0] + b"\0"
        for holder in self.holders:
            holder.prepare_snapshot()
        with inodes.lock, inodes.transaction() as ftx:
            for holder in self.holders:
                holder.thaw(ftx.tx, s)
            t["snapshots"].delete(ftx.tx, U64.pack(s))
        self._snaps.pop(s, None)

    def _dead_range(self, start: bytes, nxt: int | None):
        """Dead-list entries (key, first page, count, birth) from key ``start`` to those freed
        in epoch ``nxt`` (None: to the end)."""
        stop = U64.pack(nxt + 1) if nxt is not None else None
        for k, v in self.t["dead"].items(start, stop):
            count, birth = DEAD.unpack(v)
            yield k, U64X2.unpack(k)[1], count, birth

    @staticmethod
    def _only_seen_by(birth: int, prev: int | None) -> bool:
        """Is a page freed after snapshot ``s`` (and by the next one) seen by ``s`` alone: born
        after the snapshot before it?"""
        return prev is None or birth > prev

    def _freeable(self, s: int, prev: int | None, nxt: int | None):
        """Dead-list entries (key, first page, count) freed in ``(s, nxt]`` and born after
        ``prev``: seen by snapshot ``s`` alone."""
        for k, first, count, birth in self._dead_range(U64.pack(s + 1), nxt):
            if self._only_seen_by(birth, prev):
                yield k, first, count

"""The queues a filesystem snapshot froze, as ``/.snapshots/NAME/queues/QUEUE/``.

::

    queues/QUEUE/status.json    the queue's status document as it was when the snapshot was taken
    queues/QUEUE/segments/      the sealed segments of that moment: same names, same bytes

Everything is read-only (``fs/subtrees/snapshots.py`` refuses changes with EROFS). The frozen
record (``QueueStore.freeze``) names the oldest retained record and where the open segment
started; the snapshot pins the queue's records from that first one on, so the segments it
shows stay readable whatever the retention (they are read from the live queue's blocks, which
only ever gain records past them). There is no ``append``, ``views/`` or ``config.json`` here.

**Numbers** are 32-bit, local to one snapshot (``snapshots.py`` puts the epoch above them):
:data:`BASE` (bits 31 and 30) | queue id << 18 | kind; the ``queues`` folder itself is
:data:`BASE`; a segment's kind is 3 + its position in the frozen list. A queue id of 2^12 or more,
or a segment past the 2^18 - 4th, has no number here (EOVERFLOW: left out of listings).
"""

from __future__ import annotations

import errno
import os
import stat

from ..errors import FsError
from ..keys import Inode
from ..subtrees.protocol import BytesFile, OpenFile
from .index import FrozenQueue, SegmentRecord
from .reader import SegmentReader
from .subtree import Queues, SegmentFile, segment_name

BASE = 1 << 31 | 1 << 30
QID_SHIFT = 18
MAX_QID = (1 << 12) - 1
QUEUE, STATUS, SEGMENTS, FIRST_SEGMENT = range(4)
KIND_MASK = (1 << QID_SHIFT) - 1
NAMES = {b"status.json": STATUS, b"segments": SEGMENTS}


def is_frozen_queue(local: int) -> bool:
    return local & BASE == BASE


class FrozenQueues:
    def __init__(self, subtree: Queues) -> None:
        self.subtree = subtree

    def _store(self):
        return self.subtree.store

    def _find(self, epoch: int, qid: int) -> tuple[bytes, FrozenQueue]:
        store = self._store()
        for name, fq in (store.frozen.get(epoch, {}).items() if store is not None else ()):
            if fq.qid == qid:
                return name, fq
        raise FsError(errno.ENOENT, f"snapshot {epoch} holds no queue id {qid}")

    @staticmethod
    def _local(qid: int, kind: int) -> int:
        if qid > MAX_QID or kind > KIND_MASK:
            raise FsError(errno.EOVERFLOW, f"queue id {qid} entry {kind} has no number in a snapshot")
        return BASE | qid << QID_SHIFT | kind

    def _split(self, local: int) -> tuple[int, int]:
        return (local & ~BASE) >> QID_SHIFT, local & KIND_MASK

    def _segments(self, epoch: int, name: bytes) -> list[tuple[int, SegmentRecord]]:
        return self._store().frozen_segments(epoch, name)[2]

    def parent(self, epoch: int, local: int) -> int | None:
        qid, kind = self._split(local)
        if qid == 0:
            return None
        return BASE if kind == QUEUE else self._local(qid, QUEUE if kind in (STATUS, SEGMENTS) else SEGMENTS)

    def lookup(self, epoch: int, parent: int, name: bytes) -> int:
        qid, kind = self._split(parent)
        if qid == 0:
            store = self._store()
            fq = store.frozen.get(epoch, {}).get(name) if store is not None else None
            if fq is None:
                raise FsError(errno.ENOENT, f"snapshot {epoch} holds no queue {name!r}")
            return self._local(fq.qid, QUEUE)
        qname, _ = self._find(epoch, qid)
        if kind == QUEUE:
            if name not in NAMES:
                raise FsError(errno.ENOENT, f"{name!r} not found")
            return self._local(qid, NAMES[name])
        if kind == SEGMENTS:
            for i, (first, rec) in enumerate(self._segments(epoch, qname)):
                if segment_name(first, rec.end) == name:
                    return self._local(qid, FIRST_SEGMENT + i)
            raise FsError(errno.ENOENT, f"no segment {name!r}")
        raise FsError(errno.ENOTDIR, "not a directory")

    def readdir(self, epoch: int, local: int, after: int) -> list[tuple[bytes, int, int]]:
        qid, kind = self._split(local)
        out = []
        if qid == 0:
            store = self._store()
            for name, fq in sorted(store.frozen.get(epoch, {}).items() if store is not None else ()):
                try:
                    out.append((name, self._local(fq.qid, QUEUE), fq.qid))
                except FsError:
                    continue
        elif kind == QUEUE:
            out = [(n, self._local(qid, k), k) for n, k in NAMES.items()]
        elif kind == SEGMENTS:
            qname, _ = self._find(epoch, qid)
            for i, (first, rec) in enumerate(self._segments(epoch, qname)):
                if FIRST_SEGMENT + i > KIND_MASK:
                    break
                out.append((segment_name(first, rec.end), self._local(qid, FIRST_SEGMENT + i), FIRST_SEGMENT + i))
        else:
            raise FsError(errno.ENOTDIR, "not a directory")
        return sorted((e for e in out if e[2] > after), key=lambda e: e[2])

    def _what(self, epoch: int, local: int):
        """(queue name, frozen record, segment (first, record) or None, kind)."""
        qid, kind = self._split(local)
        qname, fq = self._find(epoch, qid)
        seg = None
        if kind >= FIRST_SEGMENT:
            segs = self._segments(epoch, qname)
            if kind - FIRST_SEGMENT >= len(segs):
                raise FsError(errno.ENOENT, f"no segment {kind - FIRST_SEGMENT} of queue {qname!r}")
            seg = segs[kind - FIRST_SEGMENT]
        return qname, fq, seg, kind

    def attrs(self, epoch: int, local: int, ino: int, time_ns: int) -> Inode:
        qid, kind = self._split(local)
        if qid == 0 or kind in (QUEUE, SEGMENTS):
            if qid:
                self._find(epoch, qid)
            return Inode(ino, stat.S_IFDIR | 0o555, 0, 0, 2, atime_ns=time_ns, mtime_ns=time_ns, ctime_ns=time_ns,
                         crtime_ns=time_ns)
        _, fq, seg, kind = self._what(epoch, local)
        size = len(fq.status) if kind == STATUS else seg[1].size
        return Inode(ino, stat.S_IFREG | 0o444, 0, 0, 1, size=size, atime_ns=time_ns, mtime_ns=time_ns,
                     ctime_ns=time_ns, crtime_ns=time_ns, blocks=(size + 511) // 512)

    def open(self, epoch: int, local: int, flags: int) -> OpenFile:
        qid, kind = self._split(local)
        if qid == 0 or kind in (QUEUE, SEGMENTS):
            raise FsError(errno.EISDIR, "a directory")
        if flags & (os.O_WRONLY | os.O_RDWR) or flags & os.O_TRUNC:
            raise FsError(errno.EROFS, "a snapshot is read-only")
        qname, fq, seg, kind = self._what(epoch, local)
        if kind == STATUS:
            return BytesFile(fq.status)
        q = self._store().queues[qname]
        return SegmentFile(SegmentReader(q, seg[0]))

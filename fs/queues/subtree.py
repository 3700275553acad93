"""``/queues``: the queue store through ordinary paths (the :class:`Subtree` with tag 3).

=====================================  ==========================================================
path                                   what it is
=====================================  ==========================================================
``/queues/NAME/``                      a queue: ``mkdir`` creates it (default settings),
                                       ``rmdir`` removes it with its views and returns its space
``NAME/config.json``                   its settings (read; write a whole JSON object to change
                                       any of them: a bad value is EINVAL and changes nothing)
``NAME/append``                        write-only stream: each ``write`` appends the records
                                       (lines) it completes, atomically; a partial last line
                                       waits in that open until its end or the close; ``fsync``
                                       makes its appends durable
``NAME/status.json``                   the queue's status (a snapshot taken at each open)
``NAME/views/V/``                      a view: ``mkdir`` creates it at the live end, ``rmdir``
                                       removes it
``NAME/views/V/records``               read-only stream of the view's records from its head (at
                                       the open) to the live end
``NAME/views/V/commit``, ``seek``      write a sequence number or ``@<unix time>``: commit
                                       advances the head, seek moves it anywhere in the retained
                                       history (replay); bad values are EINVAL
``NAME/segments/F-L.jsonl``            sealed segments (first and last sequence number,
                                       zero-padded): immutable, exact size, there once sealed
=====================================  ==========================================================

The streams (``append``, ``records``) and the documents that change by themselves
(``status.json``, ``config.json``) are opened ``direct_io``: every ``write`` reaches the queue
as the program wrote it (the page cache would merge and split them, and a record batch is what
one ``write`` completes), and every read asks the queue (the page cache would serve records
from an earlier open). Segments never change, so their pages stay cached (``keep_cache``) and
``mmap`` works for Spark.

**Inode numbers** come from what the store keeps: a hash (BLAKE2b, 47 bits) of the queue id
and the view name or segment number, the same at every mount. Every inode handed out is kept in
a table, which resolves a hash collision (vanishingly unlikely below millions of entries) by
probing the next number — the only case whose numbers could differ at the next mount.

The store is opened with the filesystem when the filesystem holds queues, else at the first
``mkdir``, so filesystems that never held a queue are not changed; it is closed before the
engine. Changes are refused with EPERM.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import threading
import time
from typing import NamedTuple

from ..errors import FsError
from ..keys import Inode
from ..limits import check_name
from ..subtrees.protocol import LOCAL_MASK, BytesFile, Caller, OpenFile, Subtree, dense_seek, subtree_ino
from .config import ConfigError
from .index import SegmentRecord, seq_key
from .producer import Producer
from .reader import Reader, SegmentReader
from .status import status_json
from .store import QueueStore, has_queues

SEG_DIGITS = 20  # decimal digits of a sequence number in a segment's name (2**64 has 20)
BLOCK_UNITS = 512


class Node(NamedTuple):
    """What an inode is: ``kind`` (see :data:`KINDS`), its queue id and its view name or
    segment first sequence number."""

    kind: str
    qid: int = 0
    key: bytes | int = b""


QUEUE_FILES = {b"config.json": "config", b"append": "append", b"status.json": "status", b"views": "views",
               b"segments": "segments"}
VIEW_FILES = {b"records": "records", b"commit": "commit", b"seek": "seek"}
DIRS = {"top", "queue", "views", "view", "segments"}
MODES = {"config": 0o644, "append": 0o222, "status": 0o444, "records": 0o444, "commit": 0o222, "seek": 0o222,
         "segment": 0o444}


def segment_name(first: int, end: int) -> bytes:
    return f"{first:0{SEG_DIGITS}d}-{end - 1:0{SEG_DIGITS}d}.jsonl".encode()


def parse_segment_name(name: bytes) -> int | None:
    """The first sequence number a segment's name gives, or None."""
    try:
        first, rest = name.split(b"-", 1)
        last = rest.removesuffix(b".jsonl")
        if len(first) != SEG_DIGITS or len(last) != SEG_DIGITS or not rest.endswith(b".jsonl"):
            return None
        return int(first)
    except ValueError:
        return None


def parse_position(text: bytes, queue) -> int:
    """A sequence number or ``@<unix time>`` (seconds, fractions allowed) written to commit/seek."""
    s = text.strip()
    try:
        if s.startswith(b"@"):
            t = float(s[1:])
            if not 0 <= t < 1 << 40:
                raise ValueError
            return queue.seq_at(int(t * 1000))
        if not s.isdigit():
            raise ValueError
        return int(s)
    except ValueError:
        raise FsError(errno.EINVAL, f"{s[:40]!r} is not a sequence number or @<unix time>") from None


class Queues(Subtree):
    name = b"queues"
    tag = 3

    def __init__(self, engine) -> None:
        self._engine = engine
        self._store: QueueStore | None = None
        self._interval = 1.0
        self._opened = False  # served (the filesystem was opened for use, not for a check)
        self._lock = threading.Lock()  # the store's opening and the inode table
        self._nodes: dict[int, Node] = {self.top_ino: Node("top")}
        self._inos: dict[Node, int] = {Node("top"): self.top_ino}
        self._made_ns = time.time_ns()

    # ----- life ---------------------------------------------------------------------------------
    def start(self, commit_interval: float) -> None:
        """The filesystem is open for use: open the store now if it holds queues."""
        self._interval = commit_interval
        self._opened = True
        if has_queues(self._engine):
            self._store = self._snapshots_known(QueueStore(self._engine, commit_interval=commit_interval))

    @property
    def store(self) -> QueueStore | None:
        return self._store

    def _made_store(self) -> QueueStore:
        with self._lock:
            if self._store is None:
                if not self._opened:
                    raise FsError(errno.EROFS, "/queues: the filesystem is not open for use")
                self._store = self._snapshots_known(QueueStore(self._engine, commit_interval=self._interval))
            return self._store

    # ----- snapshots (fs/snapshot_store.py's holders; fs/queues/frozen.py serves them) ---------
    snapshots = None  # the SnapshotStore, set where both are made

    def _snapshots_known(self, store: QueueStore) -> QueueStore:
        """A store just opened: it names the snapshots holding a queue, and forgets what the
        snapshots deleted before it was open froze."""
        if self.snapshots is not None:
            snaps = self.snapshots
            store.snapshot_name = lambda epoch: None if (s := snaps.by_epoch(epoch)) is None else s.name
            store.keep_frozen(lambda epoch: snaps.by_epoch(epoch) is not None)
        return store

    def prepare_snapshot(self) -> None:
        """(The store is open whenever there are queues to freeze.)"""

    def freeze(self, tx, epoch: int) -> None:
        if self._store is not None:
            self._store.freeze(tx, epoch)

    def thaw(self, tx, epoch: int) -> None:
        if self._store is not None:
            self._store.thaw(tx, epoch)

    def close(self) -> None:
        """Clean close of the store (before the engine's)."""
        if self._store is not None:
            self._store.close()
            self._store = None

    def crash(self) -> None:
        if self._store is not None:
            self._store.crash()
            self._store = None

    # ----- inodes -------------------------------------------------------------------------------
    def _ino(self, node: Node) -> int:
        with self._lock:
            ino = self._inos.get(node)
            if ino is not None:
                return ino
            key = node.key if isinstance(node.key, bytes) else node.key.to_bytes(8, "big")
            h = hashlib.blake2b(node.kind.encode() + b"\0" + node.qid.to_bytes(8, "big") + key, digest_size=8)
            local = (int.from_bytes(h.digest(), "big") & (LOCAL_MASK >> 1)) | (1 << 47)
            while subtree_ino(self.tag, local) in self._nodes:  # a collision: probe
                local = (local + 1) & LOCAL_MASK | (1 << 47)
            ino = subtree_ino(self.tag, local)
            self._nodes[ino] = node
            self._inos[node] = ino
            return ino

    def _forget_segments(self, q) -> None:
        """Drop the table's inodes of segments reclaimed with their records (the table would
        otherwise grow by every segment ever listed)."""
        with self._lock:
            for node in [n for n in self._inos if n.kind == "segment" and n.qid == q.qid and n.key < q.first_seq]:
                del self._nodes[self._inos.pop(node)]

    def _forget(self, qid: int, view: bytes | None = None) -> None:
        """Drop the table's inodes of a removed queue (or one of its views)."""
        with self._lock:
            for node in [n for n in self._inos if n.qid == qid and n.kind != "top"
                         and (view is None or (n.kind in ("view", "records", "commit", "seek") and n.key == view))]:
                del self._nodes[self._inos.pop(node)]

    def _node(self, ino: int) -> Node:
        node = self._nodes.get(ino)
        if node is None:
            raise FsError(errno.ENOENT, f"inode {ino} does not exist")
        return node

    def _queue(self, qid: int):
        store = self._store
        if store is not None:
            for q in list(store.queues.values()):
                if q.qid == qid:
                    return q
        raise FsError(errno.ENOENT, f"queue id {qid} does not exist")

    def _check(self, node: Node):
        """The queue of ``node`` (ENOENT if it, its view or its segment is gone)."""
        if node.kind == "top":
            return None
        q = self._queue(node.qid)
        if node.kind in ("view", "records", "commit", "seek") and node.key not in q.views:
            raise FsError(errno.ENOENT, f"{q.where}: no view {node.key!r}")
        if node.kind == "segment" and q.t["segments"].get(_seg_key(q, node.key)) is None:
            raise FsError(errno.ENOENT, f"{q.where}: no segment at {node.key}")
        return q

    # ----- attributes ---------------------------------------------------------------------------
    def _attrs(self, node: Node, q, seg: SegmentRecord | None = None) -> Inode:
        ino = self._ino(node)
        t = self._made_ns if q is None else q.created_ms * 1_000_000
        if node.kind in DIRS:
            return Inode(ino, stat.S_IFDIR | 0o755, 0, 0, 2, atime_ns=t, mtime_ns=t, ctime_ns=t, crtime_ns=t)
        size = 0
        if node.kind == "config":
            size = len(q.config.to_json())
        elif node.kind == "status":
            size = len(status_json(q))
        elif node.kind == "segment":
            rec = seg or _segment(q, node.key)
            size = rec.size
            t = rec.sealed_ms * 1_000_000
        return Inode(ino, stat.S_IFREG | MODES[node.kind], 0, 0, 1, size=size, atime_ns=t, mtime_ns=t, ctime_ns=t,
                     crtime_ns=t, blocks=(size + BLOCK_UNITS - 1) // BLOCK_UNITS)

    def getattr(self, ino: int, caller: Caller) -> Inode:
        node = self._node(ino)
        return self._attrs(node, self._check(node))

    def volatile(self, ino: int) -> bool:
        node = self._nodes.get(ino)
        return node is not None and node.kind in ("config", "status")

    def lookup(self, parent: int, name: bytes, caller: Caller) -> Inode:
        node = self._node(parent)
        q = self._check(node)
        child = self._child(node, q, name)
        if child is None:
            raise FsError(errno.ENOENT, f"{name!r} not found")
        return self._attrs(child, q if child.kind != "queue" else self._queue(child.qid))

    def _child(self, node: Node, q, name: bytes) -> Node | None:
        if name == b"..":
            up = {"queue": Node("top"), "views": Node("queue", node.qid), "segments": Node("queue", node.qid),
                  "view": Node("views", node.qid)}.get(node.kind)
            return up
        if node.kind == "top":
            store = self._store
            found = store.queues.get(name) if store is not None else None
            return Node("queue", found.qid) if found is not None else None
        if node.kind == "queue":
            kind = QUEUE_FILES.get(name)
            return Node(kind, node.qid) if kind else None
        if node.kind == "views":
            return Node("view", node.qid, name) if name in q.views else None
        if node.kind == "view":
            kind = VIEW_FILES.get(name)
            return Node(kind, node.qid, node.key) if kind else None
        if node.kind == "segments":
            first = parse_segment_name(name)
            if first is None:
                return None
            rec = q.t["segments"].get(_seg_key(q, first))
            if rec is None or first < q.first_seq:
                return None
            if segment_name(first, SegmentRecord.unpack(rec).end) != name:
                return None
            return Node("segment", node.qid, first)
        return None

    def readdir(self, ino: int, after: int, limit: int, caller: Caller) -> list[tuple[bytes, Inode, int]]:
        node = self._node(ino)
        q = self._check(node)
        if node.kind not in DIRS:
            raise FsError(errno.ENOTDIR, f"inode {ino} is not a directory")
        entries: list[tuple[bytes, Node]]
        segs: dict[int, SegmentRecord] = {}
        if node.kind == "top":
            store = self._store
            found = [(n, store.queues.get(n)) for n in store.names()] if store is not None else []
            entries = [(n, Node("queue", found_q.qid)) for n, found_q in found if found_q is not None]
        elif node.kind == "queue":
            entries = [(n, Node(k, node.qid)) for n, k in QUEUE_FILES.items()]
        elif node.kind == "views":
            entries = [(n, Node("view", node.qid, n)) for n in sorted(q.views)]
        elif node.kind == "view":
            entries = [(n, Node(k, node.qid, node.key)) for n, k in VIEW_FILES.items()]
        else:
            self._forget_segments(q)
            segs = dict(q.segments())
            entries = [(segment_name(first, rec.end), Node("segment", node.qid, first)) for first, rec in segs.items()]
        # cookie: the entry's inode number's local part (stable while the entry exists), in that order
        ordered = sorted((self._ino(child) & LOCAL_MASK, name, child) for name, child in entries)
        out = []
        for cookie, name, child in ordered:
            if cookie <= after:
                continue
            try:
                attrs = self._attrs(child, self._queue(child.qid) if child.kind == "queue" else q, segs.get(child.key))
            except FsError:
                continue  # went away meanwhile
            out.append((name, attrs, cookie))
            if len(out) == limit:
                break
        return out

    # ----- changes ------------------------------------------------------------------------------
    def create(self, parent: int, name: bytes, mode: int, caller: Caller, rdev: int = 0,
               target: bytes | None = None) -> Inode:
        node = self._node(parent)
        if not stat.S_ISDIR(mode) or node.kind not in ("top", "views"):
            self._refuse("creating this entry (mkdir /queues/NAME makes a queue, mkdir NAME/views/V a view)")
        if node.kind == "top":
            store = self._made_store()
            q = store.create(name)
            return self._attrs(Node("queue", q.qid), q)
        q = self._check(node)
        check_name(name, "view name")
        q.create_view(name)
        return self._attrs(Node("view", q.qid, name), q)

    def rmdir(self, parent: int, name: bytes, caller: Caller) -> None:
        node = self._node(parent)
        q = self._check(node)
        if node.kind == "top":
            store = self._store
            if store is None or name not in store.queues:
                raise FsError(errno.ENOENT, f"no queue {name!r}")
            qid = store.queues[name].qid
            store.remove(name)
            self._forget(qid)
            return
        if node.kind == "views":
            q.remove_view(name)
            self._forget(q.qid, name)
            return
        child = self._child(node, q, name) if name != b".." else None
        if child is None:
            raise FsError(errno.ENOENT, f"{name!r} not found")
        if child.kind not in DIRS:
            raise FsError(errno.ENOTDIR, f"{name!r} is not a directory")
        self._refuse("removing this directory")

    def unlink(self, parent: int, name: bytes, caller: Caller) -> None:
        node = self._node(parent)
        q = self._check(node)
        child = self._child(node, q, name)
        if child is None:
            raise FsError(errno.ENOENT, f"{name!r} not found")
        if child.kind in DIRS:
            raise FsError(errno.EISDIR, f"{name!r} is a directory")
        self._refuse("removing a file (rmdir the queue or view)")

    def setattr(self, ino: int, changes: dict, caller: Caller) -> Inode:
        """Only ``truncate`` to 0 of the writable files (a shell's ``>``), which changes nothing."""
        node = self._node(ino)
        q = self._check(node)
        if changes.get("size") == 0 and set(changes) <= {"size", "mtime_ns", "ctime_ns", "atime_ns"} \
                and node.kind in ("config", "append", "commit", "seek"):
            return self._attrs(node, q)
        return self._refuse("changing attributes")

    # ----- files --------------------------------------------------------------------------------
    def open(self, ino: int, flags: int, caller: Caller) -> OpenFile:
        node = self._node(ino)
        q = self._check(node)
        if node.kind in DIRS:
            raise FsError(errno.EISDIR, f"inode {ino} is a directory")
        access = flags & os.O_ACCMODE
        writes = access in (os.O_WRONLY, os.O_RDWR)
        reads = access in (os.O_RDONLY, os.O_RDWR)
        if node.kind in ("append", "commit", "seek"):
            if reads:
                raise FsError(errno.EACCES, f"{node.kind} is write-only")
            if node.kind == "append":
                return AppendFile(q)
            return PositionFile(q, node.key, node.kind)
        if node.kind == "config":
            return ConfigFile(q, writes)
        if writes:
            raise FsError(errno.EPERM, f"{node.kind} files are read-only")
        if node.kind == "status":
            return BytesFile(status_json(q))
        if node.kind == "records":
            return RecordsFile(q, node.key)
        return SegmentFile(SegmentReader(q, node.key))


def _seg_key(q, first: int) -> bytes:
    return seq_key(q.qid, first)


def _segment(q, first: int) -> SegmentRecord:
    raw = q.t["segments"].get(_seg_key(q, first))
    if raw is None:
        raise FsError(errno.ENOENT, f"{q.where}: no segment at {first}")
    return SegmentRecord.unpack(raw)


class AppendFile(OpenFile):
    """An open of ``append``: a producer (see ``producer.py``)."""

    direct_io = True
    nonseekable = True

    def __init__(self, q) -> None:
        self.p = Producer(q)
        self._lock = threading.Lock()  # one write of this open at a time: batches keep their order

    def write(self, off: int, data: bytes) -> int:
        with self._lock:
            return self.p.write(data)

    def flush_pending(self) -> bool:
        return bool(self.p.partial)

    def flush(self) -> None:
        with self._lock:
            self.p.flush()

    def fsync(self, datasync: bool) -> None:
        with self._lock:
            self.p.sync()

    def release(self) -> None:
        self.flush()


class PositionFile(OpenFile):
    """An open of a view's ``commit`` or ``seek``: each write is one position, applied at once."""

    direct_io = True
    nonseekable = True

    def __init__(self, q, view: bytes, kind: str) -> None:
        self.q, self.view, self.kind = q, view, kind

    def write(self, off: int, data: bytes) -> int:
        seq = parse_position(bytes(data), self.q)
        (self.q.commit if self.kind == "commit" else self.q.seek)(self.view, seq)
        return len(data)


class ConfigFile(BytesFile):
    """``config.json``: reads show the settings at the open; what is written is gathered, and
    applied whole as soon as it is a complete JSON document (or at the close)."""

    def __init__(self, q, writes: bool) -> None:
        super().__init__(q.config.to_json().encode())
        self.q = q
        self.writes = writes
        self.buf = bytearray()
        self.pending = False

    def write(self, off: int, data: bytes) -> int:
        if not self.writes:
            raise FsError(errno.EBADF, "not open for writing")
        self.buf += data
        self.pending = True
        try:
            json.loads(self.buf)
        except ValueError:
            return len(data)  # not whole yet: the rest may come, else the close says EINVAL
        try:
            self._apply()
        except FsError:
            del self.buf[-len(data) :]  # this write changed nothing
            self.pending = bool(self.buf)
            raise
        return len(data)

    def _apply(self) -> None:
        try:
            config = self.q.config.parse(bytes(self.buf), self.q.config)
        except ConfigError as e:
            self.q._note_error(f"config.json refused: {e}")
            raise FsError(errno.EINVAL, f"{self.q.where}: config.json refused: {e}") from None
        self.q.set_config(config)
        self.buf.clear()
        self.pending = False

    def flush_pending(self) -> bool:
        return self.pending and bool(self.buf.strip())

    def flush(self) -> None:
        if self.flush_pending():
            try:
                self._apply()
            finally:
                self.buf.clear()
                self.pending = False

    def release(self) -> None:
        self.flush()


class RecordsFile(OpenFile):
    """An open of a view's ``records``: the stream from the view's head at the open."""

    direct_io = True
    nonseekable = True

    def __init__(self, q, view: bytes) -> None:
        with q.lock:
            head = q._view(view).head
            self.r = Reader(q, head)
        self._lock = threading.Lock()

    def read(self, off: int, size: int) -> bytes:
        with self._lock:
            return self.r.read(size)

    def release(self) -> None:
        self.r.close()


class SegmentFile(OpenFile):
    """An open of a sealed segment (immutable: its pages stay cached)."""

    keep_cache = True

    def __init__(self, r: SegmentReader) -> None:
        self.r = r

    def read(self, off: int, size: int) -> bytes:
        return self.r.read(off, size)

    def seek(self, off: int, whence: int) -> int:
        return dense_seek(off, whence, self.r.size)

    def release(self) -> None:
        self.r.close()


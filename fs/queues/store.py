"""The queue store: every queue of a filesystem, their trees, and the work that runs on its own.

Queues are named like files (at most 255 bytes, no ``/`` or NUL, not ``.`` or ``..``). Creating
one is a transaction, durable when it returns (as the creation of a view is). Removing one
first removes its name and marks its id doomed (one transaction), then frees its blocks in
transactions of bounded size; an open after a crash finishes what a removal left. A
background thread persists tails, seals segments whose time is up and reclaims blocks.

**Snapshots.** A filesystem snapshot freezes every queue (:meth:`QueueStore.freeze`, in the
snapshot's own create transaction): its oldest retained record, where its sealed segments end
and its status then. The frozen queue pins its records from that first one on (a pin like an
open reader's, restored at every open), so retention cannot reclaim what the snapshot shows; a
queue a snapshot holds cannot be removed (EBUSY naming the snapshot). Deleting the snapshot
drops its records and pins (:meth:`QueueStore.thaw`; an open drops those of snapshots that are
gone, :meth:`QueueStore.keep_frozen`).
"""

from __future__ import annotations

import errno
import itertools
import logging
import threading
import time
from collections.abc import Callable

from ..errors import FsError
from ..limits import check_name
from ..rawstore import EngineIO, has_trees, refuse_if_held
from .cache import BlockCache
from .config import QueueConfig
from .index import (
    DOOMED,
    FROZEN,
    KEY_NEXT_ID,
    PREFIX,
    TREES,
    U64,
    BlockEntry,
    FrozenQueue,
    QueueRecord,
    SegmentRecord,
    frozen_key,
    key_seq,
    queue_range,
    seq_key,
    time_key,
    view_key,
)
from .queue import RECLAIM_BATCH, Queue, now_ms
from .status import status_json

log = logging.getLogger("traxfs.queues")


def has_queues(engine) -> bool:
    """Was a queue store ever made on ``engine`` (fsck opens one only then)?"""
    return has_trees(engine, TREES, PREFIX)


class QueueStore:
    def __init__(self, engine, *, commit_interval: float = 1.0, cache_bytes: int = 32 << 20, background: bool = True):
        """``background``: run :meth:`tick` every tenth of a second (tests that step time
        themselves call it instead)."""
        self.io = EngineIO(engine)
        self.t = self.io.trees(TREES, PREFIX)
        self.cache = BlockCache(cache_bytes)
        self.interval = commit_interval / 2
        self._lock = threading.Lock()
        self.queues: dict[bytes, Queue] = {}
        for key, raw in self.t["queues"].items():
            if not key.startswith(b"\0"):
                self.queues[key] = Queue(self, key, QueueRecord.unpack(raw, f"queue {key!r}"))
        for key in list(self.t["queues"].keys(DOOMED, DOOMED + b"\xff")):
            self._purge(U64.unpack(key[len(DOOMED) :])[0])
        # snapshot epoch -> queue name -> what it froze; snapshot_name: a live snapshot's name
        self.frozen: dict[int, dict[bytes, FrozenQueue]] = {}
        self.snapshot_name: Callable[[int], bytes | None] = lambda epoch: str(epoch).encode()
        for key, raw in self.t["queues"].items(FROZEN, FROZEN + b"\xff"):
            epoch, name = U64.unpack(key[len(FROZEN) : len(FROZEN) + 8])[0], key[len(FROZEN) + 8 :]
            fq = self.frozen.setdefault(epoch, {})[name] = FrozenQueue.unpack(raw, f"frozen {key!r}")
            q = self.queues.get(name)
            if q is not None and q.qid == fq.qid:
                q.pins[-epoch] = max(fq.first_seq, q.first_seq)
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick_loop, name="queue-ticker", daemon=True)
        if background:
            self._ticker.start()

    # ----- the set of queues --------------------------------------------------------------------
    def names(self) -> list[bytes]:
        with self._lock:
            return sorted(self.queues)

    def get(self, name: bytes) -> Queue:
        q = self.queues.get(name)
        if q is None:
            raise FsError(errno.ENOENT, f"no queue {name.decode(errors='replace')!r}")
        return q

    def create(self, name: bytes, config: QueueConfig | None = None) -> Queue:
        check_name(name, "queue name")
        config = config or QueueConfig()
        config.check()
        with self._lock:
            if name in self.queues:
                raise FsError(errno.EEXIST, f"queue {name.decode(errors='replace')!r} exists")
            tx = self.io.begin()
            try:
                raw = self.t["queues"].get(KEY_NEXT_ID)
                qid = U64.unpack(raw)[0] if raw is not None else 1
                self.t["queues"].put(tx, KEY_NEXT_ID, U64.pack(qid + 1))
                rec = QueueRecord(qid, now_ms(), 0, config)
                self.t["queues"].put(tx, name, rec.pack())
            except BaseException as ex:
                self.io.abort(tx)
                raise self.io.failure(ex) or ex from None
            self.io.commit(tx, durable=True)
            q = self.queues[name] = Queue(self, name, rec)
            return q

    def remove(self, name: bytes) -> None:
        """Remove queue ``name``: its name at once, its space block by block."""
        with self._lock:
            q = self.get(name)
            refuse_if_held("queue", name, self.frozen, self.snapshot_name)
            with q.lock:
                tx = self.io.begin()
                try:
                    self.t["queues"].delete(tx, name)
                    self.t["queues"].put(tx, DOOMED + U64.pack(q.qid), b"")
                    for view in q.views:
                        self.t["views"].delete(tx, view_key(q.qid, view))
                except BaseException as ex:
                    self.io.abort(tx)
                    raise self.io.failure(ex) or ex from None
                self.io.commit(tx, durable=True)
                q.removed = True
                q.tail = None
                del self.queues[name]
        self._purge(q.qid)

    def _purge(self, qid: int) -> None:
        """Free every block of a removed queue, then forget it."""
        lo, hi = queue_range(qid)
        while True:
            tx = self.io.begin()
            batch = [(k, BlockEntry.unpack(v)) for k, v in itertools.islice(self.t["blocks"].items(lo, hi),
                                                                            RECLAIM_BATCH)]
            for key, e in batch:
                self.t["blocks"].delete(tx, key)
                self.t["times"].delete(tx, time_key(qid, e.first_ts, key_seq(key)))
                self.io.free(tx, e.page, e.pages)
            if not batch:
                for key in list(self.t["segments"].keys(lo, hi)):
                    self.t["segments"].delete(tx, key)
                self.t["queues"].delete(tx, DOOMED + U64.pack(qid))
            self.io.commit(tx)
            self.cache.drop([(qid, key_seq(k)) for k, _ in batch])
            if not batch:
                return

    # ----- background work ----------------------------------------------------------------------
    def _tick_loop(self) -> None:
        period = min(0.1, self.interval)
        while not self._stop.wait(period):
            self.tick()

    def tick(self) -> None:
        for q in list(self.queues.values()):
            try:
                q.tick(self.interval)
            except Exception:  # noqa: BLE001  (the queue notes its error; the others go on)
                log.exception("queue %r: periodic work failed", q.name)

    # ----- snapshots ----------------------------------------------------------------------------
    def freeze(self, tx, epoch: int) -> None:
        """Record every queue as it is now for snapshot ``epoch``, in ``tx`` (the snapshot's
        create transaction), and pin its retained records."""
        with self._lock:
            got = {}
            for name, q in self.queues.items():
                with q.lock:
                    fq = FrozenQueue(q.qid, q.first_seq, q.seg_first, status_json(q))
                    self.t["queues"].put(tx, frozen_key(epoch, name), fq.pack())
                    q.pins[-epoch] = fq.first_seq
                got[name] = fq
            self.frozen[epoch] = got

    def thaw(self, tx, epoch: int) -> None:
        """Drop snapshot ``epoch``'s records (in ``tx``) and its pins."""
        with self._lock:
            for key in list(self.t["queues"].keys(frozen_key(epoch, b""), frozen_key(epoch + 1, b""))):
                self.t["queues"].delete(tx, key)
            for name in self.frozen.pop(epoch, {}):
                q = self.queues.get(name)
                if q is not None:
                    with q.lock:
                        q.pins.pop(-epoch, None)

    def keep_frozen(self, live: Callable[[int], bool]) -> None:
        """At open: drop what snapshots that are gone froze (their delete finished before this
        store was open)."""
        for epoch in [e for e in self.frozen if not live(e)]:
            tx = self.io.begin()
            try:
                self.thaw(tx, epoch)
            except BaseException:
                self.io.abort(tx)
                raise
            self.io.commit(tx, durable=True)

    def frozen_segments(self, epoch: int, name: bytes) -> tuple[Queue, FrozenQueue, list[tuple[int, SegmentRecord]]]:
        """The live queue, what snapshot ``epoch`` froze of it, and its sealed segments then."""
        fq = self.frozen.get(epoch, {}).get(name)
        q = self.queues.get(name)
        if fq is None or q is None or q.qid != fq.qid:
            raise FsError(errno.ENOENT, f"snapshot {epoch} holds no queue {name.decode(errors='replace')!r}")
        with q.lock:
            segs = [(key_seq(k), SegmentRecord.unpack(v))
                    for k, v in self.t["segments"].items(seq_key(fq.qid, fq.first_seq), seq_key(fq.qid, fq.sealed_end))]
        return q, fq, segs

    # ----- shutdown -----------------------------------------------------------------------------
    def close(self) -> None:
        """Clean shutdown of the store (before the engine's): every tail persisted."""
        self._stop.set()
        if self._ticker.is_alive():
            self._ticker.join()
        for q in list(self.queues.values()):
            q.close()
        self.cache.close()
        self.io.close()

    def crash(self) -> None:
        """Stop the background work without writing anything (tests: the process died)."""
        self._stop.set()
        if self._ticker.is_alive():
            self._ticker.join()
        self.cache.close()
        self.io.close()

    def stats(self) -> dict:
        return {"queues": len(self.queues), "cache_bytes": self.cache.bytes, **self.cache.stats, **self.io.stats,
                "at": time.time()}

"""One queue: appends into its tail block, persistence, segments, views, retention and reclaim.

**Appending.** A batch of whole lines gets consecutive sequence numbers and one timestamp (ms,
never lower than the queue's last). It goes into the tail block (memory); what does not fit
seals the tail and continues in new blocks, allocated first — so a full volume refuses the
batch with ENOSPC before anything changes. Readers see a batch whole or not at all (the queue's
lock), and a crash keeps a batch whole or loses it whole: the log only ever describes the tail
up to a batch's end, and a batch that spans blocks has every block it touched described in one
transaction.

**Persistence** (ordered mode). Bytes go to the block's pages first, past what the log
describes; then a transaction records the block's new ``used``; the log barrier flushes the
device before that record is written. The tail is persisted every half commit interval (so
with the log's group-commit delay an unclean stop loses about ``1.5 x interval`` of appends at
most), when a segment is sealed, when a view commits past what is persisted, and by ``sync``
(fsync), which then forces the log.

**Sequence numbers** are never reused: before handing out numbers at or past ``reserved``, the
queue record reserves another :data:`RESERVE_STEP` with a durable commit. After a crash the
queue continues at ``reserved``: the numbers a crash lost (and the unused rest of the
reservation) are skipped, so no consumer ever sees one number mean two records. A clean close
lowers ``reserved`` to the end, and the next open continues without a gap.

**Retention and reclaim.** A block is reclaimed (its pages freed, reusable once that is
durable) when no view, no open reader and no snapshot needs it — every view's head, every
reader and every snapshot's frozen first record (``store.py``) is past its last record — and
the history does not: the retention keeps records younger than ``retain_age_seconds`` and among
the last ``retain_count`` (a limit set to null does not limit). The tail is never reclaimed. Segments go with their first record.
"""

from __future__ import annotations

import errno
import itertools
import logging
import threading
import time
from typing import NamedTuple

from ...ext.linescan import scan_lines
from ..errors import FsError
from .block import FRAME_SIZE, HEADER_SIZE, Block, BlockDamaged, pages_for
from .config import QueueConfig
from .index import (
    MAX_SEQ,
    BlockEntry,
    QueueRecord,
    SegmentRecord,
    ViewRecord,
    key_seq,
    queue_range,
    seq_key,
    time_key,
    view_key,
)
from .records import BadRecord, check_batch

log = logging.getLogger("traxfs.queues")

RESERVE_STEP = 1 << 20
RECLAIM_BATCH = 128  # blocks freed per transaction
_readers = itertools.count(1)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Chunk(NamedTuple):
    """Part of a batch bound for one block: ``data[start:end]``, ``count`` lines; ``pages``: the
    size of a new block to start for it (0: the current tail)."""

    start: int
    end: int
    count: int
    pages: int


class Queue:
    def __init__(self, store, name: bytes, rec: QueueRecord):
        self.store, self.io, self.t = store, store.io, store.t
        self.name, self.qid, self.created_ms = name, rec.qid, rec.created_ms
        self.config = rec.config
        self.reserved = rec.reserved
        self.lock = threading.RLock()
        self.where = f"queue {name.decode(errors='replace')!r}"
        self.tail: Block | None = None
        self.live_end = rec.reserved  # the next sequence number
        self.first_seq = rec.reserved  # the oldest retained record
        self.records = self.payload = self.blocks = 0  # retained
        self.last_ts = 0
        self.next_ordinal = 0
        self.views: dict[bytes, ViewRecord] = {}
        self.pins: dict[int, int] = {}  # open readers (id > 0), snapshots (-epoch) -> sequence number they need
        self.seg_first = rec.reserved  # the open segment: first record, records, bytes, first timestamp
        self.seg_count = self.seg_bytes = self.seg_ts = 0
        self.last_persist = time.monotonic()
        self.removed = False
        self.broken: str | None = None
        self.last_error: str | None = None
        self.stats = {"appends": 0, "appended_records": 0, "appended_bytes": 0, "refused_writes": 0,
                      "refused_records": 0, "blocks_written": 0, "blocks_reclaimed": 0, "segments_sealed": 0,
                      "persists": 0, "reads": 0, "read_bytes": 0}
        self._rate: list[tuple[float, int]] = []  # (monotonic second, records appended in it)
        self._load()

    # ----- opening ------------------------------------------------------------------------------
    def _load(self) -> None:
        lo, hi = queue_range(self.qid)
        last = None
        for key, raw in self.t["blocks"].items(lo, hi):
            e = BlockEntry.unpack(raw)
            if last is None:
                self.first_seq = key_seq(key)
            self.records += e.count
            self.payload += e.payload
            self.blocks += 1
            last = (key_seq(key), e)
        for key, raw in self.t["views"].items(lo, hi):
            self.views[key[8:]] = ViewRecord.unpack(raw)
        if last is not None:
            first, e = last
            self.next_ordinal = e.ordinal + 1
            self.last_ts = e.last_ts
            if e.count == 0:  # allocated, never written (a crash, or a batch refused): give it back
                self._discard_empty(first, e)
            elif first + e.count == self.live_end:  # a clean close: appends continue in it
                try:
                    self.tail = self.load_block(first, e).reopened()
                except BlockDamaged as ex:  # readers of it get the error; appends go to a new block
                    self._note_error(ex.detail)
        # a head below the oldest record points at numbers a crash skipped or records it lost
        # (never made durable): nothing is there to read, so the view starts at the oldest record
        # (in memory: every open computes the same; status shows no lag of phantom records)
        self.views = {n: v._replace(head=max(v.head, self.first_seq)) for n, v in self.views.items()}
        segs = list(self.t["segments"].items(lo, hi))
        self.seg_first = max(self.first_seq, SegmentRecord.unpack(segs[-1][1]).end if segs else self.first_seq)
        self._count_open_segment()

    def _discard_empty(self, first: int, e: BlockEntry) -> None:
        """Free the last block, allocated but never written (a crash came before its records)."""
        tx = self.io.begin()
        self.t["blocks"].delete(tx, seq_key(self.qid, first))
        self.t["times"].delete(tx, time_key(self.qid, e.first_ts, first))
        self.io.free(tx, e.page, e.pages)
        self.io.commit(tx)
        self.blocks -= 1
        if self.blocks == 0:
            self.first_seq = self.live_end

    def _count_open_segment(self) -> None:
        """Records, bytes and first timestamp of the open segment (after an open): the block
        holding its first record is read, the others are counted from the index."""
        lo, hi = queue_range(self.qid)
        floor = self.t["blocks"].floor(seq_key(self.qid, self.seg_first))
        start = key_seq(floor[0]) if floor is not None and floor[0][:8] == lo else self.seg_first
        for key, raw in self.t["blocks"].items(seq_key(self.qid, start), hi):
            first, e = key_seq(key), BlockEntry.unpack(raw)
            if first + e.count <= self.seg_first:
                continue
            if not self.seg_count:
                try:
                    b = self._block(first, e)
                except BlockDamaged as ex:  # its records cannot be served: the segment starts after it
                    self._note_error(ex.detail)
                    self.seg_first = first + e.count
                    continue
                at = max(self.seg_first, first)
                self.seg_ts = next(f.ts_ms for f in reversed(b.frames) if f.first_seq <= at)
                self.seg_bytes -= b.ro_of(at)
            self.seg_count += first + e.count - max(self.seg_first, first)
            self.seg_bytes += e.payload

    # ----- appending ----------------------------------------------------------------------------
    def append(self, data) -> tuple[int, int]:
        """Append the whole lines ``data``; returns (first sequence number, record count).
        Refused whole (EINVAL) if a record is not acceptable, (ENOSPC) if the volume is full."""
        if not data:
            return self.live_end, 0
        if data[-1:] != b"\n":
            raise BadRecord("a batch must end with a newline (records are whole lines)")
        try:
            count = check_batch(data, self.config.max_record_bytes)
        except BadRecord as e:
            self._refused(data.count(b"\n"), e.detail)
            raise
        with self.lock:
            self._usable()
            ts = max(now_ms(), self.last_ts)
            first = self.live_end
            if first + count > self.reserved:
                self._reserve(first + count + RESERVE_STEP)
            chunks = self._plan(data, count, ts)
            tx = None
            if any(c.pages for c in chunks) or self.seg_bytes + len(data) >= self.config.seal_bytes:
                tx = self.io.begin()
            try:
                pages = self._allocate(tx, [c.pages for c in chunks if c.pages])
            except BaseException as ex:
                self.io.abort(tx)
                failure = self.io.failure(ex)
                if failure is not None:
                    self._note_error(failure.detail)
                    raise failure from None
                raise
            try:
                self._place(tx, data, chunks, pages, ts)
                self.live_end += count
                self._account(count, len(data), ts)
                if self.seg_bytes >= self.config.seal_bytes:
                    self._persist(tx)
                    self._seal_segment(tx)
                if tx is not None:
                    self.io.commit(tx)
            except BaseException as ex:
                self._fail(ex, tx)
                raise
            return first, count

    def _refused(self, records: int, detail: str) -> None:
        with self.lock:
            self.stats["refused_writes"] += 1
            self.stats["refused_records"] += records
        self._note_error(f"write refused: {detail}")

    def _note_error(self, text: str) -> None:
        self.last_error = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}"
        log.warning("%s: %s", self.where, text)

    def _usable(self) -> None:
        if self.removed:
            raise FsError(errno.ENOENT, f"{self.where} was removed")
        if self.broken:
            raise FsError(errno.EIO, f"{self.where}: {self.broken}; remount to recover it")

    def _fail(self, ex: BaseException, tx) -> None:
        """A device or engine error after the queue's memory changed: the queue refuses further
        work until it is reopened (which rebuilds it from what the log vouches for)."""
        if tx is not None:
            try:
                self.io.abort(tx)
            except Exception:  # noqa: BLE001  (the engine may be failing too)
                log.exception("%s: aborting the failed transaction", self.where)
        self.broken = f"{type(ex).__name__}: {ex}"
        self._note_error(f"stopped after an error: {self.broken}")

    def _plan(self, data, count: int, ts: int) -> list[Chunk]:
        """Cut ``data`` into chunks of whole lines: as much as fits into the tail, then new blocks
        (a line longer than a block gets a block of its own size)."""
        chunks, at, n = [], 0, len(data)
        room = self.tail.room(ts) if self.tail is not None else -1
        block = self.config.block_size
        pages = 0
        while at < n:
            if room >= n - at:
                chunks.append(Chunk(at, n, count - sum(c.count for c in chunks), pages))
                break
            else:
                cut = data.rfind(b"\n", at, at + max(room, 0)) + 1 if room > 0 else 0
            if cut > at:
                chunks.append(Chunk(at, cut, scan_lines(data, at, cut)[0], pages))
                at, room = cut, 0
                continue
            line = data.find(b"\n", at) + 1 - at
            pages = pages_for(line, block)
            room = pages * 4096 - HEADER_SIZE - FRAME_SIZE
        return chunks

    def _allocate(self, tx, sizes: list[int]) -> list[int]:
        """Allocate blocks of ``sizes`` pages; if the volume is full, reclaim what the retention
        lets go and try once more. Nothing changes if it still fails."""
        out = []
        for n in sizes:
            try:
                out.append(self.io.allocate(tx, n))
            except BaseException as ex:
                if self.io.failure(ex) is None or not self._reclaim_now():
                    raise
                out.append(self.io.allocate(tx, n))
        return out

    def _place(self, tx, data, chunks: list[Chunk], pages: list[int], ts: int) -> None:
        new = iter(pages)
        for c in chunks:
            if c.pages:
                if self.tail is not None:
                    first = prev_end = self.tail.end_seq
                    self._seal_tail(tx)
                else:
                    first, prev_end = self.live_end, self._prev_end()
                self._start_block(tx, Block.new(self.qid, self.next_ordinal, next(new), c.pages, first, prev_end,
                                                ts))
            self.tail.add(data, c.start, c.end, c.count, ts)
        if len(chunks) > 1:  # the batch spans blocks: the log describes all of it or none
            self._persist(tx)
        elif chunks[0].pages:  # a new block, its records not persisted yet: the index owns its pages
            b = self.tail
            self.t["blocks"].put(tx, seq_key(self.qid, b.first_seq),
                                 BlockEntry(b.ordinal, b.page, b.pages, 0, 0, 0, b.first_ts, b.first_ts,
                                            b.prev_end).pack())

    def _start_block(self, tx, b: Block) -> None:
        """Block ``b`` becomes the tail (its index entry is written with its first records)."""
        self.next_ordinal += 1
        self.t["times"].put(tx, time_key(self.qid, b.first_ts, b.first_seq), b"")
        if self.blocks == 0:
            self.first_seq = b.first_seq
        self.blocks += 1
        self.tail = b

    def _prev_end(self) -> int:
        """The end of the queue's last block (before a new block after a gap)."""
        lo, hi = queue_range(self.qid)
        last = self.t["blocks"].floor(seq_key(self.qid, MAX_SEQ))
        if last is None or last[0][:8] != lo:
            return self.live_end
        e = BlockEntry.unpack(last[1])
        return key_seq(last[0]) + e.count

    @staticmethod
    def _entry(b: Block) -> BlockEntry:
        """What the index says of block ``b`` once its bytes so far are on the device."""
        return BlockEntry(b.ordinal, b.page, b.pages, b.count, b.used if b.count else 0, b.payload, b.first_ts,
                          b.last_ts, b.prev_end)

    def _seal_tail(self, tx) -> None:
        """The tail is full: its bytes to the device, its entry final, and it joins the cache."""
        b = self.tail
        self._persist(tx)
        b.seal()
        self.store.cache.put((self.qid, b.first_seq), b)
        self.stats["blocks_written"] += 1
        self.tail = None

    def _persist(self, tx) -> None:
        """Write the tail's bytes not yet on the device, and log its entry in ``tx``."""
        b = self.tail
        if b is None or b.persisted >= b.used:
            return
        self.io.write(b.page, b.persisted, memoryview(b.data)[b.persisted : b.used])
        b.persisted = b.used
        b.close_frame()
        self.t["blocks"].put(tx, seq_key(self.qid, b.first_seq), self._entry(b).pack())
        self.stats["persists"] += 1
        self.last_persist = time.monotonic()

    def _account(self, count: int, nbytes: int, ts: int) -> None:
        self.last_ts = ts
        self.records += count
        self.payload += nbytes
        if not self.seg_count:
            self.seg_ts = ts
        self.seg_count += count
        self.seg_bytes += nbytes
        self.stats["appends"] += 1
        self.stats["appended_records"] += count
        self.stats["appended_bytes"] += nbytes
        sec = time.monotonic() // 1
        if self._rate and self._rate[-1][0] == sec:
            self._rate[-1] = (sec, self._rate[-1][1] + count)
        else:
            self._rate.append((sec, count))
            del self._rate[:-11]

    def _reserve(self, upto: int) -> None:
        """Reserve sequence numbers below ``upto`` durably before any is handed out."""
        tx = self.io.begin()
        try:
            self.t["queues"].put(tx, self.name, self._record(upto).pack())
        except BaseException as ex:
            self.io.abort(tx)
            failure = self.io.failure(ex)
            raise failure or ex from None
        self.io.commit(tx, durable=True)
        self.reserved = upto

    def _record(self, reserved: int) -> QueueRecord:
        return QueueRecord(self.qid, self.created_ms, reserved, self.config)

    def _seal_segment(self, tx) -> None:
        """The open segment becomes a file of ``segments/`` (its records are persisted in ``tx``)."""
        if not self.seg_count:
            return
        rec = SegmentRecord(self.live_end, self.seg_count, self.seg_bytes, now_ms())
        self.t["segments"].put(tx, seq_key(self.qid, self.seg_first), rec.pack())
        self.seg_first, self.seg_count, self.seg_bytes = self.live_end, 0, 0
        self.stats["segments_sealed"] += 1

    # ----- durability and time ------------------------------------------------------------------
    def sync(self) -> None:
        """fsync: every record appended so far durable."""
        with self.lock:
            self._usable()
            self._in_tx(self._persist)
        self.io.make_durable()

    def _in_tx(self, fn, *args) -> None:
        tx = self.io.begin()
        try:
            fn(tx, *args)
        except BaseException as ex:
            self._fail(ex, tx)
            raise
        self.io.commit(tx)

    def tick(self, interval: float) -> None:
        """The store's periodic work: persist a tail older than ``interval``, seal a segment
        whose time is up, reclaim what the retention lets go."""
        with self.lock:
            if self.removed or self.broken:
                return
            due = self.tail is not None and self.tail.persisted < self.tail.used \
                and time.monotonic() - self.last_persist >= interval
            seal = self.seg_count and now_ms() - self.seg_ts >= self.config.seal_seconds * 1000
            if due or seal:
                def work(tx) -> None:
                    self._persist(tx)
                    if seal:
                        self._seal_segment(tx)
                self._in_tx(work)
            self._reclaim_now()

    # ----- retention ----------------------------------------------------------------------------
    def _holds(self) -> int:
        """Records below this sequence number are needed by no view and no open reader."""
        return min([v.head for v in self.views.values()] + list(self.pins.values()) + [self.live_end])

    def _reclaim_now(self) -> bool:
        """Free every block nobody needs (see the module's text); True if any was."""
        with self.lock:
            cfg = self.config
            age, keep = cfg.retain_age_seconds, cfg.retain_count
            if age is None and keep is None:
                return False
            holds = self._holds()
            cutoff = now_ms() - age * 1000 if age is not None else None
            lo, hi = queue_range(self.qid)
            gone, remaining = [], self.records
            for key, raw in self.t["blocks"].items(lo, hi):
                first, e = key_seq(key), BlockEntry.unpack(raw)
                if self.tail is not None and first == self.tail.first_seq or first + e.count > holds:
                    break
                by_age = cutoff is not None and e.last_ts < cutoff
                by_count = keep is not None and remaining - e.count >= keep
                if not (by_age or by_count) or len(gone) >= RECLAIM_BATCH:
                    break
                gone.append((first, e))
                remaining -= e.count
            if not gone:
                return False
            self._drop_blocks(gone)
            return True

    def _drop_blocks(self, gone: list[tuple[int, BlockEntry]]) -> None:
        """Free blocks at the front of the queue (one transaction), with their index entries,
        and the segments whose first record goes with them."""
        tx = self.io.begin()
        try:
            for first, e in gone:
                self.t["blocks"].delete(tx, seq_key(self.qid, first))
                self.t["times"].delete(tx, time_key(self.qid, e.first_ts, first))
                self.io.free(tx, e.page, e.pages)
            new_first = gone[-1][0] + gone[-1][1].count
            nxt = next(self.t["blocks"].keys(seq_key(self.qid, new_first), queue_range(self.qid)[1]), None)
            new_first = key_seq(nxt) if nxt is not None else self.live_end
            doomed = itertools.takewhile(lambda k: key_seq(k) < new_first,
                                         self.t["segments"].keys(*queue_range(self.qid)))
            for key in list(doomed):
                self.t["segments"].delete(tx, key)
        except BaseException as ex:
            self._fail(ex, tx)
            raise
        self.io.commit(tx)
        self.store.cache.drop([(self.qid, first) for first, _ in gone])
        self.first_seq = new_first
        self.blocks -= len(gone)
        self.records -= sum(e.count for _, e in gone)
        self.payload -= sum(e.payload for _, e in gone)
        self.seg_first = max(self.seg_first, new_first)
        self.stats["blocks_reclaimed"] += len(gone)

    # ----- views --------------------------------------------------------------------------------
    def create_view(self, name: bytes) -> ViewRecord:
        """A view whose head is the live end (it reads what is appended from now on); durable
        on return, as every change of a head is."""
        with self.lock:
            self._usable()
            if name in self.views:
                raise FsError(errno.EEXIST, f"{self.where}: view {name.decode(errors='replace')!r} exists")
            v = ViewRecord(self.live_end, now_ms())
            self._in_tx(lambda tx: self.t["views"].put(tx, view_key(self.qid, name), v.pack()))
            self.views[name] = v
        self.io.make_durable()
        return v

    def remove_view(self, name: bytes) -> None:
        """Remove view ``name`` (durable on return); the blocks only it held can be reclaimed."""
        with self.lock:
            self._view(name)
            self._in_tx(lambda tx: self.t["views"].delete(tx, view_key(self.qid, name)))
            del self.views[name]
        self.io.make_durable()

    def _view(self, name: bytes) -> ViewRecord:
        self._usable()
        v = self.views.get(name)
        if v is None:
            raise FsError(errno.ENOENT, f"{self.where}: no view {name.decode(errors='replace')!r}")
        return v

    def commit(self, name: bytes, seq: int) -> None:
        """Advance view ``name``'s head to ``seq`` (records below it are consumed); durable on
        return. EINVAL below the head (:meth:`seek` moves back) or beyond the live end."""
        self._move(name, seq, back=False)

    def seek(self, name: bytes, seq: int) -> None:
        """Move view ``name``'s head to ``seq`` anywhere in the retained history or up to the
        live end (replay); durable on return."""
        self._move(name, seq, back=True)

    def _move(self, name: bytes, seq: int, back: bool) -> None:
        with self.lock:
            v = self._view(name)
            what = "seek" if back else "commit"
            if seq > self.live_end:
                raise FsError(errno.EINVAL, f"{self.where}: {what} {seq} is beyond the live end {self.live_end}")
            if back and seq < self.first_seq:
                raise FsError(errno.EINVAL, f"{self.where}: seek {seq} is below the retained history, which "
                                            f"starts at {self.first_seq}")
            if not back and seq < v.head:
                raise FsError(errno.EINVAL, f"{self.where}: commit {seq} is below view "
                                            f"{name.decode(errors='replace')!r}'s head {v.head} (seek moves back)")
            new = ViewRecord(seq, v.created_ms)

            def work(tx) -> None:
                if self.tail is not None and seq > self.tail.first_seq:
                    self._persist(tx)  # a durable head never points past durable records
                self.t["views"].put(tx, view_key(self.qid, name), new.pack())

            self._in_tx(work)
            self.views[name] = new
        self.io.make_durable()

    def seq_at(self, ts_ms: int) -> int:
        """The first retained sequence number stamped ``ts_ms`` or later (the live end if none)."""
        with self.lock:
            lo = queue_range(self.qid)[0]
            floor = self.t["times"].floor(time_key(self.qid, ts_ms, MAX_SEQ))
            if floor is None or floor[0][:8] != lo:
                return self.first_seq
            first = int.from_bytes(floor[0][16:], "big")
            found = self._block(first).ts_from(ts_ms)
            if found is not None:
                return found
            nxt = self._next_block(first)
            return nxt.first_seq if nxt is not None else self.live_end

    # ----- blocks for readers -------------------------------------------------------------------
    def _block(self, first: int, entry: BlockEntry | None = None) -> Block:
        """Block ``first`` (the tail, or a sealed block from the cache or the device)."""
        tail = self.tail
        if tail is not None and tail.first_seq == first:
            return tail
        return self.store.cache.get((self.qid, first), lambda: self.load_block(first, entry))

    def load_block(self, first: int, entry: BlockEntry | None) -> Block:
        """Block ``first`` read from the device and verified (a mirror's good copy repairs a
        damaged one); :class:`BlockDamaged` if no copy passes."""
        if entry is None:
            raw = self.t["blocks"].get(seq_key(self.qid, first))
            if raw is None:
                raise FsError(errno.ENOENT, f"{self.where}: block at sequence {first} was reclaimed")
            entry = BlockEntry.unpack(raw)
        where = f"{self.where}: block {entry.ordinal} (sequence {first}.., engine page {entry.page})"
        data = self.io.read(entry.page, entry.used)
        try:
            return Block.load(self.qid, first, entry, data, where)
        except BlockDamaged as e:
            def ok(copy: bytes) -> bool:
                try:
                    Block.load(self.qid, first, entry, copy, where)
                except BlockDamaged:
                    return False
                return True

            good = self.io.good_copy(entry.page, entry.used, ok, where)
            if good is None:
                log.error("%s; no good copy: read refused (EIO)", e.detail)
                raise
            return Block.load(self.qid, first, entry, good, where)

    def _next_block(self, first: int) -> Block | None:
        """The block after block ``first``, or None."""
        hi = queue_range(self.qid)[1]
        for key, raw in self.t["blocks"].items(seq_key(self.qid, first + 1), hi):
            return self._block(key_seq(key), BlockEntry.unpack(raw))
        return None

    def block_at(self, seq: int) -> Block | None:
        """The block holding record ``seq`` (or, in a gap a crash left, the next record)."""
        lo = queue_range(self.qid)[0]
        floor = self.t["blocks"].floor(seq_key(self.qid, seq))
        if floor is None or floor[0][:8] != lo:
            return self._next_block(seq) if self.blocks else None
        b = self._block(key_seq(floor[0]), BlockEntry.unpack(floor[1]))
        if seq >= b.end_seq and b is not self.tail:
            return self._next_block(b.first_seq)
        return b

    def prefetch_after(self, first: int, ahead: int) -> None:
        """Ask the cache to load the ``ahead`` blocks after block ``first`` in the background."""
        hi = queue_range(self.qid)[1]
        wanted = []
        for key, raw in itertools.islice(self.t["blocks"].items(seq_key(self.qid, first + 1), hi), ahead):
            seq, e = key_seq(key), BlockEntry.unpack(raw)
            if self.tail is not None and seq == self.tail.first_seq:
                break
            wanted.append(((self.qid, seq), lambda seq=seq, e=e: self.load_block(seq, e)))
        self.store.cache.prefetch(wanted)

    def pin(self, seq: int) -> int:
        """Keep records from ``seq`` on from being reclaimed until :meth:`unpin`; a pin id. (A
        number below the retained history means its first record: the records between are gone —
        lost by a crash before they were durable, as a view's head may still point there.)"""
        rid = next(_readers)
        with self.lock:
            self._usable()
            self.pins[rid] = max(seq, self.first_seq)
        return rid

    def unpin(self, rid: int) -> None:
        with self.lock:
            self.pins.pop(rid, None)

    # ----- settings and status ------------------------------------------------------------------
    def set_config(self, config: QueueConfig) -> None:
        with self.lock:
            self._usable()
            rec = QueueRecord(self.qid, self.created_ms, self.reserved, config)
            self._in_tx(lambda tx: self.t["queues"].put(tx, self.name, rec.pack()))
            self.config = config

    def records_end(self) -> int:
        """One past the newest record: ``live_end``, or below it when numbers a crash skipped
        follow the records (the next append starts at ``live_end``)."""
        with self.lock:
            return self.tail.end_seq if self.tail is not None else self._prev_end()

    def append_rate(self) -> float:
        """Records per second over the last ten whole seconds."""
        now = time.monotonic() // 1
        return sum(n for sec, n in self._rate if now - 10 <= sec < now) / 10

    def segments(self) -> list[tuple[int, SegmentRecord]]:
        """Sealed segments whose records are all retained: (first sequence number, record)."""
        with self.lock:
            return [(key_seq(k), SegmentRecord.unpack(v))
                    for k, v in self.t["segments"].items(seq_key(self.qid, self.first_seq), queue_range(self.qid)[1])]

    def close(self) -> None:
        """Clean close: the tail persisted, and ``reserved`` lowered to the end (no gap next time)."""
        with self.lock:
            if self.removed or self.broken:
                return

            def work(tx) -> None:
                self._persist(tx)
                self.t["queues"].put(tx, self.name, self._record(self.live_end).pack())

            self._in_tx(work)
            self.reserved = self.live_end

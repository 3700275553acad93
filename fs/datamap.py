"""File data: the extent map, allocation of data pages, and ordered-mode writes.

A file's bytes live in engine pages used raw (no page header: ``engine.raw``, the engine's
large objects), found through the ``extents`` tree: ``(ino, first file page) -> (first device page, page count)``.
Pages that no extent covers are holes and read as zeros.

**Ordered mode.** Data bytes are never logged; the records that make them reachable (a new
extent, a larger size) are. So the data must be on disk before any such record is:

1. a write allocates its pages (logged bit changes in the write's transaction — invisible to
   anyone after a crash unless that transaction commits);
2. writes the bytes to the device;
3. only then appends the extent and size records and commits.

The engine's log flusher calls :meth:`DataMap._flush_needed` (a log barrier,
``Engine.add_log_barrier``) after choosing the records to write and before writing them; it flushes the device if data that a committed
transaction may describe was written since the last flush (one flush covers every writer: a
generation counter groups them; a transaction marks what it depends on as it commits,
:meth:`DataMap.depend`). So a record on disk implies its data on disk, a crash never exposes a
page that was not written for the file, and an extension exposes zeros, never stale bytes: the
tail of the old last page is zeroed before the size grows over it, and fresh pages are written
from their start up to the new size (zero-padded).

**Checksums.** Every page written gets a crc32c (``fs/datasums.py``), and every read verifies
the pages it reads. A write is first worked out page by page (:meth:`DataMap.plan`: which bytes
go where and what each page's sum becomes; an overwrite of checksummed bytes also yields an
intent that must be durable before the bytes are written), then written
(:meth:`DataMap.write_plan`); the filesystem logs the intents before and the sums after.

**Freed pages** (truncate, unlink) return to the allocator only once the freeing commit is
durable (``Engine.free_region``): otherwise another file's new bytes could land
in them while a crash could still bring the old owner back. Pages a snapshot sees go to the dead
list instead (:meth:`DataMap.release`).

**Snapshots** (``fs/history.py``) share extents with the live tree. Each extent carries the
birth epoch of its pages; a page a snapshot may see (birth ``<=`` the latest snapshot) is never
written in place: :meth:`DataMap.make_private` first copies the pages a write touches to fresh
ones (copy-on-write, bounded by the write's size) and publishes them with the current epoch.
A freed page a snapshot still sees goes to the ``dead`` list instead of the allocator
(:meth:`DataMap.release`), until the snapshots that see it are deleted.

Placement: an allocation of at least one track (the volume's stripe unit) starts on a track
boundary, so large files stream in whole tracks; a file growing at its end continues its last
extent in place when the pages behind it are free, so sequential writers get long extents.
"""

from __future__ import annotations

import struct
import threading
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING

from .datamarks import DataMarks
from .datasums import ZEROS, DataSums, Sum, page_sums
from .engine.engine import Engine
from .engine.page import PAGE_SIZE
from .history import Chain
from .keys import U64X2, extent_key, pack_extent, prefix_range, unpack_extent
from .struct.btree import BTree

if TYPE_CHECKING:
    from .inodes import FsTransaction

MAX_EXTENT_PAGES = 8192  # 32 MiB per extent record
PREALLOC_PAGES = 256  # at most 1 MiB allocated past the end of a growing file
MAPS_CACHED = 32768  # files whose extent maps are kept in memory (a small file's: ~300 bytes)
DEAD = struct.Struct(">IQ")  # a dead-list value (key: death epoch, first device page): count, birth


@dataclass
class WritePlan:
    """A write worked out page by page (:meth:`DataMap.plan`): the raw writes (runs of adjacent
    bytes, as ``(buffer, start, stop)`` slices, at page-area offsets: ``engine.raw``), the sums
    the pages get once written, and the overwrite intents (logged, or held in memory in a group
    marked for overwrites, before the bytes are written: ``FileData._write_plan``)."""

    ino: int
    runs: list[list] = field(default_factory=list)  # [page-area offset, end, parts]
    sums: dict[int, Sum] = field(default_factory=dict)
    intents: dict[int, Sum] = field(default_factory=dict)

    def add(self, pos: int, parts: list) -> None:
        """Bytes ``parts`` for page-area offset ``pos``: part of the last run if adjacent to it."""
        if self.runs and self.runs[-1][1] == pos:
            run = self.runs[-1]
        else:
            run = [pos, pos, []]
            self.runs.append(run)
        dst = run[2]
        for buf, s, e in parts:
            if dst and dst[-1][0] is buf and dst[-1][2] == s:
                dst[-1] = (buf, dst[-1][1], e)  # neighbouring slices of one buffer stay one
            else:
                dst.append((buf, s, e))
            run[1] += e - s


def dead_runs(dead: BTree) -> list[tuple[int, int, int, int]]:
    """The dead list: (first device page, count, birth, death) of pages freed while a snapshot
    sees them."""
    out = []
    for k, v in dead.items():
        death, first = U64X2.unpack(k)
        count, birth = DEAD.unpack(v)
        out.append((first, count, birth, death))
    return out


class DataMap:
    def __init__(self, engine: Engine, extents: BTree, sums: DataSums, chain: Chain, dead: BTree,
                 marks: DataMarks):
        self.e = engine
        self.marks = marks  # groups of pages whose overwrites need no log force each
        self.chain = chain
        self.dead = dead
        self.raw = engine.raw
        self.tree = extents
        self.sums = sums
        self.track = self.raw.track_pages
        # entered as ``with self._lock`` (every read and write counts its bytes here): a
        # Condition's __enter__ is Python code
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._written = 0  # generation: data writes completed
        self._flushed = 0  # generation covered by the last completed device flush
        self._needed = 0  # generation that committed records may describe (see ``depend``)
        self._flushing = False
        self._maps: dict[int, tuple[list[int], list[tuple[int, int, int]], int]] = {}
        self.preallocated: set[int] = set()  # files that may hold pages past their end
        self.stats = {"data_bytes_written": 0, "data_bytes_read": 0, "data_flushes": 0, "extents_allocated": 0}
        engine.add_log_barrier(self._flush_needed)

    # ----- ordered mode -------------------------------------------------------------------------
    def _note_written(self, nbytes: int) -> None:
        with self._lock:
            self._written += 1
            self.stats["data_bytes_written"] += nbytes

    def written(self) -> int:
        """The generation of data writes completed so far (``flush_data(upto=...)``)."""
        with self._lock:
            return self._written

    def depend(self) -> None:
        """A transaction about to commit may describe every data write completed so far: the
        log flush that writes its commit record flushes them first. (Overwrite intents do not
        describe data — they only permit it — so they skip this, and a lone intent costs one
        log write, no device flush.)"""
        with self._lock:
            self._needed = self._written

    def _flush_needed(self) -> None:
        """The log flusher's hook: the data that records about to be written describe."""
        self.flush_data(self._needed)

    def flush_data(self, upto: int | None = None) -> None:
        """Make every data write completed so far (or up to generation ``upto``) durable (one
        device flush serves all callers that arrive while it runs)."""
        with self._lock:
            target = self._written if upto is None else upto
            while True:
                if self._flushed >= target:
                    return
                if not self._flushing:
                    self._flushing = True
                    target = self._written  # the flush covers whatever is written by now
                    break
                self._cv.wait()
        try:
            self.raw.flush()
        finally:
            with self._lock:
                self._flushing = False
                self._flushed = max(self._flushed, target)
                self.stats["data_flushes"] += 1
                self._cv.notify_all()

    # ----- the map ------------------------------------------------------------------------------
    def extents(self, ino: int, first: int, stop: int) -> list[tuple[int, int, int]]:
        """Extents (file page, device page, count) overlapping file pages [first, stop).

        Served from a per-file copy of its map (loaded whole on first use): a read or write
        then costs a bisection instead of B+tree descents. The caller holds the file's inode
        lock, so the map cannot change meanwhile; every change forgets the copy (``forget``),
        and so does the end of the transaction that made it (an abort rolls the tree back)."""
        starts, entries, _ = self._map(ino)
        i = max(0, bisect_right(starts, first) - 1)
        out = []
        while i < len(entries) and entries[i][0] < stop:
            lpage, _, count = entries[i]
            if lpage + count > first:
                out.append(entries[i])
            i += 1
        return out

    def _map(self, ino: int) -> tuple[list[int], list[tuple[int, int, int]], int]:
        """The cached map of ``ino``: extent starts, extents, and the pages they hold."""
        cached = self._maps.get(ino)
        if cached is None:
            if len(self._maps) >= MAPS_CACHED:
                self._evict_maps()
            entries = self.all_extents(ino)
            cached = self._maps[ino] = ([lp for lp, _, _ in entries], entries, sum(n for _, _, n in entries))
        return cached

    def made(self, ino: int) -> None:
        """``ino`` was just made: its map is empty (no look at the tree needed)."""
        if len(self._maps) >= MAPS_CACHED:
            self._evict_maps()
        self._maps[ino] = ([], [], 0)

    def _evict_maps(self) -> None:
        """Drop the oldest eighth of the cached maps (the dict keeps insertion order). Dropping
        them all, as this once did, made every file of a directory walked in turn — stat, unlink
        — load its map from the tree again once the cache filled."""
        maps = self._maps
        for ino in list(islice(maps, MAPS_CACHED // 8)):  # one C call: no other thread runs in it
            maps.pop(ino, None)

    def forget(self, ino: int) -> None:
        """Drop the cached map of ``ino`` (its extents changed, or a change was rolled back)."""
        self._maps.pop(ino, None)

    def forget_all(self) -> None:
        self._maps.clear()

    def all_extents(self, ino: int) -> list[tuple[int, int, int]]:
        lo, hi = prefix_range(ino)
        return [(int.from_bytes(k[8:], "big"), *unpack_extent(v)[:2]) for k, v in self.tree.items(lo, hi)]

    def extents_born(self, ino: int, first: int, stop: int) -> list[tuple[int, int, int, int]]:
        """Extents (file page, device page, count, birth) overlapping file pages [first, stop),
        from the tree."""
        out = []
        prev = self.tree.floor(extent_key(ino, first)) if first else None  # none starts below page 0
        if prev is not None and prev[0][:8] == extent_key(ino, 0)[:8] and prev[0] != extent_key(ino, first):
            lp = int.from_bytes(prev[0][8:], "big")
            phys, count, birth = unpack_extent(prev[1])
            if lp + count > first:
                out.append((lp, phys, count, birth))
        for k, v in self.tree.items(extent_key(ino, first), extent_key(ino, stop)):
            out.append((int.from_bytes(k[8:], "big"), *unpack_extent(v)))
        return out

    # ----- reading ------------------------------------------------------------------------------
    def read(self, ino: int, off: int, size: int) -> bytes:
        """``size`` bytes at ``off`` (the caller clips to the file size). Holes read as zeros.
        Whole pages are read and each is checked against its sum (``DataSums.verify_run``)."""
        if size <= 0:
            return b""
        first, stop = off // PAGE_SIZE, -(-(off + size) // PAGE_SIZE)
        return self.read_pieces(ino, off, size, self.extents(ino, first, stop))

    def read_pieces(self, ino: int, off: int, size: int, pieces: list[tuple[int, int, int]]) -> bytes:
        """:meth:`read` from the extents ``pieces`` (a snapshot's, ``fs/snapshot_view.py``)."""
        end = off + size
        first, stop = off // PAGE_SIZE, -(-end // PAGE_SIZE)
        with self._lock:
            self.stats["data_bytes_read"] += size
        out = None
        for lpage, phys, count in pieces:
            p0, p1 = max(first, lpage), min(stop, lpage + count)
            if p0 >= p1:
                continue
            blob = self.raw.read((phys + p0 - lpage) * PAGE_SIZE, (p1 - p0) * PAGE_SIZE)
            hi = end - (p1 - 1) * PAGE_SIZE if p1 == stop else PAGE_SIZE
            blob = self.sums.verify_run(ino, p0, phys + p0 - lpage, blob, hi)
            s, e = max(off, p0 * PAGE_SIZE), min(end, p1 * PAGE_SIZE)
            if s == off and e == end:  # one extent holds it all
                return blob if s == p0 * PAGE_SIZE and e == p1 * PAGE_SIZE else bytes(blob[s - p0 * PAGE_SIZE : e - p0 * PAGE_SIZE])
            if out is None:
                out = bytearray(size)
            out[s - off : e - off] = memoryview(blob)[s - p0 * PAGE_SIZE : e - p0 * PAGE_SIZE]
        return bytes(out) if out is not None else bytes(size)

    # ----- writing ------------------------------------------------------------------------------
    def has_holes(self, ino: int, off: int, length: int) -> bool:
        """Does [off, off+length) touch a page no extent maps?"""
        first, stop = off // PAGE_SIZE, -(-(off + length) // PAGE_SIZE)
        return self.first_hole(ino, first, stop) < stop

    def first_hole(self, ino: int, first: int, stop: int) -> int:
        """The first file page in [first, stop) that no extent maps, or ``stop``."""
        cur = first
        for lpage, _, count in self.extents(ino, first, stop):
            if lpage > cur:
                return cur
            cur = max(cur, lpage + count)
        return min(cur, stop)

    def first_data(self, ino: int, first: int, stop: int) -> int | None:
        """The first file page in [first, stop) that an extent maps, or None."""
        pieces = self.extents(ino, first, stop)
        return max(first, pieces[0][0]) if pieces else None

    def allocate(self, tx, ino: int, off: int, length: int, size: int = 0) -> list[tuple[int, int, int]]:
        """Allocate pages for the holes in [off, off+length); returns new (file page, device
        page, count) pieces, not yet in the map (see :meth:`publish`).

        A write that grows a file that already holds data (``size`` is its size before) also
        preallocates pages past its end, as many as the file will have then, up to
        :data:`PREALLOC_PAGES`: a file written by small appends allocates (and logs) once per
        doubling, then once per MiB, instead of once per write. The first write of an empty file
        does not: most small files are written by one request, and preallocation there would
        only cost a transaction to give it back at close. Preallocated pages are never readable
        before they are written: reads stop at the size, and growing the size zeroes what it
        exposes."""
        first, stop = off // PAGE_SIZE, -(-(off + length) // PAGE_SIZE)
        alloc_stop = stop
        if off + length > size > 0:
            self.preallocated.add(ino)  # given back at the last close (Lifetime.give_back)
            alloc_stop = stop + min(PREALLOC_PAGES, stop)
            beyond = self.extents(ino, stop, alloc_stop)
            if beyond:
                alloc_stop = max(stop, min(lp for lp, _, _ in beyond))
        # a write into a hole allocates the pages it writes, no more: a sparse file holds what
        # was written (filling a 1 MiB window instead made random 4 KiB writes into a sparse
        # file 2.4 times faster but allocate 256 times their size; see BENCHMARKS.md)
        have = self.extents(ino, first, alloc_stop)
        before = self.extents(ino, first - 1, first) if first else []
        holes, cur = [], first
        for lpage, _, count in have:
            if lpage > cur:
                holes.append((cur, lpage))
            cur = max(cur, lpage + count)
        if cur < alloc_stop:
            holes.append((cur, alloc_stop))
        new = []
        for h0, h1 in holes:
            while h0 < h1:
                n = min(h1 - h0, MAX_EXTENT_PAGES)
                phys = None
                prev = new[-1] if new and new[-1][0] + new[-1][2] == h0 else None
                if prev is None and before and before[-1][0] + before[-1][2] == h0:
                    prev = before[-1]
                if prev is not None and self.e.alloc_at(tx, prev[1] + prev[2], n):
                    phys = prev[1] + prev[2]
                if phys is None:
                    phys = self.e.alloc_region(tx, n, self.track if n >= self.track else 1)
                self.raw.claim(phys, n)
                new.append((h0, phys, n))
                self.stats["extents_allocated"] += 1
                h0 += n
        return new

    def plan(self, ino: int, off: int, data, new: list[tuple[int, int, int]], size: int,
             new_size: int | None = None) -> WritePlan:
        """Work out writing ``data`` at ``off`` into pages mapped by the map or by ``new``
        (``size``: the file's size before; ``new_size``: after, if not the end of the write),
        page by page, with each page's sum (``DataSums.page_write``). A gap between the old
        size and the write, in pages mapped earlier, is zeroed. Fresh pages below the new size
        are written from their start — the data, and zeros around it — so none is ever read
        before it was written; fresh pages past the new size (preallocation) are left alone.
        Reads (and verifies) the pages a partial overwrite needs; writes nothing."""
        view = memoryview(data).cast("B")
        end = off + len(view)
        new_size = max(size, end) if new_size is None else new_size
        start = min(off, size)  # the gap [size, off) is zeroed too
        fresh = {lp for lp, _, _ in new}
        first, stop = start // PAGE_SIZE, -(-max(end, start) // PAGE_SIZE)
        limit = -(-new_size // PAGE_SIZE)  # pages below the new size

        def zeros(n: int) -> list:
            return [(ZEROS, 0, min(len(ZEROS), n - at)) for at in range(0, n, len(ZEROS))]

        def source(s: int, e: int) -> list:
            """Bytes [s, e) of the file after the write, as parts: zeros outside the data."""
            parts = zeros(min(e, off) - s) if s < off else []
            if max(s, off) < min(e, end):
                parts.append((view, max(s, off) - off, min(e, end) - off))
            if e > max(s, end):
                parts += zeros(e - max(s, end))
            return parts

        plan = WritePlan(ino)
        for lpage, phys, count in sorted(self.extents(ino, first, stop) + new):
            is_fresh = lpage in fresh

            def span(q: int, is_fresh=is_fresh) -> tuple[int, int]:
                """The bytes [a, b) of file page ``q`` this write gives it."""
                pstart = q * PAGE_SIZE
                if is_fresh:
                    return 0, min(PAGE_SIZE, new_size - pstart)
                return max(start, pstart) - pstart, min(end, pstart + PAGE_SIZE) - pstart

            p0, p1 = (lpage, min(lpage + count, limit)) if is_fresh else (max(lpage, first), min(lpage + count, stop))
            sums = None if is_fresh or p0 >= p1 else self.sums.get_run(phys + p0 - lpage, p1 - p0)
            k = 0
            while k < p1 - p0:
                q, dev = p0 + k, phys + p0 - lpage + k
                a, b = span(q)
                s = None if sums is None else sums[k]
                visible = 0 if is_fresh else min(PAGE_SIZE, max(0, size - q * PAGE_SIZE))
                if a >= b:
                    k += 1
                elif s is None and not visible or s is not None and not s[4] and a == 0 and b >= s[1]:
                    # a run of pages written from their start: pages nothing of the file is in
                    # yet (their bytes before the write are zeros), or pages whose summed bytes
                    # the write replaces whole (overwrites needing no read). Every later page of
                    # the piece is written from its start, and all but the last one whole.
                    fresh_run = s is None
                    j = p1 - p0 if sums is None else k + 1
                    while j < p1 - p0 and (sums[j] is None and (p0 + j) * PAGE_SIZE >= size if fresh_run else
                                           sums[j] is not None and not sums[j][4]
                                           and span(p0 + j)[1] >= sums[j][1]):
                        j += 1
                    parts = source(q * PAGE_SIZE, (p0 + j - 1) * PAGE_SIZE + span(p0 + j - 1)[1])
                    if len(parts) > 1:
                        joined = b"".join(buf[x:y] for buf, x, y in parts)
                        parts = [(memoryview(joined), 0, len(joined))]
                    buf, x, y = parts[0]
                    new_sums = page_sums(buf[x:y])
                    plan.sums.update(zip(range(dev, dev + j - k), new_sums, strict=True))
                    if not fresh_run:
                        plan.intents.update(zip(range(dev, dev + j - k), self.sums.intents(sums[k:j], new_sums),
                                                strict=True))
                    plan.add(dev * PAGE_SIZE, parts)
                    k = j
                else:
                    w = self.sums.page_write(ino, q, dev, s, a, b, source(q * PAGE_SIZE + a, q * PAGE_SIZE + b),
                                             visible)
                    plan.add(dev * PAGE_SIZE + w.at, w.parts)
                    plan.sums[dev] = w.after
                    if w.intent is not None:
                        plan.intents[dev] = w.intent
                    k += 1
        return plan

    def write_plan(self, plan: WritePlan) -> None:
        """Write a plan's bytes: one raw write per run of adjacent bytes, straight from the
        caller's buffer when the run is one slice of it."""
        nbytes = 0
        for pos, stop, parts in plan.runs:
            if len(parts) == 1:
                buf, s, e = parts[0]
                self.raw.write(pos, buf[s:e])
            else:
                self.raw.write(pos, b"".join(buf[s:e] for buf, s, e in parts))
            nbytes += stop - pos
        self._note_written(nbytes)

    def plan_zero(self, ino: int, start: int, end: int) -> WritePlan:
        """Zero the mapped bytes of [start, end): the part of a file that growing its size is
        about to expose (the old last page's tail, preallocated pages never written)."""
        return self.plan(ino, end, b"", [], start, new_size=end)

    def publish(self, ftx: FsTransaction, ino: int, new: list[tuple[int, int, int]]) -> None:
        """Put freshly written extents into the map, merging with a physically contiguous
        predecessor (a file grown in place stays one extent). A cached copy of the map gets the
        same change, so the next write need not reload it (a file allocated piece by piece
        would otherwise reload its whole map at every allocation); ``ftx.maps_current`` tells
        the commit to keep it (an abort drops it)."""
        tx = ftx.tx
        ftx.extent_inos.add(ino)
        cached = self._maps.get(ino)
        if cached is not None:
            ftx.maps_current.add(ino)
        birth = self.chain.current
        for lpage, phys, count in new:
            prev = self.tree.floor(extent_key(ino, lpage - 1)) if lpage else None
            if prev is not None and prev[0][:8] == extent_key(ino, 0)[:8]:
                plp = int.from_bytes(prev[0][8:], "big")
                pphys, pcount, pbirth = unpack_extent(prev[1])
                if (plp + pcount == lpage and pphys + pcount == phys and pcount + count <= MAX_EXTENT_PAGES
                        and pbirth == birth):
                    self.tree.put(tx, prev[0], pack_extent(pphys, pcount + count, birth))
                    if cached is not None:
                        cached = self._cache_put(ino, cached, (plp, pphys, pcount + count), count)
                    continue
            self.tree.put(tx, extent_key(ino, lpage), pack_extent(phys, count, birth))
            if cached is not None:
                cached = self._cache_put(ino, cached, (lpage, phys, count), count)

    def _cache_put(self, ino: int, cached, extent: tuple[int, int, int], added: int):
        """The cached map with ``extent`` put at its file page (replacing one starting there)."""
        starts, entries, pages = cached
        i = bisect_right(starts, extent[0])
        if i and starts[i - 1] == extent[0]:
            entries[i - 1] = extent
        else:
            starts.insert(i, extent[0])
            entries.insert(i, extent)
        cached = self._maps[ino] = (starts, entries, pages + added)
        return cached

    def truncate(self, ftx: FsTransaction, ino: int, new_size: int, later: list | None = None) -> int:
        """Drop every page wholly past ``new_size``; returns the number of pages freed.
        ``later``: see :meth:`release`."""
        tx = ftx.tx
        keep = -(-new_size // PAGE_SIZE)
        freed = 0
        self.forget(ino)
        ftx.extent_inos.add(ino)
        ftx.maps_current.discard(ino)
        for lpage, phys, count, birth in self.extents_born(ino, keep, 1 << 62):
            cut = max(0, keep - lpage)
            if cut:
                self.tree.put(tx, extent_key(ino, lpage), pack_extent(phys, cut, birth))
            else:
                self.tree.delete(tx, extent_key(ino, lpage))
            self.release(tx, phys + cut, count - cut, birth, later)
            freed += count - cut
        self.forget(ino)  # the loop above read the map it was changing
        return freed

    def punch(self, ftx: FsTransaction, ino: int, first: int, stop: int) -> int:
        """Free file pages [first, stop) (fallocate's ``PUNCH_HOLE``): extents are cut around
        the range, its pages freed once the commit is durable and their sums dropped. Returns
        the number of pages freed."""
        tx = ftx.tx
        freed = 0
        self.forget(ino)
        ftx.extent_inos.add(ino)
        ftx.maps_current.discard(ino)
        for lpage, phys, count, birth in self.extents_born(ino, first, stop):
            s, e = max(first, lpage), min(stop, lpage + count)
            self._cut(tx, ino, (lpage, phys, count, birth), s, e)
            self.release(tx, phys + s - lpage, e - s, birth)
            freed += e - s
        self.forget(ino)  # the loop above read the map it was changing
        return freed

    def _cut(self, tx, ino: int, extent: tuple[int, int, int, int], s: int, e: int) -> None:
        """Take file pages [s, e) out of ``extent`` (what is left of it keeps its birth)."""
        lpage, phys, count, birth = extent
        if lpage < s:
            self.tree.put(tx, extent_key(ino, lpage), pack_extent(phys, s - lpage, birth))
        else:
            self.tree.delete(tx, extent_key(ino, lpage))
        if e < lpage + count:
            self.tree.put(tx, extent_key(ino, e), pack_extent(phys + e - lpage, lpage + count - e, birth))

    def release(self, tx, first: int, count: int, birth: int, later: list | None = None) -> None:
        """Free device pages ``first ..`` (born in epoch ``birth``) in ``tx``: to the allocator
        once the commit is durable, their sums dropped — or, if a snapshot sees them, onto the
        dead list (key: this epoch and the first page), sums kept, until that snapshot goes.
        ``later``: the run is added to it for the caller to free with others in ``tx``
        (:meth:`free_runs`) instead of here."""
        if self.chain.sees(birth):
            self.dead.put(tx, U64X2.pack(self.chain.current, first), DEAD.pack(count, birth))
        elif later is not None:
            later.append((first, count))
        else:
            self.e.free_region(tx, first, count)
            self.sums.forget(tx, first, count)

    def free_runs(self, tx, runs: list[tuple[int, int]]) -> None:
        """Free the device pages of ``runs`` ((first, count) each; disjoint) in ``tx`` and drop
        their sums, neighbouring runs as one (the reaper's batch of small files, written one
        after the other, frees a few long runs instead of a run per file)."""
        merged: list[list[int]] = []
        for first, count in sorted(runs):
            if merged and merged[-1][0] + merged[-1][1] == first:
                merged[-1][1] += count
            else:
                merged.append([first, count])
        for first, count in merged:
            self.e.free_region(tx, first, count)
        self.sums.forget_runs(tx, [(first, count) for first, count in merged])

    # ----- copy-on-write ------------------------------------------------------------------------
    def shared_range(self, ino: int, off: int, end: int, size: int) -> tuple[int, int] | None:
        """File pages a write of bytes [off, end) into a file of ``size`` bytes changes that a
        snapshot may see (the pages of [min(off, size), end) below the size), or None: none.
        Without a snapshot, one comparison."""
        if not self.chain.epochs:
            return None
        first, stop = min(off, size) // PAGE_SIZE, min(-(-end // PAGE_SIZE), -(-size // PAGE_SIZE))
        if first >= stop:
            return None
        sees = self.chain.sees
        if any(sees(b) for _, _, _, b in self.extents_born(ino, first, stop)):
            return first, stop
        return None

    def unshare(self, ftx: FsTransaction, ino: int, first: int, stop: int) -> None:
        """Take file pages [first, stop) that a snapshot sees out of the map in ``ftx`` (their
        pages released: onto the dead list); the write that called it allocates them afresh
        (:meth:`allocate` finds holes there) and publishes them in the same transaction."""
        tx = ftx.tx
        self.forget(ino)
        ftx.extent_inos.add(ino)
        ftx.maps_current.discard(ino)
        for extent in self.extents_born(ino, first, stop):
            lpage, phys, count, birth = extent
            if self.chain.sees(birth):
                s, e = max(first, lpage), min(stop, lpage + count)
                self._cut(tx, ino, extent, s, e)
                self.release(tx, phys + s - lpage, e - s, birth)
        self.forget(ino)

    def make_private(self, ftx: FsTransaction, ino: int, first: int, stop: int) -> int:
        """Copy-on-write: give file pages [first, stop) that a snapshot sees fresh pages holding
        the same bytes (and sums), born now; the old pages are released (onto the dead list).
        Bounded by the range's size. Returns the pages copied."""
        tx = ftx.tx
        self.forget(ino)
        ftx.extent_inos.add(ino)
        ftx.maps_current.discard(ino)
        copied = 0
        for extent in self.extents_born(ino, first, stop):
            lpage, phys, count, birth = extent
            if not self.chain.sees(birth):
                continue
            s, e = max(first, lpage), min(stop, lpage + count)
            n, old = e - s, phys + s - lpage
            new = self.e.alloc_region(tx, n, self.track if n >= self.track else 1)
            self.raw.claim(new, n)
            blob = bytearray(self.raw.read(old * PAGE_SIZE, n * PAGE_SIZE))
            sums = {}
            for k, cur in enumerate(self.sums.get_run(old, n)):
                if cur is None:
                    continue
                page = memoryview(blob)[k * PAGE_SIZE : (k + 1) * PAGE_SIZE]
                good = cur.matching(page)
                if good is None:
                    page[:] = self.sums.recover(ino, s + k, old + k, cur, 0)
                    good = cur.matching(page)
                sums[new + k] = good
            self.raw.write(new * PAGE_SIZE, blob)
            self._note_written(len(blob))
            self._cut(tx, ino, extent, s, e)
            self.tree.put(tx, extent_key(ino, s), pack_extent(new, n, self.chain.current))
            if sums:
                self.sums.record(ftx, sums)
            self.release(tx, old, n, birth)
            copied += n
        self.forget(ino)
        return copied

    def allocated_pages(self, ino: int) -> int:
        """Pages the file holds (``st_blocks``): from the cached map, summed once per change."""
        return self._map(ino)[2]

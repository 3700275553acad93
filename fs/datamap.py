"""File data: the extent map, allocation of data pages, and ordered-mode writes.

A file's bytes live in engine pages used raw (no page header: SPEC §3's large objects), found
through the ``extents`` tree: ``(ino, first file page) -> (first device page, page count)``.
Pages that no extent covers are holes and read as zeros.

**Ordered mode.** Data bytes are never logged; the records that make them reachable (a new
extent, a larger size) are. So the data must be on disk before any such record is:

1. a write allocates its pages (logged bit changes in the write's transaction — invisible to
   anyone after a crash unless that transaction commits);
2. writes the bytes to the device;
3. only then appends the extent and size records and commits.

The engine's log flusher calls :meth:`DataMap.flush_data` after choosing the records to write
and before writing them; it flushes the device if any data was written since the last flush
(one flush covers every writer: a generation counter groups them). So a record on disk implies
its data on disk, a crash never exposes a page that was not written for the file, and an
extension exposes zeros, never stale bytes: the tail of the old last page is zeroed before the
size grows over it, and fresh pages are written whole (zero-padded).

**Freed pages** (truncate, unlink) return to the allocator only once the freeing commit is
durable (``Allocator.free_region_after_durable``): otherwise another file's new bytes could land
in them while a crash could still bring the old owner back.

**Snapshots** (a later issue) will share extents between the live tree and a snapshot: the
plan is a reference-count tree keyed by device page, consulted before overwriting in place or
freeing (copy-on-write when the count is above one); the key layout above needs no change.

Placement: an allocation of at least one track (the volume's stripe unit) starts on a track
boundary, so large files stream in whole tracks; a file growing at its end continues its last
extent in place when the pages behind it are free, so sequential writers get long extents.
"""

from __future__ import annotations

import threading
from bisect import bisect_right

from traxfs.fs.engine.page import PAGE_SIZE
from traxfs.fs.records import EXTENT, extent_key, prefix_range
from traxfs.fs.struct.btree import BTree

MAX_EXTENT_PAGES = 8192  # 32 MiB per extent record
PREALLOC_PAGES = 256  # at most 1 MiB allocated past the end of a growing file


def _track_pages(dev, pages_offset: int) -> int:
    """Pages per track (stripe unit) when tracks are page-aligned on this device, else 1."""
    boundaries = getattr(dev, "boundaries", None)
    if boundaries is None:
        return 1
    try:
        _, count = boundaries(0)
    except Exception:  # noqa: BLE001  (a device without a geometry: no alignment)
        return 1
    unit = count * 512
    if unit % PAGE_SIZE or pages_offset % unit:
        return 1
    return unit // PAGE_SIZE


class DataMap:
    def __init__(self, engine, extents: BTree):
        self.e = engine
        self.dev = engine.dev
        self.tree = extents
        self.base = engine.sb.pages_offset
        self.track = _track_pages(self.dev, self.base)
        self._cv = threading.Condition()
        self._written = 0  # generation: data writes completed
        self._flushed = 0  # generation covered by the last completed device flush
        self._flushing = False
        self._maps: dict[int, tuple[list[int], list[tuple[int, int, int]], int]] = {}
        self.preallocated: set[int] = set()  # files that may hold pages past their end
        self.stats = {"data_bytes_written": 0, "data_bytes_read": 0, "data_flushes": 0, "extents_allocated": 0}
        engine.log.before_write = self.flush_data

    # ----- ordered mode -------------------------------------------------------------------------
    def _note_written(self, nbytes: int) -> None:
        with self._cv:
            self._written += 1
            self.stats["data_bytes_written"] += nbytes

    def flush_data(self) -> None:
        """Make every data write completed so far durable (one device flush serves all callers
        that arrive while it runs)."""
        with self._cv:
            target = self._written
            while True:
                if self._flushed >= target:
                    return
                if not self._flushing:
                    self._flushing = True
                    break
                self._cv.wait()
        try:
            self.dev.flush()
        finally:
            with self._cv:
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
            if len(self._maps) > 4096:
                self._maps.clear()
            entries = self.all_extents(ino)
            cached = self._maps[ino] = ([lp for lp, _, _ in entries], entries, sum(n for _, _, n in entries))
        return cached

    def forget(self, ino: int) -> None:
        """Drop the cached map of ``ino`` (its extents changed, or a change was rolled back)."""
        self._maps.pop(ino, None)

    def forget_all(self) -> None:
        self._maps.clear()

    def all_extents(self, ino: int) -> list[tuple[int, int, int]]:
        lo, hi = prefix_range(ino)
        return [(int.from_bytes(k[8:], "big"), *EXTENT.unpack(v)) for k, v in self.tree.items(lo, hi)]

    # ----- reading ------------------------------------------------------------------------------
    def read(self, ino: int, off: int, size: int) -> bytes:
        """``size`` bytes at ``off`` (the caller clips to the file size). Holes read as zeros."""
        if size <= 0:
            return b""
        first, stop = off // PAGE_SIZE, -(-(off + size) // PAGE_SIZE)
        pieces = self.extents(ino, first, stop)
        with self._cv:
            self.stats["data_bytes_read"] += size
        if len(pieces) == 1 and pieces[0][0] <= first and pieces[0][0] + pieces[0][2] >= stop:
            lpage, phys, _ = pieces[0]  # one extent holds it all: one read, no copy
            return self.dev.read(self.base + phys * PAGE_SIZE + (off - lpage * PAGE_SIZE), size)
        out = bytearray(size)
        for lpage, phys, count in pieces:
            s = max(off, lpage * PAGE_SIZE)
            e = min(off + size, (lpage + count) * PAGE_SIZE)
            if s >= e:
                continue
            dev_off = self.base + phys * PAGE_SIZE + (s - lpage * PAGE_SIZE)
            out[s - off : e - off] = self.dev.read(dev_off, e - s)
        return bytes(out)

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
            self.preallocated.add(ino)  # given back at the last close (FileSystem.give_back)
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
                if prev is not None and self.e.alloc.alloc_at(tx, prev[1] + prev[2], n):
                    phys = prev[1] + prev[2]
                if phys is None:
                    phys = self.e.alloc.alloc_region(tx, n, self.track if n >= self.track else 1)
                self.e.claim_raw(phys, n)
                new.append((h0, phys, n))
                self.stats["extents_allocated"] += 1
                h0 += n
        return new

    def write_data(self, ino: int, off: int, data, new: list[tuple[int, int, int]], size: int) -> None:
        """Write ``data`` at ``off`` into pages mapped by the map or by ``new`` (``size``: the
        file's size before). Fresh pages below the new size are written whole — the data, and
        zeros around it — so none is ever read before it was written; fresh pages past the new
        size (preallocation) are left alone. A gap between the old size and the write, in pages
        mapped earlier, is zeroed first."""
        fresh = {lp: (phys, n) for lp, phys, n in new}
        end = off + len(data)
        first, stop = off // PAGE_SIZE, -(-end // PAGE_SIZE)
        limit = -(-max(size, end) // PAGE_SIZE)  # pages below the new size
        pieces = sorted(self.extents(ino, first, stop) + new)
        if off > size:
            self.zero_range(ino, size, off)
        view = memoryview(data)
        for lpage, phys, count in pieces:
            if lpage in fresh:
                s_page, e_page = lpage, min(lpage + count, limit)
                if s_page >= e_page:
                    continue
                s, e = s_page * PAGE_SIZE, e_page * PAGE_SIZE
                ds, de = max(s, off), min(e, end)
                parts = [view[ds - off : de - off]]
                if ds > s:
                    parts.insert(0, bytes(ds - s))
                if de < e:
                    parts.append(bytes(e - de))
                dev_off = self.base + (phys + s_page - lpage) * PAGE_SIZE
                if len(parts) == 1:
                    self.dev.write(dev_off, parts[0])
                else:
                    self.dev.write(dev_off, b"".join(parts))
            else:
                s = max(off, lpage * PAGE_SIZE)
                e = min(end, (lpage + count) * PAGE_SIZE)
                if s >= e:
                    continue
                self.dev.write(self.base + phys * PAGE_SIZE + (s - lpage * PAGE_SIZE), view[s - off : e - off])
        self._note_written(len(data))

    def zero_range(self, ino: int, start: int, end: int) -> None:
        """Zero the mapped bytes of [start, end): the part of a file that growing its size is
        about to expose (the old last page's tail, preallocated pages never written)."""
        first, stop = start // PAGE_SIZE, -(-end // PAGE_SIZE)
        zeros = 0
        for lpage, phys, count in self.extents(ino, first, stop):
            s = max(start, lpage * PAGE_SIZE)
            e = min(end, (lpage + count) * PAGE_SIZE)
            if s < e:
                self.dev.write(self.base + phys * PAGE_SIZE + (s - lpage * PAGE_SIZE), bytes(e - s))
                zeros += e - s
        if zeros:
            self._note_written(zeros)

    def publish(self, tx, ino: int, new: list[tuple[int, int, int]]) -> None:
        """Put freshly written extents into the map, merging with a physically contiguous
        predecessor (a file grown in place stays one extent). A cached copy of the map gets the
        same change, so the next write need not reload it (a file allocated piece by piece
        would otherwise reload its whole map at every allocation); ``tx.maps_current`` tells
        the commit to keep it (an abort drops it)."""
        tx.extent_inos.add(ino)
        cached = self._maps.get(ino)
        if cached is not None:
            tx.maps_current.add(ino)
        for lpage, phys, count in new:
            prev = self.tree.floor(extent_key(ino, lpage - 1)) if lpage else None
            if prev is not None and prev[0][:8] == extent_key(ino, 0)[:8]:
                plp = int.from_bytes(prev[0][8:], "big")
                pphys, pcount = EXTENT.unpack(prev[1])
                if plp + pcount == lpage and pphys + pcount == phys and pcount + count <= MAX_EXTENT_PAGES:
                    self.tree.put(tx, prev[0], EXTENT.pack(pphys, pcount + count))
                    if cached is not None:
                        cached = self._cache_put(ino, cached, (plp, pphys, pcount + count), count)
                    continue
            self.tree.put(tx, extent_key(ino, lpage), EXTENT.pack(phys, count))
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

    def truncate(self, tx, ino: int, new_size: int) -> int:
        """Drop every page wholly past ``new_size``; returns the number of pages freed."""
        keep = -(-new_size // PAGE_SIZE)
        freed = 0
        self.forget(ino)
        tx.extent_inos.add(ino)
        tx.maps_current.discard(ino)
        for lpage, phys, count in self.extents(ino, keep, 1 << 62):
            if lpage >= keep:
                self.tree.delete(tx, extent_key(ino, lpage))
                self.e.alloc.free_region_after_durable(tx, phys, count)
                freed += count
            else:
                cut = keep - lpage
                self.tree.put(tx, extent_key(ino, lpage), EXTENT.pack(phys, cut))
                self.e.alloc.free_region_after_durable(tx, phys + cut, count - cut)
                freed += count - cut
        self.forget(ino)  # the loop above read the map it was changing
        return freed

    def allocated_pages(self, ino: int) -> int:
        """Pages the file holds (``st_blocks``): from the cached map, summed once per change."""
        return self._map(ino)[2]

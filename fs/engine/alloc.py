"""Allocation of pages and regions, from bitmap pages.

One bit per page in the allocation maps (pages 1..k, and for an engine grown later one map at
the first page of each further range: ``Engine.map_page``). Allocating sets bits with logged,
commuting bit operations (so concurrent transactions sharing a map page never undo each other's
bits); if the allocating transaction aborts, the undo clears them again.

**Freed space is never reused before the freeing commit is durable**: ``free_*`` only records
the intent; the bits are cleared by a pre-commit hook, in the same transaction, just before its
commit record, and the pages stay quarantined until that record is on disk. An aborted
transaction's frees simply never happen. Any page may be reused for bytes written outside the
log (a file extent, a queue block), and those can reach the disk before any record does: had
the free been lost in a crash, its old owner would get them back.

Regions are runs of contiguous pages aligned to ``align`` pages — the volume's stripe unit or
track — for large objects streamed to the device without logging their bytes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from . import opcodes
from .page import PAGE_SIZE, PageType
from .xact import Transaction

HEADER = 32
_GLANCE = 64  # runs up to this many pages are first tried where the search starts, bytes only


class NoSpace(Exception):
    """The page file has no free run of the requested size (ENOSPC)."""


class Allocator:
    def __init__(self, engine):
        self.e = engine
        self.bits_per_map = (PAGE_SIZE - HEADER) * 8
        self.first_data = 1 + engine.map_pages
        self._lock = threading.Lock()  # searching and setting bits (pins map pages meanwhile)
        self._cursor = self.first_data
        # first page -> [count, LSN]: freed, not yet reusable; the LSN (0 until known) is that of
        # the commit whose durability releases it (a free that waits only for its commit: 0).
        # Entries are added under both locks (never during a search) and removed under
        # ``_qlock`` alone: a release runs in whatever thread made the commit durable, which may
        # hold a page latch an allocation is waiting for (a checkpoint forcing the log), so it
        # must never wait for ``_lock``
        self._quarantine: dict[int, list[int]] = {}
        # map index -> the bits of its pages in the quarantine (kept with it, under ``_qlock``):
        # a search tests a candidate run against these, not against every entry
        self._held: dict[int, int] = {}
        self._qlock = threading.Lock()

    def _map_of(self, pid: int) -> tuple[int, int]:
        return self.e.map_page(pid // self.bits_per_map), pid % self.bits_per_map

    def _bitmap(self, map_pid: int) -> bytes:
        with self.e.page(map_pid) as f:
            return bytes(f.data[HEADER:])

    def is_allocated(self, pid: int) -> bool:
        map_pid, bit = self._map_of(pid)
        return bool(self._bitmap(map_pid)[bit // 8] >> (bit % 8) & 1)

    def _spans(self, first: int, count: int) -> Iterator[tuple[int, int, int, int]]:
        """Pages ``first .. first+count-1`` split by allocation map: (map index, first bit in
        that map, bits, offset from ``first``) for each map they touch."""
        pid, stop = first, first + count
        while pid < stop:
            k, bit = divmod(pid, self.bits_per_map)
            n = min(stop - pid, self.bits_per_map - bit)
            yield k, bit, n, pid - first
            pid += n

    def _used_bits(self, first: int, count: int, cached: dict[int, int] | None) -> int:
        """Bit i set: page ``first + i`` is allocated or quarantined (``count`` bits). ``cached``:
        whole maps as integers, kept for the next candidate of a search; None: a single look that
        reads only the bytes of these bits (the cursor usually sits on free space, and turning a
        whole map into an integer was most of a one-page allocation)."""
        out = 0
        for k, bit, n, at in self._spans(first, count):
            if cached is None:
                with self.e.page(self.e.map_page(k)) as f:
                    bits = int.from_bytes(f.data[HEADER + bit // 8 : HEADER + (bit + n + 7) // 8], "little") >> (bit % 8)
            else:
                value = cached.get(k)
                if value is None:
                    value = cached[k] = int.from_bytes(self._bitmap(self.e.map_page(k)), "little")
                bits = value >> bit
            with self._qlock:
                held = self._held.get(k, 0)
            out |= ((bits | (held >> bit)) & ((1 << n) - 1)) << at
        return out

    def _hold_bits(self, first: int, count: int, held: bool) -> None:
        """Set (``held``) or clear the quarantine bits of ``first .. first+count-1``; under
        ``_qlock``, as the entry for them is added to or removed from ``_quarantine``."""
        for k, bit, n, _ in self._spans(first, count):
            mask = ((1 << n) - 1) << bit
            value = self._held.get(k, 0)
            value = value | mask if held else value & ~mask
            if value:
                self._held[k] = value
            else:
                self._held.pop(k, None)

    def _find_run(self, count: int, align: int) -> int:
        """First free run of ``count`` pages starting at a multiple of ``align``, from the cursor."""
        total = self.e.sb.page_count
        for start_from in (self._cursor, self.first_data):
            pid = -(-start_from // align) * align
            if count <= _GLANCE and pid + count <= total and not self._used_bits(pid, count, None):
                return pid
            cached: dict[int, int] = {}
            while pid + count <= total:
                used = self._used_bits(pid, count, cached)
                if not used:
                    return pid
                last_used = pid + used.bit_length() - 1
                pid = -(-(last_used + 1) // align) * align
        raise NoSpace(f"{self.e.name}: no free run of {count} page(s) (aligned to {align})")

    def _set(self, tx: Transaction, first: int, count: int, opcode: int) -> None:
        for k, bit, n, _ in self._spans(first, count):
            self.e.update(tx, self.e.map_page(k), opcode, opcodes.bits_payload(bit, n))

    def alloc_region(self, tx: Transaction, count: int, align: int = 1) -> int:
        """Allocate ``count`` contiguous pages aligned to ``align``; returns the first page.

        If no run is free but freed pages wait for their commit to be durable, the log is
        forced (making those frees durable), the pages released, and the search run once more:
        space freed a moment ago is not refused while ``df`` already counts it free. The search
        is run again even when nothing waited by then: the search itself may have forced the
        log (writing back a map page) and released the frees it could not see."""
        try:
            return self._alloc_run(tx, count, align)
        except NoSpace:
            self._reclaim()
        return self._alloc_run(tx, count, align)

    def _alloc_run(self, tx: Transaction, count: int, align: int) -> int:
        with self._lock:
            first = self._find_run(count, align)
            self._set(tx, first, count, opcodes.OP_SET_BITS)
            self._cursor = first + count
        return first

    def _reclaim(self) -> None:
        """Force the log up to the newest free waiting for durability and release every free
        it made durable (their callbacks may not have run yet)."""
        with self._qlock:
            want = max((lsn for _, lsn in self._quarantine.values()), default=0)
        if not want:
            return
        self.e.log.force(want)
        durable = self.e.log.durable_lsn
        with self._qlock:
            for q in [q for q, (_, lsn) in self._quarantine.items() if 0 < lsn <= durable]:
                self._hold_bits(q, self._quarantine.pop(q)[0], False)

    def alloc_at(self, tx: Transaction, first: int, count: int) -> bool:
        """Allocate exactly pages ``first .. first+count-1`` if all are free (a file growing
        in place behind its last extent); False, and nothing changed, if any is not."""
        if first < self.first_data or first + count > self.e.sb.page_count:
            return False
        with self._lock:
            if self._used_bits(first, count, {}):
                return False
            self._set(tx, first, count, opcodes.OP_SET_BITS)
            self._cursor = max(self._cursor, first + count)
        return True

    def alloc_page(self, tx: Transaction, ptype: int = PageType.SLOTTED, aux: int = 0, body: bytes = b"") -> int:
        """Allocate one page and format it as ``ptype`` (logged, so an abort frees it again)."""
        pid = self.alloc_region(tx, 1)
        f = self.e.buffer.pin(pid, load=False)  # a free page's old bytes do not matter
        try:
            with f.latch:
                self.e.update(tx, pid, opcodes.OP_IMAGE, opcodes.image_payload(f.data, ptype, aux, body))
        finally:
            self.e.buffer.unpin(f)
        return pid

    def free_region(self, tx: Transaction, first: int, count: int) -> None:
        """Free at commit of ``tx``; reusable only once that commit is durable.

        Not as soon as the commit record is in the log buffer: a new owner may write its bytes
        straight to the device (raw data, before any record of its own), and a crash losing the
        free would hand those bytes to the old owner — a B+tree would find a queue block where
        its leaf was. ``alloc_region`` forces the log when only quarantined space is left."""
        entry = [count, 0]

        def release() -> None:
            with self._qlock:  # only this free's entry: the pages may have been reused and freed anew
                if self._quarantine.get(first) is entry:
                    del self._quarantine[first]
                    self._hold_bits(first, count, False)

        def hold(t: Transaction) -> None:
            with self._lock, self._qlock:
                self._quarantine[first] = entry
                self._hold_bits(first, count, True)
            self._set(t, first, count, opcodes.OP_CLEAR_BITS)

        def when_durable(handle) -> None:
            entry[1] = handle.lsn  # read by _reclaim under _qlock; set before the callback can run
            handle.add_callback(release)

        tx.pre_commit.append(hold)
        tx.post_commit.append(when_durable)

    def quarantined_pages(self) -> int:
        with self._qlock:
            return sum(n for n, _ in self._quarantine.values())

    def free_page(self, tx: Transaction, pid: int) -> None:
        self.free_region(tx, pid, 1)

    def allocated(self) -> list[int]:
        """Every allocated page, ascending, from the maps read through the buffer."""
        out: list[int] = []
        for m in range(self.e.nmaps):
            first = m * self.bits_per_map
            out += set_bits(self._bitmap(self.e.map_page(m)), first,
                            min(self.bits_per_map, self.e.sb.page_count - first))
        return out

    def free_count(self) -> int:
        total = 0
        for m in range(self.e.nmaps):
            pages = min(self.bits_per_map, self.e.sb.page_count - m * self.bits_per_map)
            used = (int.from_bytes(self._bitmap(self.e.map_page(m)), "little") & ((1 << pages) - 1)).bit_count()
            total += pages - used
        return total


def set_bits(body: bytes | bytearray, first: int, limit: int) -> list[int]:
    """The pages an allocation map's bitmap ``body`` marks allocated (a map covering pages
    ``first ..``, ``limit`` of them)."""
    value, out = int.from_bytes(body, "little"), []
    while value:
        low = value & -value
        bit = low.bit_length() - 1
        if bit >= limit:
            break
        out.append(first + bit)
        value ^= low
    return out

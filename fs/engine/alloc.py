"""Allocation of pages and regions (Stasis §1.9), from bitmap pages.

One bit per page in the allocation maps (pages 1..k). Allocating sets bits with logged,
commuting bit operations (so concurrent transactions sharing a map page never undo each other's
bits); if the allocating transaction aborts, the undo clears them again.

**Freed space is never reused before the freeing transaction commits**: ``free_*`` only records
the intent; the bits are cleared by a pre-commit hook, in the same transaction, just before its
commit record. An aborted transaction's frees simply never happen.

Regions are runs of contiguous pages aligned to ``align`` pages — the volume's stripe unit or
track — for large objects streamed to the device without logging their bytes.
"""

from __future__ import annotations

import threading

from traxfs.fs.engine import ops
from traxfs.fs.engine.page import PAGE_SIZE, PageType
from traxfs.fs.engine.xact import Transaction

HEADER = 32


class NoSpace(Exception):
    """The page file has no free run of the requested size (ENOSPC)."""


class Allocator:
    def __init__(self, engine):
        self.e = engine
        self.bits_per_map = (PAGE_SIZE - HEADER) * 8
        self.first_data = 1 + engine.nmaps
        self._lock = threading.Lock()
        self._cursor = self.first_data
        self._quarantine: dict[int, int] = {}  # first page -> count: freed, not yet reusable
        # quarantined runs now reusable, dropped from the quarantine at its next use (see release)
        self._released: list[int] = []

    def _map_of(self, pid: int) -> tuple[int, int]:
        return 1 + pid // self.bits_per_map, pid % self.bits_per_map

    def _bitmap(self, map_pid: int) -> bytes:
        with self.e.page(map_pid) as f:
            return bytes(f.data[HEADER:])

    def is_allocated(self, pid: int) -> bool:
        map_pid, bit = self._map_of(pid)
        return bool(self._bitmap(map_pid)[bit // 8] >> (bit % 8) & 1)

    def _drop_released(self) -> None:
        """Under the lock: forget the quarantined runs whose freeing commit became durable."""
        while self._released:
            self._quarantine.pop(self._released.pop(), None)

    def _used_bits(self, first: int, count: int, cached: dict[int, int]) -> int:
        """Bit i set: page ``first + i`` is allocated or quarantined (``count`` bits)."""
        out, pid = 0, first
        while pid < first + count:
            m, bit = self._map_of(pid)
            n = min(first + count - pid, self.bits_per_map - bit)
            value = cached.get(m)
            if value is None:
                value = cached[m] = int.from_bytes(self._bitmap(m), "little")
            out |= ((value >> bit) & ((1 << n) - 1)) << (pid - first)
            pid += n
        self._drop_released()
        for q, n in self._quarantine.items():
            lo, hi = max(q, first), min(q + n, first + count)
            if lo < hi:
                out |= ((1 << (hi - lo)) - 1) << (lo - first)
        return out

    def _find_run(self, count: int, align: int) -> int:
        """First free run of ``count`` pages starting at a multiple of ``align``, from the cursor."""
        total = self.e.sb.page_count
        for start_from in (self._cursor, self.first_data):
            pid = -(-start_from // align) * align
            cached: dict[int, int] = {}
            while pid + count <= total:
                used = self._used_bits(pid, count, cached)
                if not used:
                    return pid
                last_used = pid + used.bit_length() - 1
                pid = -(-(last_used + 1) // align) * align
        raise NoSpace(f"{self.e.name}: no free run of {count} page(s) (aligned to {align})")

    def _set(self, tx: Transaction, first: int, count: int, opcode: int) -> None:
        pid = first
        while pid < first + count:
            m, bit = self._map_of(pid)
            n = min(first + count - pid, self.bits_per_map - bit)
            self.e.update(tx, m, opcode, ops.bits_payload(bit, n))
            pid += n

    def alloc_region(self, tx: Transaction, count: int, align: int = 1) -> int:
        """Allocate ``count`` contiguous pages aligned to ``align``; returns the first page."""
        with self._lock:
            first = self._find_run(count, align)
            self._set(tx, first, count, ops.OP_SET_BITS)
            self._cursor = first + count
        return first

    def alloc_at(self, tx: Transaction, first: int, count: int) -> bool:
        """Allocate exactly pages ``first .. first+count-1`` if all are free (a file growing
        in place behind its last extent); False, and nothing changed, if any is not."""
        if first < self.first_data or first + count > self.e.sb.page_count:
            return False
        with self._lock:
            if self._used_bits(first, count, {}):
                return False
            self._set(tx, first, count, ops.OP_SET_BITS)
            self._cursor = max(self._cursor, first + count)
        return True

    def alloc_page(self, tx: Transaction, ptype: int = PageType.SLOTTED, aux: int = 0, body: bytes = b"") -> int:
        """Allocate one page and format it as ``ptype`` (logged, so an abort frees it again)."""
        pid = self.alloc_region(tx, 1)
        f = self.e.buffer.pin(pid, load=False)  # a free page's old bytes do not matter
        try:
            with f.latch:
                self.e.update(tx, pid, ops.OP_IMAGE, ops.image_payload(f.data, ptype, aux, body))
        finally:
            self.e.buffer.unpin(f)
        return pid

    def free_region(self, tx: Transaction, first: int, count: int) -> None:
        """Free at commit of ``tx`` (never earlier: an uncommitted free must not be reused).

        The bits are cleared just before the commit record, and the pages stay quarantined
        until that record is in the log: a transaction that reused them in between could commit
        durably while a crash lost this commit, and the undo of the free would then hand the
        pages back to their old owner too. Once the commit record is in the log, every later
        reuse is logged after it and no crash can keep the reuse without the free."""
        self._free_at_commit(tx, first, count, until_durable=False)

    def free_region_after_durable(self, tx: Transaction, first: int, count: int) -> None:
        """Free at commit of ``tx`` but reuse only once that commit is durable.

        For space whose bytes are written outside the log (file data): if a new owner's unlogged
        bytes could reach the disk before the free did, a crash would hand the old owner (whose
        free was lost) the new owner's bytes."""
        self._free_at_commit(tx, first, count, until_durable=True)

    def _free_at_commit(self, tx: Transaction, first: int, count: int, until_durable: bool) -> None:
        def release() -> None:
            # runs in whichever thread completed the log flush, which may hold a page latch that
            # an allocating thread holding self._lock waits for (a checkpoint sealing a bitmap
            # page forces the log): so no lock here, the next user of the quarantine drops it
            self._released.append(first)

        def hold(t: Transaction) -> None:
            with self._lock:
                self._quarantine[first] = count
            self._set(t, first, count, ops.OP_CLEAR_BITS)

        tx.pre_commit.append(hold)
        if until_durable:
            tx.post_commit.append(lambda handle: handle.add_callback(release))
        else:
            tx.post_commit.append(lambda handle: release())

    def quarantined_pages(self) -> int:
        with self._lock:
            self._drop_released()
            return sum(self._quarantine.values())

    def free_page(self, tx: Transaction, pid: int) -> None:
        self.free_region(tx, pid, 1)

    def free_count(self) -> int:
        total = 0
        for m in range(self.e.nmaps):
            pages = min(self.bits_per_map, self.e.sb.page_count - m * self.bits_per_map)
            used = (int.from_bytes(self._bitmap(1 + m), "little") & ((1 << pages) - 1)).bit_count()
            total += pages - used
        return total

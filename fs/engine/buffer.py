"""The buffer manager: page frames in memory, pins, latches, the dirty page table, write-back.

* **Pins** count users of a frame; a pinned frame is never evicted. There is no pin or latch
  ordering rule (as in Stasis): any thread may pin any number of pages.
* **Latches** (one re-entrant lock per frame) protect a page's bytes while an operation reads or
  changes them.
* **Dirty page table**: a dirty frame remembers ``rec_lsn``, the first LSN that dirtied it since
  it was last written; recovery's redo and log truncation start from the minimum.
* **Write-ahead rule, enforced where pages are written** (:meth:`_write`): the log is forced up
  to the page's LSN before the page goes to the device, whatever policy asked for the write.
  Page LSNs are the *end* LSN of the last record applied, so "forced up to the page LSN" means
  that whole record is durable.
* **Write-back** writes dirty pages in page (= device) order from one thread, so writes reach the
  device as ascending runs (Stasis' write-back lesson).
* **Replacement**: LRU over unpinned frames, within a budget of ``capacity`` frames. If every
  frame is pinned the budget is exceeded rather than deadlocking (counted in ``stats``).
* **Page access in C** (``traxfs.ext.pagepin``): :class:`Frame`, the pin of a resident page
  and ``with PinnedPage(buffer, pid) as frame`` (pin + latch) are there; a B+tree put makes ~8
  page accesses, each ~1.3 µs in Python. Loading, eviction and errors stay here.
* **Per-type hooks**: a page type may register ``on_load(pid, buf)`` and ``on_flush(pid, buf)``.
* **Damaged pages**: a page that fails its checksum on load is served from another copy that
  passes when the device has copies (a mirror's legs), which also rewrites the bad copy
  (``traxfs.fs.engine.copies``); without one the load raises :class:`PageCorrupt`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ...ext.pagepin import Frame, Latch, PinnedPage, PinTable  # noqa: F401  (PinnedPage: the engine hands it out)
from .copies import good_copy
from .page import PAGE_SIZE, PageCorrupt, page_type, seal, verify

DISCARD_WAIT = 30.0  # seconds a discard waits for a write-back in flight to unpin a freed page


def new_frame(pid: int) -> Frame:
    """A frame for ``pid``, pinned once by its creator, not yet loaded (see :class:`Frame`)."""
    return Frame(pid, bytearray(PAGE_SIZE), Latch(reentrant=True), threading.Event())


class BufferManager:
    def __init__(self, dev, pages_offset: int, page_count: int, force_log: Callable[[int], None],
                 capacity: int = 4096, *, page_seed: int):
        self.dev, self.pages_offset, self.page_count = dev, pages_offset, page_count
        self.page_seed = page_seed  # the engine's: every page is verified and sealed with it
        self.force_log = force_log
        self.capacity = capacity
        self._frames: OrderedDict[int, Frame] = OrderedDict()
        self._lock = Latch()  # the table lock, taken from C too (``ext/pagepin.pyx``)
        self._writer = threading.Lock()  # one writer at a time: write-back in file order
        self.hooks: dict[int, tuple[Callable | None, Callable | None]] = {}
        self.on_corrupt: Callable[[int, str], None] | None = None  # a page failed verification
        # pages written but not yet flushed to stable storage, with the recLSN they had: until
        # a device flush they still count as dirty for checkpoints (a power loss may undo the write)
        # pages written (or being written) whose bytes a device flush has not yet covered:
        # pid -> (recLSN, seal number). They stay in the dirty page table until a flush that
        # began after their write completed; ``_inflight`` counts writes sealed, not yet issued
        self._unflushed: dict[int, tuple[int, int]] = {}
        self._inflight: dict[int, int] = {}
        self._seals = 0
        self.pins = PinTable(self._frames, self._lock)  # the C fast path (hits counted there)
        self._stats = {"misses": 0, "writes": 0, "evictions": 0, "over_budget": 0, "repaired_pages": 0}

    @property
    def stats(self) -> dict[str, int]:
        return {"hits": self.pins.hits, **self._stats}

    def register_hooks(self, ptype: int, on_load: Callable | None = None, on_flush: Callable | None = None) -> None:
        self.hooks[ptype] = (on_load, on_flush)

    def _offset(self, pid: int) -> int:
        if not 0 <= pid < self.page_count:
            raise ValueError(f"page {pid} outside the page file (0..{self.page_count - 1})")
        return self.pages_offset + pid * PAGE_SIZE

    # ----- pin / unpin --------------------------------------------------------------------------
    def pin(self, pid: int, load: bool = True) -> Frame:
        """Return the frame of ``pid`` pinned, loading it if needed. The thread that creates a
        frame loads it outside the table lock, so a slow read holds up only its own page.
        ``load=False``: the caller will overwrite the whole page (a fresh allocation, or redo
        of a full page image), so a non-resident page starts as zeros without being read —
        which is also how a torn page is repaired."""
        f = self.pins.pin_resident(pid)
        if f is not None:  # resident and loaded: the common case, in C
            return f
        if not 0 <= pid < self.page_count:
            self._offset(pid)  # raises, naming the page file's range
        victims: list[Frame] | None = None
        with self._lock:
            f = self._frames.get(pid)
            if f is not None:  # still loading (or loaded since the fast path looked)
                f.pins += 1
                self._frames.move_to_end(pid)
                self.pins.hits += 1
                if f.ready:
                    return f
            else:
                f = new_frame(pid)
                self._frames[pid] = f
                self._stats["misses"] += 1
                victims = self._choose_victims()
        if victims is None:
            if not f.loaded.is_set():  # a plain flag read; wait() takes a lock even when set
                f.loaded.wait()
            if f.error is not None:
                raise f.error
            return f
        for v in victims:
            self._evict(v)
        if not load:
            f.ready = True
            f.loaded.set()
            return f
        try:
            try:
                raw = self._load(pid)
            except PageCorrupt as e:
                if self.on_corrupt is not None:
                    self.on_corrupt(pid, str(e))
                raise
            f.data[:] = raw
            hook = self.hooks.get(page_type(raw), (None, None))[0]
            if hook:
                hook(pid, f.data)
            f.ready = True
        except BaseException as e:
            f.error = e
            with self._lock:
                if self._frames.get(pid) is f:
                    del self._frames[pid]
            raise
        finally:
            f.loaded.set()
        return f

    def _load(self, pid: int) -> bytes:
        """The page's bytes from the device, verified. A page that fails its check is served
        from another copy that passes when the device has one (a mirror), and the damaged copy
        rewritten; otherwise :class:`PageCorrupt` names the damage."""
        off = self._offset(pid)
        raw = self.dev.read(off, PAGE_SIZE)
        try:
            verify(raw, pid, self.page_seed)
            return raw
        except PageCorrupt:
            found = good_copy(self.dev, off, PAGE_SIZE, lambda data: _verifies(data, pid, self.page_seed),
                              f"engine page {pid}")
            if found is None:
                raise
        good, repaired = found
        if repaired:
            self._stats["repaired_pages"] += 1
        return good

    def unpin(self, f: Frame) -> None:
        self.pins.unpin(f)

    def mark_dirty(self, f: Frame, lsn: int) -> None:
        """Called with the frame latched, after an operation stamped it with ``lsn``."""
        if not f.dirty:
            f.dirty = True
            f.rec_lsn = lsn

    # ----- replacement --------------------------------------------------------------------------
    def _choose_victims(self) -> list[Frame]:
        """Under the table lock: unpinned frames to drop so the table fits the budget."""
        out = []
        excess = len(self._frames) - self.capacity
        if excess <= 0:
            return out
        for f in self._frames.values():
            if len(out) >= excess:
                break
            if f.pins == 0 and f.ready:
                out.append(f)
        for f in out:
            f.pins += 1  # hold it while we write it out, so nobody else evicts it
        if len(out) < excess:
            self._stats["over_budget"] += 1
        return out

    def _evict(self, f: Frame) -> None:
        with f.latch:
            if f.dirty:
                self._write(f)
        with self._lock:
            f.pins -= 1
            if f.pins == 0 and not f.dirty and self._frames.get(f.pid) is f:
                del self._frames[f.pid]
                self._stats["evictions"] += 1

    # ----- writing ------------------------------------------------------------------------------
    def _seal_copy(self, f: Frame) -> bytearray:
        """Under the frame's latch: the bytes to write, and the frame marked clean. The
        write-ahead rule lives here: the log is forced up to the page's LSN first. The caller
        keeps the frame pinned until the bytes are on the device, so nobody re-reads the
        device's older copy in between."""
        self.force_log(f.lsn)
        copy = bytearray(f.data)
        hook = self.hooks.get(page_type(copy), (None, None))[1]
        if hook:
            hook(f.pid, copy)
        seal(copy, f.pid, self.page_seed)
        with self._lock:
            old = self._unflushed.get(f.pid)
            self._seals += 1
            self._unflushed[f.pid] = (min(old[0], f.rec_lsn) if old else f.rec_lsn, self._seals)
            self._inflight[f.pid] = self._inflight.get(f.pid, 0) + 1
        f.dirty = False
        f.rec_lsn = 0
        self._stats["writes"] += 1
        return copy

    def _written(self, pids) -> None:
        with self._lock:
            for pid in pids:
                n = self._inflight.get(pid, 0) - 1
                if n > 0:
                    self._inflight[pid] = n
                else:
                    self._inflight.pop(pid, None)

    def _write(self, f: Frame) -> None:
        """Write one frame now (caller holds its latch and a pin)."""
        try:
            self.dev.write(self._offset(f.pid), self._seal_copy(f))
        finally:
            self._written((f.pid,))

    def write_back(self, sync: bool = True, older_than: int | None = None) -> int:
        """Write dirty pages in page order — all of them, or those first dirtied before LSN
        ``older_than`` (the ones holding log truncation back) — then flush the device.

        Pages are sealed one by one under their latches, then written as runs of consecutive
        pages, one device write per run: few system calls, so a writer competing with busy
        threads for the interpreter lock is not starved once per page. Returns pages written."""
        with self._writer:
            with self._lock:
                dirty = sorted((f for f in self._frames.values()
                                if f.dirty and (older_than is None or f.rec_lsn < older_than)), key=lambda f: f.pid)
                for f in dirty:
                    f.pins += 1
            try:
                if dirty:  # one log force for the batch instead of one per page
                    self.force_log(max(f.lsn for f in dirty))
                sealed: list[tuple[int, bytearray]] = []
                for f in dirty:
                    with f.latch:
                        if f.dirty:
                            sealed.append((f.pid, self._seal_copy(f)))
                i = 0
                while i < len(sealed):
                    j = i + 1
                    while j < len(sealed) and sealed[j][0] == sealed[j - 1][0] + 1 and j - i < 256:
                        j += 1
                    try:
                        self.dev.write(self._offset(sealed[i][0]), b"".join(c for _, c in sealed[i:j]))
                    finally:
                        self._written(pid for pid, _ in sealed[i:j])
                    i = j
            finally:
                for f in dirty:
                    self.unpin(f)
            if sync:
                # only writes completed before the flush begins are covered by it: a page sealed
                # by a concurrent eviction but not yet written stays in the table
                with self._lock:
                    before = {pid: seal for pid, (_, seal) in self._unflushed.items() if pid not in self._inflight}
                self.dev.flush()
                with self._lock:
                    for pid, seal in before.items():
                        cur = self._unflushed.get(pid)
                        if cur is not None and cur[1] == seal:
                            del self._unflushed[pid]
            return len(sealed)

    def dirty_page_table(self) -> dict[int, int]:
        """Page → recLSN for every page whose latest changes may not be on stable storage."""
        with self._lock:
            dpt = {pid: lsn for pid, (lsn, _) in self._unflushed.items()}
            for f in self._frames.values():
                if f.dirty:
                    dpt[f.pid] = min(dpt.get(f.pid, f.rec_lsn), f.rec_lsn)
            return dpt

    def discard(self, pid: int) -> None:
        """Forget a page's frame without writing it: the caller is about to overwrite the page
        on the device directly (unlogged bulk data into freshly allocated, hence free, space)."""
        self.discard_range(pid, 1)

    def discard_range(self, first: int, count: int) -> None:
        """:meth:`discard` for pages ``first .. first+count-1``.

        A freed page may still be dirty here, and a write-back (checkpoint or eviction) may hold
        it pinned while it forces the log and writes the page's last image. The page is free, so
        nobody else pins it: wait for that write to end — discarding the frame under it would let
        the old image land on the device after the caller's raw bytes. A pin that outlives
        :data:`DISCARD_WAIT` seconds is a bug, and raised as one."""
        deadline = time.monotonic() + DISCARD_WAIT
        while True:
            with self._lock:
                frames, unflushed = self._frames, self._unflushed
                if len(frames) + len(unflushed) < count:  # few resident frames: walk them instead
                    pids = [p for p in list(frames) + list(unflushed) if first <= p < first + count]
                else:
                    pids = [p for p in range(first, first + count) if p in frames or p in unflushed]
                pinned = next((p for p in pids if p in frames and frames[p].pins), None)
                if pinned is None:
                    for pid in pids:
                        frames.pop(pid, None)
                        unflushed.pop(pid, None)
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"page {pinned} stayed pinned for {DISCARD_WAIT} s; it cannot be discarded")
            time.sleep(0.001)

    def drop_all(self) -> None:
        """Forget every frame without writing (unclean shutdown: what was not written is lost)."""
        with self._lock:
            self._frames.clear()
            self._unflushed.clear()

    def resident(self) -> int:
        return len(self._frames)


def _verifies(raw: bytes, pid: int, seed: int) -> bool:
    try:
        verify(raw, pid, seed)
    except PageCorrupt:
        return False
    return True

"""Checksums of file data: crc32c per data page, kept by device page, verified on every read.

**Where.** The ``datasums`` tree maps a group of :data:`GROUP` device pages (key: device page //
128, big-endian) to a validity bitmap and a pending bitmap (128 bits each) and, per page,
``(crc u32, length u16)``: 800 bytes. Keyed by device page, not by file page: the sums follow
the bytes, so extents shared later (snapshots) share their sums and nothing else needs to move
with an extent. ``datapending`` holds, for each group with pending pages (same key), their
alternative sums (``(page in group u8, crc u32, length u16)`` each); it is small, and the mount
after a crash finds the pending pages there without reading every sum.

**What a sum covers.** ``crc`` is the crc32c of the page's first ``length`` bytes: the bytes of
the page that were ever written for the file (its high-water mark). A read of bytes
``[lo, hi)`` of a page passes if ``hi <= length`` and the prefix matches. Bytes past
``length`` are not covered: nothing reads them (reads stop at the file's size, and a size is
logged only after the sums of the writes below it), and whatever grows the file over them
writes them first. Pages never written (preallocated) have no sum.

**Crash consistency.** A data write and the record of its sum cannot reach the disk at once,
so each kind of write is ordered so that any crash leaves a sum that matches what is on disk:

* *a page with no sum* (fresh, preallocated): data first, then the sum (ordered mode: the log
  flusher flushes the data before any record describing it). A crash in between leaves the
  page beyond the durable size or unreachable;
* *appending to a page* (bytes at or past ``length``): the old prefix does not change, so the
  old sum stays true while the data lands; the new sum is ``crc32c(new bytes, old crc)`` —
  no read, no wait;
* *overwriting summed bytes* in place: whichever of (old data, new data) survives a crash, the
  durable state must accept it. So the page's entry first becomes *pending*: ``(new crc, new
  length)`` with the old sum kept as the alternative (what a read accepts meanwhile), and the
  page's group is **durably marked before the data is written** (``fs/datamarks.py``: the first
  overwrite in a group of :data:`GROUP` pages forces the log once; later ones record their
  intents softly). Then the data is written, and the entry collapses to the new sum softly,
  with the inode's next log record (ordered mode puts the data on disk first). The mount after
  an unclean stop resolves every pending page and every page of a marked group: the content
  matches the new sum or the old one, and if neither (a write torn by power loss, or an
  overwrite whose intent the crash lost, never fsynced) the sum is recomputed from what is
  there, counted — ext4's semantics for unsynced data: old or new bytes per sector, never an
  I/O error.

**Deferred sums.** Writes into allocated space log nothing at write time (the size and times
wait in the cached inode); their sums wait too, in memory, and are logged just before the
inode record (:meth:`log_deferred`, called from the filesystem's one inode-logging place), so a
durable size always comes with the sums of the bytes below it.

**Reads** check each page; a page that fails is served from a mirror's other leg when one
passes (and the bad leg rewritten, ``traxfs.fs.engine.copies``); otherwise the read fails
with EIO and an error line names the inode and the byte offset — never wrong bytes.
"""

from __future__ import annotations

import errno
import logging
import struct
import threading
from bisect import bisect_left
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, NamedTuple

import crc32c

from ..ext.datasum import check_pages, pack_settled, read_slots
from ..ext.datasum import page_sums as _page_sums
from .engine.engine import Engine
from .engine.page import PAGE_SIZE
from .errors import FsError
from .keys import U64
from .struct.btree import BTree

if TYPE_CHECKING:
    from .inodes import FsTransaction

GROUP = 128  # device pages per datasums record
_BITS = GROUP // 8  # bytes of one bitmap
_HEAD = 2 * _BITS  # valid bits, then pending bits (big-endian integers: bit k is page k)
_SLOT = struct.Struct(">IH")  # crc, length
_ALT = struct.Struct(">BIH")  # a datapending entry: page in the group, alternative crc and length
VALUE_SIZE = _HEAD + _SLOT.size * GROUP
_NONE_PENDING = bytes(_BITS)  # a pending bitmap with no bit set
_new = tuple.__new__
ZEROS = memoryview(bytes(1 << 20))  # zeros to write from (slices of it)
_crc = crc32c.crc32c

log = logging.getLogger("traxfs.fs")


class Sum(NamedTuple):
    """One page's checksum: crc32c of its first ``length`` bytes; while ``pending``, the page
    may also hold the bytes ``(alt_crc, alt_length)`` describe (an overwrite in flight)."""

    crc: int
    length: int
    alt_crc: int = 0
    alt_length: int = 0
    pending: bool = False

    def matching(self, page, hi: int = 0) -> Sum | None:
        """The settled sum ``page`` matches (the new one first), covering at least ``hi`` bytes;
        None if the page matches neither."""
        if self.length >= hi and _crc(page[: self.length]) == self.crc:
            return Sum(self.crc, self.length)
        if self.pending and self.alt_length >= hi and _crc(page[: self.alt_length]) == self.alt_crc:
            return Sum(self.alt_crc, self.alt_length)
        return None


def page_sums(view) -> list[Sum]:
    """The sums of a run of pages written from their start with the bytes ``view`` (whole pages;
    the last one may be partial). In C: every page of every write is summed here."""
    return _page_sums(view, Sum)


def crc_of(parts, seed: int = 0) -> int:
    """crc32c of parts ``(buffer, start, stop)`` in order, continuing from ``seed``."""
    for buf, s, e in parts:
        seed = _crc(buf[s:e], seed)
    return seed


@dataclass
class PageWrite:
    """Bytes for one page: ``parts`` (``(buffer, start, stop)`` slices) go to page offset
    ``at``; ``after`` is the page's sum once
    they are on disk, ``intent`` (overwrites) the pending entry that must be durable first."""

    page: int
    at: int
    parts: list
    after: Sum
    intent: Sum | None = None


class DataSums:
    def __init__(self, engine: Engine, tree: BTree, pending: BTree):
        self.e, self.raw, self.tree, self.pending_tree = engine, engine.raw, tree, pending
        self._lock = threading.Lock()
        self._deferred: dict[int, tuple[int, Sum]] = {}  # device page -> (ino, sum) not yet logged
        self._by_ino: dict[int, set[int]] = {}
        self.stats = {"pages_verified": 0, "checksum_mismatches": 0, "repaired_from_mirror": 0, "unrepairable": 0,
                      "unverified_pages": 0, "overwrite_intents": 0, "pending_resolved": 0, "torn_recomputed": 0}

    # ----- looking sums up ----------------------------------------------------------------------
    def get_run(self, first: int, count: int) -> list[Sum | None]:
        """The sums of device pages ``first .. first+count-1`` (None: no sum)."""
        out: list[Sum | None] = []
        page, stop = first, first + count
        while page < stop:
            g = page // GROUP
            n = min(stop, (g + 1) * GROUP) - page
            raw = self.tree.get(U64.pack(g))
            if raw is None:
                out.extend([None] * n)
            else:
                alts = self._alts(g) if raw[_BITS:_HEAD] != _NONE_PENDING else {}
                out += read_slots(raw, page - g * GROUP, n, Sum, alts)
            page += n
        if self._deferred:
            with self._lock:
                for k in range(count):
                    held = self._deferred.get(first + k)
                    if held is not None:
                        out[k] = held[1]
        return out

    def _alts(self, g: int) -> dict[int, tuple[int, int]]:
        """Group ``g``'s pending pages: page in the group -> alternative (crc, length)."""
        raw = self.pending_tree.get(U64.pack(g)) or b""
        return {k: (c, ln) for k, c, ln in _ALT.iter_unpack(raw)}

    # ----- recording sums -----------------------------------------------------------------------
    def _put(self, tx, updates: dict[int, Sum | None]) -> None:
        """Write sums (None: drop the page's sum) into the tree, one record per group; keep
        ``datapending`` in step: a pending page's alternative sum is there, and only then."""
        pages = sorted(updates)
        i = 0
        while i < len(pages):
            g = pages[i] // GROUP
            j = bisect_left(pages, (g + 1) * GROUP, i)
            key = U64.pack(g)
            raw = self.tree.get(key)
            valid, pending = _bitmaps(raw) if raw is not None else (0, 0)
            # the record's bytes edited where the pages' slots are (unpacking and repacking all
            # 256 fields cost ~10 µs per group, and this runs for every page written or freed)
            value = bytearray(raw) if raw is not None else bytearray(VALUE_SIZE)
            was_pending = pending
            alts = self._alts(g) if pending else {}
            k0, k1 = pages[i] - g * GROUP, pages[j - 1] - g * GROUP + 1
            run = [updates[p] for p in pages[i:j]]
            if k1 - k0 == j - i and pack_settled(value, k0, run):
                # the common case, a run of settled sums: written into their slots in C
                mask = ((1 << (k1 - k0)) - 1) << k0
                valid |= mask
                pending &= ~mask
            else:
                for page, s in zip(pages[i:j], run, strict=True):
                    k = page - g * GROUP
                    bit = 1 << k
                    if s is None:
                        valid &= ~bit
                        pending &= ~bit
                        _SLOT.pack_into(value, _HEAD + _SLOT.size * k, 0, 0)
                        continue
                    valid |= bit
                    _SLOT.pack_into(value, _HEAD + _SLOT.size * k, s.crc, s.length)
                    if s.pending:
                        pending |= bit
                        alts[k] = (s.alt_crc, s.alt_length)
                    else:
                        pending &= ~bit
            value[:_HEAD] = valid.to_bytes(_BITS, "big") + pending.to_bytes(_BITS, "big")
            if valid:
                if value != raw:
                    self.tree.put(tx, key, value)
            elif raw is not None:
                self.tree.delete(tx, key)
            if pending:
                self.pending_tree.put(tx, key, b"".join(_ALT.pack(k, *alts[k]) for k in sorted(alts)
                                                        if pending >> k & 1))
            elif was_pending:
                self.pending_tree.delete(tx, key)
            i = j

    def record(self, ftx: FsTransaction, updates: dict[int, Sum]) -> None:
        """Log these sums now in ``ftx`` (overwrite intents; the sums of a write that commits a
        transaction anyway); they replace the pages' deferred sums once ``ftx`` commits, and
        vanish with it if it aborts."""
        self._put(ftx.tx, updates)
        ftx.sums_recorded.update(updates)  # newer than any deferred sum
        ftx.tx.post_commit.append(lambda _handle: self._drop(updates))

    def defer(self, ino: int, updates: dict[int, Sum]) -> None:
        """Sums of data now on the device — or intents of overwrites in a group marked for them
        (``DataMarks``: pending, the bytes about to be written) — to be logged with the inode
        (:meth:`log_deferred`)."""
        if not updates:
            return
        with self._lock:
            self._by_ino.setdefault(ino, set()).update(updates)
            self._deferred.update(zip(updates, zip(repeat(ino, len(updates)), updates.values(), strict=True), strict=True))

    def deferred_groups(self) -> set[int]:
        """The groups holding a sum not yet logged."""
        with self._lock:
            return {p // GROUP for p in self._deferred}

    def log_deferred(self, ftx: FsTransaction, ino: int) -> None:
        """Log ``ino``'s deferred sums in ``ftx`` (just before its inode record: a size never
        becomes durable without the sums of the bytes below it)."""
        with self._lock:
            pages = self._by_ino.get(ino)
            if not pages:
                return
            updates = {p: self._deferred[p][1] for p in pages if p not in ftx.sums_recorded}
        self._put(ftx.tx, updates)
        ftx.tx.post_commit.append(lambda _handle: self._drop(updates))

    def _drop(self, logged: dict[int, Sum]) -> None:
        """Forget deferred sums now in the log. (Sums are deferred, logged and committed under
        the filesystem's lock, so none can have been deferred anew in between.)"""
        with self._lock:
            deferred = self._deferred
            if not deferred:
                return
            owners = {held[0] for held in map(deferred.pop, logged, repeat(None)) if held is not None}
            for ino in owners:  # (a page is in the set of the inode that deferred it, only)
                pages = self._by_ino[ino]
                pages.difference_update(logged)
                if not pages:
                    del self._by_ino[ino]

    def _forget_deferred(self, page: int) -> None:
        ino, _ = self._deferred.pop(page)
        pages = self._by_ino.get(ino)
        if pages is not None:
            pages.discard(page)
            if not pages:
                del self._by_ino[ino]

    def forget(self, tx, first: int, count: int) -> None:
        """Drop the sums of device pages ``first .. first+count-1`` (freed in ``tx``)."""
        self.forget_runs(tx, [(first, count)])

    def forget_runs(self, tx, runs: list[tuple[int, int]]) -> None:
        """Drop the sums of the pages of ``runs`` ((first, count) each, freed in ``tx``): each
        group's record is changed once for all the runs in it (the reaper frees many small files'
        neighbouring pages at once), a whole group without a pending sum deleted."""
        with self._lock:
            deferred = self._deferred
            if deferred:  # walk the shorter of the two: the runs, or the sums deferred
                if sum(count for _, count in runs) < len(deferred):
                    doomed = [p for first, count in runs for p in range(first, first + count) if p in deferred]
                else:
                    doomed = [p for p in list(deferred) if any(f <= p < f + c for f, c in runs)]
                for page in doomed:
                    self._forget_deferred(page)
        cleared: dict[int, None] = {}
        for first, count in runs:
            page, stop = first, first + count
            while page < stop:
                g = page // GROUP
                n = min(stop, (g + 1) * GROUP) - page
                if n == GROUP:
                    raw = self.tree.get(U64.pack(g))
                    if raw is not None and not _bitmaps(raw)[1]:
                        self.tree.delete(tx, U64.pack(g))
                        page += n
                        continue
                cleared.update(dict.fromkeys(range(page, page + n)))
                page += n
        if cleared:
            self._put(tx, cleared)

    # ----- planning a write ---------------------------------------------------------------------
    def page_write(self, ino: int, lpage: int, page: int, s: Sum | None, a: int, b: int, parts: list,
                   visible: int) -> PageWrite:
        """How to write ``parts`` (bytes ``[a, b)`` of device page ``page``, file page
        ``lpage``) so that every crash leaves a sum matching the page. ``s`` is the page's sum,
        ``visible`` how many of its bytes the file's size covered before the write."""
        if s is None:
            if visible > 0:  # bytes inside the size with no sum (a filesystem upgraded from version 1)
                self.stats["unverified_pages"] += 1
                content = bytearray(self._read_page(page))
                _patch(content, a, parts)
                length = max(b, visible)
                return PageWrite(page, a, parts, Sum(_crc(memoryview(content)[:length]), length))
            if a:  # nothing of the page is the file's yet: it is written from its start
                parts, a = [(ZEROS, 0, a), *parts], 0
            return PageWrite(page, 0, parts, Sum(crc_of(parts), b))
        if not s.pending and a == s.length:  # an append: the summed prefix stays as it is
            return PageWrite(page, a, parts, Sum(crc_of(parts, s.crc), b))
        # part of the summed bytes change (a page whose summed bytes are replaced whole is in a
        # run: DataMap.plan): the rest must be read, and verified
        content = bytearray(self.read_page(ino, lpage, page, s, 0))
        old = s.matching(content)
        _patch(content, a, parts)
        length = max(old.length, b)
        new = Sum(_crc(memoryview(content)[:length]), length)
        self.stats["overwrite_intents"] += 1
        return PageWrite(page, a, parts, new, Sum(new.crc, new.length, old.crc, old.length, True))

    def intents(self, old: list[Sum], new: list[Sum]) -> list[Sum]:
        """The pending entries of pages whose summed bytes a write replaces whole: the new sum,
        the old one as the alternative."""
        self.stats["overwrite_intents"] += len(new)
        return [_new(Sum, (n[0], n[1], o[0], o[1], True)) for o, n in zip(old, new, strict=True)]

    # ----- reading and verifying ----------------------------------------------------------------
    def _read_page(self, page: int) -> bytes:
        return self.raw.read(page * PAGE_SIZE, PAGE_SIZE)

    def read_page(self, ino: int, lpage: int, page: int, s: Sum, hi: int) -> bytes:
        """Device page ``page`` (file page ``lpage`` of ``ino``), verified against ``s``."""
        raw = self._read_page(page)
        return raw if s.matching(raw, hi) else self.recover(ino, lpage, page, s, hi)

    def verify_run(self, ino: int, lpage: int, phys: int, blob: bytes, hi: int) -> bytes | bytearray:
        """Check ``blob``, the whole pages ``phys..`` (file pages ``lpage..``) from which bytes up
        to ``hi`` of the last page are being read (a sum must cover them); returns it, with
        damaged pages replaced by a mirror's good copy. Raises EIO if a page has none.

        One call per group of pages checks the common case in C (``traxfs.ext.datasum``); the
        pages it does not pass — no sum, pending, a newer sum not yet logged, or damaged — are
        looked at here one by one."""
        n = len(blob) // PAGE_SIZE
        view = memoryview(blob)
        verified, k = 0, 0
        while k < n:
            page = phys + k
            g = page // GROUP
            m = min(n - k, (g + 1) * GROUP - page)
            raw = self.tree.get(U64.pack(g))
            odd = range(m) if raw is None else check_pages(raw, view, k, page - g * GROUP, m,
                                                           hi if k + m == n else PAGE_SIZE)
            if self._deferred:
                with self._lock:
                    odd = sorted({*odd, *(j for j in range(m) if page + j in self._deferred)})
            verified += m - len(odd)
            for j in odd:
                s = self.get_run(page + j, 1)[0]
                if s is None:
                    self.stats["unverified_pages"] += 1
                    continue
                end = hi if k + j == n - 1 else PAGE_SIZE
                at = (k + j) * PAGE_SIZE
                if s.matching(view[at : at + PAGE_SIZE], end):
                    verified += 1
                    continue
                good = self.recover(ino, lpage + k + j, page + j, s, end)
                if not isinstance(blob, bytearray):
                    blob = bytearray(blob)
                    view = memoryview(blob)
                view[at : at + PAGE_SIZE] = good
            k += m
        self.stats["pages_verified"] += verified
        return blob

    def recover(self, ino: int, lpage: int, page: int, s: Sum, hi: int) -> bytes:
        """A copy of a page whose bytes failed ``s``: from a mirror's good leg (the bad one is
        rewritten), else EIO with an error line naming the file and offset."""
        self.stats["checksum_mismatches"] += 1
        where = f"inode {ino}: file page {lpage} (byte offset {lpage * PAGE_SIZE}), device page {page}"
        found = self.raw.good_copy(page * PAGE_SIZE, PAGE_SIZE, lambda d: s.matching(d, hi) is not None, where)
        if found is not None:
            self.stats["repaired_from_mirror"] += 1 if found[1] else 0
            return found[0]
        self.stats["unrepairable"] += 1
        log.error("%s: data fails its checksum and no good copy exists: read refused (EIO)", where)
        raise FsError(errno.EIO, f"{where}: data fails its checksum (damaged), no good copy")

    # ----- after a crash ------------------------------------------------------------------------
    def resolve_pending(self, tx) -> int:
        """Settle every pending page (mount): keep the sum its content matches — the new one,
        else the old one — or, for a write torn by a crash, recompute it from the content; on a
        mirror, make every leg hold the chosen copy. Returns the pages settled."""
        pages = [U64.unpack(key)[0] * GROUP + k for key, raw in self.pending_tree.items()
                 for k, _, _ in _ALT.iter_unpack(raw)]
        if not pages:
            return 0
        self.raw.flush()  # what is judged here must be on disk before the verdict is logged
        updates: dict[int, Sum] = {}
        for page in pages:
            s = self.get_run(page, 1)[0]
            if s is None or not s.pending:  # (cannot happen: the two trees change together)
                updates[page] = s
                continue
            updates[page] = self.settle_page(page, s)
        self._put(tx, updates)
        self.stats["pending_resolved"] += len(updates)
        return len(updates)

    def put_settled(self, tx, updates: dict[int, Sum]) -> None:
        """Log settled sums (recovery: ``DataMarks.settle``)."""
        self._put(tx, updates)

    def settle_page(self, page: int, s: Sum, marked: bool = False) -> Sum:
        """After a crash: the settled sum of device page ``page``, logged as ``s`` — the sum
        (new, then old while pending) a copy matches, else one recomputed from the first copy;
        on a mirror every leg gets the chosen copy. ``marked``: the page's group is marked for
        overwrites (``DataMarks``), so a mismatch is any unflushed overwrite since the mark,
        not only a torn one."""
        pos = page * PAGE_SIZE
        copies = self.raw.copies(pos, PAGE_SIZE)
        chosen = None
        for want in (Sum(s.crc, s.length), Sum(s.alt_crc, s.alt_length))[: 2 if s.pending else 1]:
            chosen = next(((want, d) for _, d in copies if want.matching(d)), None)
            if chosen is not None:
                break
        if chosen is None:
            data = copies[0][1]
            length = max(s.length, s.alt_length)
            chosen = (Sum(_crc(data[:length]), length), data)
            if marked:
                self.stats["unlogged_recomputed"] += 1
            else:
                self.stats["torn_recomputed"] += 1
                log.warning("device page %d: an overwrite torn by the crash left neither the old nor the new "
                            "bytes; its checksum is recomputed from what is on disk", page)
        if len(copies) > 1:
            for leg, data in copies:
                if data != chosen[1]:
                    self.raw.repair_copy(leg, pos, chosen[1])
        return chosen[0]


def _patch(content: bytearray, at: int, parts: list) -> None:
    for buf, s, e in parts:
        content[at : at + e - s] = buf[s:e]
        at += e - s


def _bitmaps(raw: bytes) -> tuple[int, int]:
    """A datasums record's valid and pending bitmaps."""
    return int.from_bytes(raw[:_BITS], "big"), int.from_bytes(raw[_BITS:_HEAD], "big")

"""Scrubbing: read every allocated page — engine pages and file data — verify every copy, and
rewrite a damaged copy from a good one (``trax scrub``; fsck's data pass uses the same walk).

Reads go to every copy the device holds (``engine.raw.copies``: each in-sync leg of a mirror),
not through the buffer or the read path, because a read takes one copy and a damaged leg would
hide behind a good one. An engine page passes if it verifies as a page; a file data page if it
matches its checksum (``fs/datasums.py``) over the bytes the file's size covers; a queue block
(``fs/queues``) if its header and every frame up to what its index vouches for pass; a table's
PAX page if its header and minipages do, a rejected ingest file if its crc32c does. Other pages
that no extent owns are the engine's; preallocated data pages never written have no checksum and
are counted, not read.

Run it on a quiescent filesystem (unmounted: ``trax scrub`` opens it, which also runs recovery
and settles the checksums of interrupted overwrites).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from .datamap import dead_runs
from .datasums import GROUP
from .engine.check import page_runs
from .engine.page import PAGE_SIZE, PageCorrupt, verify
from .keys import U64, Inode, unpack_extent
from .queues.check import block_ok, queue_blocks
from .tables.check import page_ok, pax_pages, rejected_files, rejected_ok

EXIT_CLEAN, EXIT_REPAIRED, EXIT_DAMAGED, EXIT_OPERATIONAL = 0, 1, 4, 8


@dataclass
class ScrubReport:
    engine_pages: int = 0
    data_pages: int = 0
    unwritten_pages: int = 0  # data pages never written (preallocated): no checksum, not read
    unverified_pages: int = 0  # data inside a file's size without a checksum (format 1 data)
    queue_blocks: int = 0  # blocks of the queue store (each verified whole: header and frames)
    pax_pages: int = 0  # PAX pages of the table store (each verified whole: header and minipages)
    rejected_files: int = 0  # files an ingest refused, kept by the table store (each by its crc32c)
    copies: int = 1
    damaged: list[str] = field(default_factory=list)  # damage found and left (check only)
    repaired: list[str] = field(default_factory=list)
    unrepairable: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.unrepairable or self.damaged:
            return EXIT_DAMAGED
        return EXIT_REPAIRED if self.repaired else EXIT_CLEAN

    def as_dict(self) -> dict:
        return {"engine_pages": self.engine_pages, "data_pages": self.data_pages,
                "unwritten_pages": self.unwritten_pages, "unverified_pages": self.unverified_pages,
                "queue_blocks": self.queue_blocks, "pax_pages": self.pax_pages,
                "rejected_files": self.rejected_files,
                "copies": self.copies, "damaged": self.damaged, "repaired": self.repaired,
                "unrepairable": self.unrepairable, "exit_code": self.exit_code}


class _Owners:
    """Which file page a device page holds: the extents, sorted by device page."""

    def __init__(self, fs):
        self.sizes = {U64.unpack(k)[0]: Inode.unpack(0, v).size for k, v in fs.t["inodes"].items()}
        self.runs = sorted((phys, count, U64.unpack(k[:8])[0], U64.unpack(k[8:16])[0])
                           for k, v in fs.t["extents"].items() for phys, count, _ in [unpack_extent(v)])
        # pages a snapshot still sees (the dead list): data of inode 0 here, verified up to their sums
        self.runs = sorted(self.runs + [(phys, count, 0, 0) for phys, count, _, _ in dead_runs(fs.t["dead"])])
        self.starts = [r[0] for r in self.runs]

    def owner(self, page: int) -> tuple[int, int, int] | None:
        """(ino, file page, bytes of the page inside the file's size), or None."""
        i = bisect.bisect_right(self.starts, page) - 1
        if i < 0:
            return None
        phys, count, ino, lpage = self.runs[i]
        if page >= phys + count:
            return None
        lp = lpage + page - phys
        return ino, lp, min(PAGE_SIZE, max(0, self.sizes.get(ino, 0) - lp * PAGE_SIZE))

    def pages(self) -> set[int]:
        return {p for phys, count, _, _ in self.runs for p in range(phys, phys + count)}


def _path_names(fs) -> Callable[[int], str]:
    """A function naming an inode by a path (built once, when first needed)."""
    parents: dict[int, tuple[int, bytes]] = {}

    def name(ino: int) -> str:
        if not parents:
            try:
                for k, v in fs.t["dirents"].items():
                    if k[8:] != b"..":
                        parents.setdefault(U64.unpack(v[:8])[0], (U64.unpack(k[:8])[0], k[8:]))
            except PageCorrupt:  # a damaged directory tree: the names found so far, inode numbers else
                parents.setdefault(-1, (-1, b""))
        parts, cur = [], ino
        while cur in parents and len(parts) < 4096:
            cur, n = parents[cur]
            parts.append(n.decode(errors="replace"))
        return "/" + "/".join(reversed(parts)) if parts else f"(inode {ino}, no name)"

    return name


def _engine_ok(pid: int, seed: int) -> Callable[[bytes], bool]:
    def ok(data: bytes) -> bool:
        try:
            verify(data, pid, seed)
        except PageCorrupt:
            return False
        return True
    return ok


def scrub(fs, *, repair: bool = True, data_only: bool = False,
          progress: Callable[[int, int], None] | None = None) -> ScrubReport:
    """Verify every copy of every allocated page of ``fs`` (``data_only``: file data pages
    only); with ``repair``, rewrite damaged copies from a good one."""
    fs.flush_inodes()
    fs.data.flush_data()
    fs.e.write_back()  # the device holds the current pages
    raw, sums = fs.e.raw, fs.data.sums
    owners = _Owners(fs)
    name = _path_names(fs)
    rep = ScrubReport()
    # the maps read through the buffer, which serves a map page from a good copy if one is damaged
    blocks = queue_blocks(fs.e)  # queue blocks: verified whole, by their own checksums, below
    queue = {p for _, _, e in blocks for p in range(e.page, e.page + e.pages)}
    paxes = pax_pages(fs.e)  # PAX pages of tables: verified whole (header, minipages), below
    queue |= {p for _, _, e in paxes for p in range(e.page, e.page + e.pages)}
    rejected = rejected_files(fs.e)  # files an ingest refused: verified by their crc32c, below
    queue |= {p for _, _, r in rejected for p in range(r.page, r.page + r.pages)}
    pages = sorted(owners.pages()) if data_only else [p for p in fs.e.pages_in_use() if p not in queue]
    done = 0
    for first, count in page_runs(pages):
        copies = raw.copies(first * PAGE_SIZE, count * PAGE_SIZE)
        rep.copies = max(rep.copies, len(copies))
        found = sums.get_run(first, count)
        for k in range(count):
            page = first + k
            own = owners.owner(page)
            if own is not None:
                ino, lpage, visible = own
                s = found[k]
                if s is None:
                    if visible:
                        rep.unverified_pages += 1
                    else:
                        rep.unwritten_pages += 1
                    continue
                rep.data_pages += 1
                ok = lambda d, s=s, hi=visible: s.matching(d, hi) is not None  # noqa: E731
                what = f"{name(ino)}: byte offset {lpage * PAGE_SIZE} (inode {ino}, device page {page})"
            else:
                rep.engine_pages += 1
                ok = _engine_ok(page, fs.e.page_seed)
                what = f"engine page {page}"
            views = [(leg, memoryview(d)[k * PAGE_SIZE : (k + 1) * PAGE_SIZE]) for leg, d in copies]
            _judge(rep, raw, what, page * PAGE_SIZE, views, ok, repair)
        done += count
        if progress is not None:
            progress(done, len(pages))
    for qid, first, e in [] if data_only else blocks:  # (fsck's queue pass reads them for its data pass)
        rep.queue_blocks += 1
        if e.used:
            what = f"queue id {qid}: block {e.ordinal} (sequence {first}.., device page {e.page})"
            _judge(rep, raw, what, e.page * PAGE_SIZE, raw.copies(e.page * PAGE_SIZE, e.used),
                   block_ok(qid, first, e), repair)
    for tid, seq, e in [] if data_only else paxes:
        rep.pax_pages += 1
        what = f"table id {tid}: PAX page {seq} (device page {e.page})"
        _judge(rep, raw, what, e.page * PAGE_SIZE, raw.copies(e.page * PAGE_SIZE, e.pages * PAGE_SIZE),
               page_ok(tid, seq, e), repair)
    for tid, fname, r in [] if data_only else rejected:
        if r.pages:
            rep.rejected_files += 1
            what = f"table id {tid}: rejected file {fname.decode(errors='replace')!r} (device page {r.page})"
            _judge(rep, raw, what, r.page * PAGE_SIZE, raw.copies(r.page * PAGE_SIZE, r.size), rejected_ok(r), repair)
    if rep.repaired:
        raw.flush()
    return rep


def _judge(rep: ScrubReport, raw, what: str, pos: int, views, ok: Callable[[bytes], bool], repair: bool) -> None:
    """Every copy ``views`` ((leg, bytes) at ``pos``) checked by ``ok``; a damaged leg rewritten
    from a good copy (``repair``) or reported."""
    bad = [leg for leg, v in views if not ok(v)]
    if not bad:
        return
    good = next((bytes(v) for _, v in views if ok(v)), None)
    legs = ", ".join(map(str, bad))
    if good is None:
        rep.unrepairable.append(f"{what}: no good copy")
    elif repair:
        for leg in bad:
            raw.repair_copy(leg, pos, good)
        rep.repaired.append(f"{what}: leg {legs} rewritten from a good copy")
    else:
        rep.damaged.append(f"{what}: leg {legs} damaged (a good copy exists)")


def stale_sums(fs) -> list[int]:
    """Device pages with a checksum that no extent owns (they should have been dropped with
    the extent)."""
    owned = _Owners(fs)
    out = []
    for key, _ in fs.t["datasums"].items():
        g = U64.unpack(key)[0]
        for k, s in enumerate(fs.data.sums.get_run(g * GROUP, GROUP)):
            if s is not None and owned.owner(g * GROUP + k) is None:
                out.append(g * GROUP + k)
    return out

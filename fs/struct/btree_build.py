"""Building a whole B+tree in one pass (``BTree.bulk_create``), with the logging opt-out for
large writes: the pages are laid out in memory, written straight to freshly allocated contiguous
pages and forced to the device; only the allocation, the header and the catalog entry go
through the log. If the transaction aborts (or never commits before a crash) those records are
undone: the pages return to the free map and the tree never existed. Nobody else can see the
tree before the transaction commits, so no other transaction's change can be lost with it.
"""

from __future__ import annotations

from ..engine import slotted
from ..engine.page import HEADER_SIZE, PAGE_SIZE, PageType, init_header, set_aux
from ..engine.xact import Transaction
from .btree_node import (
    HDR,
    INNER,
    KIND,
    LEAF,
    MAGIC,
    VERSION,
    check_sizes,
    inner_record,
    leaf_record,
)
from .common import PAGE_CAPACITY, U64, new_page, write_bytes


def build_tree(engine, tx: Transaction, items, name: str | None, fill: float) -> int:
    """The header pid of a new tree holding ``items`` ((key, value) pairs, unique keys), its
    pages filled to ``fill``; named ``btree:NAME`` in the catalog with ``name``."""
    entries = sorted(items)
    for (k1, _), (k2, _) in zip(entries, entries[1:], strict=False):
        if k1 == k2:
            raise ValueError(f"duplicate key {k1!r} in a bulk load")
    for k, v in entries:
        check_sizes(k, v)
    budget = int(PAGE_CAPACITY * fill)

    def group(records: list[bytes]) -> list[list[bytes]]:
        pages, cur, used = [], [], 0
        for r in records:
            if cur and used + len(r) + 4 > budget:
                pages.append(cur)
                cur, used = [], 0
            cur.append(r)
            used += len(r) + 4
        pages.append(cur)
        return pages

    # the shape first (pids are needed for links), then one allocation for every page;
    # firsts[d][i] = smallest key under page i of level d (what its parent separates on)
    levels = [group([leaf_record(k, v) for k, v in entries])]
    firsts, at = [[]], 0
    for page in levels[0]:
        firsts[0].append(entries[at][0] if entries else b"")
        at += len(page)
    while len(levels[-1]) > 1:
        below = firsts[-1]
        pages = group([inner_record(0, key) for key in below])
        up, at = [], 0
        for page in pages:
            up.append(below[at])
            page[0] = inner_record(0, b"")  # record 0 of an inner node is −∞
            at += len(page)
        levels.append(pages)
        firsts.append(up)
    total = sum(len(level) for level in levels)
    header = new_page(engine, tx, PageType.BTREE_HEADER, is_slotted=False)
    first = engine.alloc_region(tx, total)
    base = [first]
    for level in levels[:-1]:
        base.append(base[-1] + len(level))
    lsn = engine.next_lsn()  # newer than any record of these pages' previous lives
    pages = bytearray()
    for depth, level in enumerate(levels):
        child = base[depth - 1] if depth else 0
        for i, recs in enumerate(level):
            pid = base[depth] + i
            buf = bytearray(PAGE_SIZE)
            init_header(buf, pid, LEAF if depth == 0 else INNER, lsn)
            if depth:  # point inner records at their children, in order
                recs = [U64.pack(child + j) + r[8:] for j, r in enumerate(recs)]
                child += len(recs)
            slotted.build(buf, recs)
            set_aux(buf, (pid + 1 if i + 1 < len(level) else 0) if depth == 0 else depth)
            pages += buf
    engine.write_unlogged(first, pages)
    root = base[-1]
    write_bytes(engine, tx, header, HEADER_SIZE, HDR.pack(MAGIC, VERSION, 0, root, 0))
    if name is not None:
        engine.set_root(tx, f"{KIND}:{name}", header)
    return header

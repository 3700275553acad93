"""Checking the table store (fsck's table pass), and the pages it owns.

Per table: its PAX pages are numbered 0, 1, 2, ... without a gap; each is allocated, owned by no
other page, reads back with a valid header (magic, version, crc32c) naming this table and
sequence number, the rows and minipage directory its index entry says, and every minipage's
checksum; the table's record agrees with its pages (rows, pages, engine pages, per-column
totals, no page newer than the table's version); a table with a key has exactly its rows' keys
in the key index, each naming its row. A rejected file's pages are allocated, owned once, and
hold its bytes (crc32c). No entry of any tree belongs to a table id
that does not exist. Nothing is repaired: the rows are the user's, and a damaged PAX page cannot
be rebuilt; a mirror's good copy replaces a damaged leg (scrub).

:func:`owned_pages` names every page the store owns without opening it (its trees', read as
far as they can be, and its PAX pages'), so fsck's leak pass never frees them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import crc32c

from ..engine.page import PAGE_SIZE
from ..rawstore import owned_pages as store_pages
from ..rawstore import tree_headers
from ..struct.btree_salvage import salvage
from .index import ALL_TREES, DOOMED, PREFIX, U64, U64X2, PageEntry, RejectedRecord, table_range
from .keys import ROW_REF, key_bytes
from .pax import PaxDamaged, minipage_ok, parse_header


@dataclass
class TableCheck:
    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pages: set[int] = field(default_factory=set)  # engine pages the PAX pages own
    counts: dict = field(default_factory=dict)


def owned_pages(engine) -> set[int]:
    """Every page the table store owns (its trees', its PAX pages' and its rejected files'),
    without opening it."""
    extents = [e for _, _, e in pax_pages(engine)] + [r for _, _, r in rejected_files(engine)]
    return store_pages(engine, ALL_TREES, PREFIX, extents)


def rejected_files(engine) -> list[tuple[int, bytes, RejectedRecord]]:
    """(table id, file name, record) of every rejected file the index names, read as far as it
    can be read (scrub, fsck's damage pass)."""
    header = tree_headers(engine, ("rejected",), PREFIX)["rejected"]
    if header is None:
        return []
    out = []
    for k, v in salvage(engine, header).entries:
        try:
            out.append((U64.unpack(k[:8])[0], k[8:], RejectedRecord.unpack(v)))
        except (ValueError, struct.error):  # an unreadable entry owns nothing we can name
            continue
    return out


def rejected_ok(rec: RejectedRecord) -> Callable[[bytes], bool]:
    """Does a copy of a rejected file's pages hold its bytes (scrub)?"""
    return lambda data: crc32c.crc32c(bytes(data[: rec.size])) == rec.crc


def pax_pages(engine) -> list[tuple[int, int, PageEntry]]:
    """(table id, sequence number, entry) of every PAX page the index names, read as far as it
    can be read (scrub, fsck's damage pass)."""
    header = tree_headers(engine, ("pages",), PREFIX)["pages"]
    if header is None:
        return []
    out = []
    for k, v in salvage(engine, header).entries:
        try:
            out.append((*U64X2.unpack(k), PageEntry.unpack(v)))
        except (ValueError, struct.error):  # an unreadable entry owns nothing we can name
            continue
    return out


def page_ok(tid: int, seq: int, entry: PageEntry) -> Callable[[bytes], bool]:
    """Does a copy of a whole PAX page pass every check of a read?"""
    def ok(data: bytes) -> bool:
        return not _page_problems(tid, seq, entry, data, "")
    return ok


def _page_problems(tid: int, seq: int, entry: PageEntry, data: bytes, where: str) -> list[str]:
    try:
        head = parse_header(data, where)
    except PaxDamaged as ex:
        return [str(ex)]
    out = []
    if (head.table_id, head.seq, head.rows) != (tid, seq, entry.rows):
        out.append(f"{where}: header says table {head.table_id}, page {head.seq}, {head.rows} rows; the index "
                   f"says table {tid}, page {seq}, {entry.rows} rows")
    if head.dirs != [(m.offset, m.length, m.crc) for m in entry.minis]:
        out.append(f"{where}: minipage directory differs from the index")
        return out
    for k, m in enumerate(entry.minis):
        if m.offset + m.length > len(data) or not minipage_ok(data[m.offset : m.offset + m.length], m.crc):
            out.append(f"{where}: minipage of column {k + 1} fails its checksum")
    return out


def _keys(store, table, entries: list[tuple[int, PageEntry]], label: str) -> list[str]:
    """The key index holds exactly the keys of the table's rows, each naming its row."""
    want: dict[bytes, tuple[int, int]] = {}
    for seq, e in entries:
        cols = [store.column(table, e, k, f"{label}: PAX page {seq}") if k in table.schema.key else [None] * e.rows
                for k in range(len(table.schema.columns))]
        for row, k in enumerate(key_bytes(table.schema, table.rec.tid, cols)):
            if k in want:
                return [f"{label}: a key value appears in two rows (PAX page {seq}, row {row})"]
            want[k] = (seq, row)
    lo, hi = table_range(table.rec.tid)
    have = {k: ROW_REF.unpack(v) for k, v in store.t["keys"].items(lo, hi)}
    if have != want:
        missing, extra = len(want.keys() - have.keys()), len(have.keys() - want.keys())
        wrong = sum(1 for k in want.keys() & have.keys() if want[k] != have[k])
        return [f"{label}: the key index disagrees with the rows ({missing} key(s) missing, {extra} extra, "
                f"{wrong} naming the wrong row)"]
    return []


def check_tables(store) -> TableCheck:
    """Check every table of ``store`` (opened for checking); see the module's text."""
    out = TableCheck()
    if store.t is None:
        return out
    owner: dict[int, str] = {}
    rows = pages = 0
    tids = set()
    for name in store.names():
        table = store.get(name)
        rec = table.rec
        tids.add(rec.tid)
        label = f"table {name.decode(errors='replace')}"
        lo, hi = table_range(rec.tid)
        entries = [(U64X2.unpack(k)[1], PageEntry.unpack(v)) for k, v in store.t["pages"].items(lo, hi)]
        if [s for s, _ in entries] != list(range(len(entries))):
            out.problems.append(f"{label}: PAX page numbers are not 0..{len(entries) - 1} without a gap")
        totals = [[0, 0, 0] for _ in rec.totals]
        for seq, e in entries:
            where = f"{label}: PAX page {seq} (device page {e.page})"
            span = range(e.page, e.page + e.pages)
            for p in span:
                if p in owner:
                    out.problems.append(f"{where}: page {p} is also owned by {owner[p]}")
                owner[p] = where
                if not store.io.is_allocated(p):
                    out.problems.append(f"{where}: page {p} is not allocated")
            out.pages.update(span)
            if e.version > rec.version:
                out.problems.append(f"{where}: added by version {e.version}, newer than the table's {rec.version}")
            if len(e.minis) != len(totals):
                out.problems.append(f"{where}: {len(e.minis)} minipages for {len(totals)} columns")
                continue
            data = store.io.raw.read(e.page * PAGE_SIZE, e.pages * PAGE_SIZE)
            out.problems += _page_problems(rec.tid, seq, e, data, where)
            for t, m in zip(totals, e.minis, strict=True):
                t[0] += m.length
                t[1] += m.csv_bytes
                t[2] += m.json_bytes
        if table.schema.key:
            out.problems += _keys(store, table, entries, label)
        n_rows = sum(e.rows for _, e in entries)
        want = (rec.rows, rec.npages, rec.engine_pages, [list(t) for t in rec.totals])
        have = (n_rows, len(entries), sum(e.pages for _, e in entries), totals)
        if want != have:
            out.problems.append(f"{label}: the table record (rows, pages, engine pages, column totals) {want[:3]} "
                                f"disagrees with its pages {have[:3]}")
        rows += n_rows
        pages += len(entries)
    for tid, name, r in rejected_files(store.e):
        where = f"table id {tid}: rejected file {name.decode(errors='replace')!r} (device page {r.page})"
        for p in range(r.page, r.page + r.pages):
            if p in owner:
                out.problems.append(f"{where}: page {p} is also owned by {owner[p]}")
            owner[p] = where
            if not store.io.is_allocated(p):
                out.problems.append(f"{where}: page {p} is not allocated")
        if r.pages and not rejected_ok(r)(store.io.raw.read(r.page * PAGE_SIZE, r.size)):
            out.problems.append(f"{where}: checksum mismatch")
        out.pages.update(range(r.page, r.page + r.pages))
    doomed = {U64.unpack(k[len(DOOMED) :])[0] for k in store.t["tables"].keys(DOOMED, DOOMED + b"\xff")}
    for tree in ("pages", "keys", "rejected", "ingested"):
        stray = {U64.unpack(k[:8])[0] for k in store.t[tree].keys()} - tids - doomed
        for tid in sorted(stray):
            out.problems.append(f"tree t.{tree}: entries of table id {tid}, which does not exist")
    for _, _, e in pax_pages(store.e):  # a doomed or stray table's pages are owned until freed
        out.pages.update(range(e.page, e.page + e.pages))
    out.counts = {"tables": len(tids), "pages": pages, "rows": rows, "engine_pages": len(out.pages)}
    return out

"""The table store: the tables of one engine, their PAX pages and their records.

A table is created with its schema (one durable transaction). An append takes a batch of rows
(one list of values per column, already checked against the schema), cuts it into PAX pages of
about :data:`PAX_TARGET` bytes, writes them into freshly allocated raw engine pages (outside the
log: the store's log barrier flushes them before any record naming them is written) and commits
their index entries, the table's new totals and version, and — for a file — the record that the
file was ingested, in **one** durable transaction: all of the batch or none of it, never twice.

PAX pages are never rewritten, so a table version is a prefix of the table's pages: a reader
that took a :class:`Snapshot` keeps reading that version while appends go on. Removing a table
removes its name and marks its id doomed (one durable transaction), then frees its pages in
transactions of bounded size; an open after a crash finishes an interrupted removal. A table
with open readers cannot be removed (EBUSY): its pages must stay until they are done.
"""

from __future__ import annotations

import errno
import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..engine.page import PAGE_SIZE
from ..errors import FsError
from ..queues.engine_io import EngineIO, has_trees
from .index import (
    DOOMED,
    KEY_NEXT_ID,
    PREFIX,
    TREES,
    U64,
    ColumnTotals,
    IngestRecord,
    PageEntry,
    TableRecord,
    ingest_key,
    page_key,
    table_range,
)
from .pax import PaxDamaged, check_minipage, decode_column, encode, minipage_ok
from .schema import Schema, parse_schema

NAME_MAX = 255
PAX_TARGET = 1 << 20  # bytes of one PAX page (its rows are cut to about this much)
MAX_PAGE_ROWS = 1 << 16
PURGE_BATCH = 64  # PAX pages freed per transaction of a removal
_WIDTH = {"int32": 4, "date": 4, "bool": 1, "string": 12}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def check_name(name: bytes) -> None:
    """A table name follows the rules of a file name."""
    if len(name) > NAME_MAX:
        raise FsError(errno.ENAMETOOLONG, f"table name of {len(name)} bytes (limit {NAME_MAX})")
    if not name or b"/" in name or b"\0" in name or name in (b".", b".."):
        raise FsError(errno.EINVAL, f"invalid table name {name!r}")


def has_tables(engine) -> bool:
    """Was a table store ever made on ``engine`` (fsck opens one only then)?"""
    return has_trees(engine, TREES, PREFIX)


@dataclass(frozen=True)
class Snapshot:
    """One version of a table: its first ``npages`` PAX pages."""

    version: int
    rows: int
    pages: tuple[PageEntry, ...]
    totals: tuple[ColumnTotals, ...]


class Table:
    def __init__(self, name: bytes, rec: TableRecord, pages: list[PageEntry]):
        self.name, self.rec = name, rec
        self.schema: Schema = parse_schema(rec.schema_text)
        self.pages = pages
        self.readers = 0
        self.removed = False
        self._snap = Snapshot(rec.version, rec.rows, tuple(pages), rec.totals)

    def snapshot(self) -> Snapshot:
        return self._snap

    def _committed(self, rec: TableRecord, new: list[PageEntry]) -> None:
        self.rec = rec
        self.pages += new
        self._snap = Snapshot(rec.version, rec.rows, tuple(self.pages), rec.totals)


@dataclass(frozen=True)
class AppendResult:
    version: int
    rows: int
    pages: int
    duplicate: bool = False  # the same file was ingested before (its earlier result is given)


class TableStore:
    def __init__(self, engine):
        self.io = EngineIO(engine)
        self.e = engine
        self.t = self.io.trees(TREES, PREFIX) if has_tables(engine) else None  # made with the first table
        self._lock = threading.Lock()  # the set of tables, and every commit
        self.bytes_read = 0
        self.tables: dict[bytes, Table] = {}
        for key, raw in self.t["tables"].items() if self.t is not None else ():
            if not key.startswith(b"\0"):
                rec = TableRecord.unpack(raw, f"table {key!r}")
                lo, hi = table_range(rec.tid)
                pages = [PageEntry.unpack(v) for _, v in self.t["pages"].items(lo, hi)]
                self.tables[key] = Table(key, rec, pages)
        for key in list(self.t["tables"].keys(DOOMED, DOOMED + b"\xff")) if self.t is not None else ():
            self._purge(U64.unpack(key[len(DOOMED) :])[0])

    # ----- the set of tables --------------------------------------------------------------------
    def names(self) -> list[bytes]:
        with self._lock:
            return sorted(self.tables)

    def get(self, name: bytes) -> Table:
        t = self.tables.get(name)
        if t is None:
            raise FsError(errno.ENOENT, f"no table {name.decode(errors='replace')!r}")
        return t

    def create(self, name: bytes, schema_text: str) -> Table:
        """A new table; raises :class:`~traxfs.fs.tables.schema.SchemaError` for a bad schema
        (nothing created)."""
        check_name(name)
        schema = parse_schema(schema_text)
        with self._lock:
            if name in self.tables:
                raise FsError(errno.EEXIST, f"table {name.decode(errors='replace')!r} exists")
            if self.t is None:
                self.t = self.io.trees(TREES, PREFIX)
            tx = self.io.begin()
            try:
                raw = self.t["tables"].get(KEY_NEXT_ID)
                tid = U64.unpack(raw)[0] if raw is not None else 1
                self.t["tables"].put(tx, KEY_NEXT_ID, U64.pack(tid + 1))
                rec = TableRecord(tid, now_ms(), 0, 0, 0, 0, 0, schema.text(),
                                  tuple(ColumnTotals(0, 0, 0) for _ in schema.columns))
                self.t["tables"].put(tx, name, rec.pack())
            except BaseException as ex:
                self.io.abort(tx)
                raise self.io.failure(ex) or ex from None
            self.io.commit(tx, durable=True)
            table = self.tables[name] = Table(name, rec, [])
            return table

    def remove(self, name: bytes) -> None:
        """Remove table ``name``: its name at once, its pages in bounded transactions."""
        with self._lock:
            table = self.get(name)
            if table.readers:
                raise FsError(errno.EBUSY, f"table {name.decode(errors='replace')!r} has {table.readers} open "
                                           f"reader(s)")
            tx = self.io.begin()
            try:
                self.t["tables"].delete(tx, name)
                self.t["tables"].put(tx, DOOMED + U64.pack(table.rec.tid), b"")
            except BaseException as ex:
                self.io.abort(tx)
                raise self.io.failure(ex) or ex from None
            self.io.commit(tx, durable=True)
            table.removed = True
            del self.tables[name]
            self._purge(table.rec.tid)

    def _purge(self, tid: int) -> None:
        """Free every PAX page of a removed table and its ingest records, then forget it."""
        lo, hi = table_range(tid)
        for tree in ("pages", "ingested"):
            while True:
                tx = self.io.begin()
                batch = list(itertools.islice(self.t[tree].items(lo, hi), PURGE_BATCH))
                for key, raw in batch:
                    self.t[tree].delete(tx, key)
                    if tree == "pages":
                        e = PageEntry.unpack(raw)
                        self.io.free(tx, e.page, e.pages)
                if not batch and tree == "ingested":
                    self.t["tables"].delete(tx, DOOMED + U64.pack(tid))
                self.io.commit(tx, durable=not batch)
                if not batch:
                    break

    # ----- appending ----------------------------------------------------------------------------
    def ingested(self, table: Table, name: bytes) -> IngestRecord | None:
        raw = self.t["ingested"].get(ingest_key(table.rec.tid, name))
        return None if raw is None else IngestRecord.unpack(raw)

    def append(self, table: Table, columns: Sequence[Sequence], source: tuple[bytes, int, int] | None = None
               ) -> AppendResult:
        """Append the rows ``columns`` holds (one sequence of checked values per column) in one
        durable transaction. ``source`` (file name, size, crc32c) records a file's ingest in the
        same transaction; a file recorded before with the same size and checksum is a retry of
        that ingest: nothing is appended and its earlier result is returned."""
        nrows = len(columns[0]) if columns else 0
        with self._lock:
            if table.removed:
                raise FsError(errno.ENOENT, f"table {table.name.decode(errors='replace')!r} was removed")
            if source is not None:
                before = self.ingested(table, source[0])
                if before is not None and (before.size, before.crc) == source[1:]:
                    return AppendResult(before.version, before.rows, 0, duplicate=True)
            rec = table.rec
            version = rec.version + 1
            new: list[PageEntry] = []
            totals = [list(t) for t in rec.totals]
            tx = self.io.begin()
            try:
                per = _rows_per_page(table.schema, columns)
                for start in range(0, nrows, per):
                    chunk = [c[start : start + per] for c in columns]
                    data, minis = encode(table.schema, chunk, rec.tid, rec.npages + len(new))
                    pages = -(-len(data) // PAGE_SIZE)
                    first = self._allocate(tx, pages)
                    self.io.write(first, 0, data)
                    entry = PageEntry(first, pages, len(chunk[0]), version, tuple(minis))
                    self.t["pages"].put(tx, page_key(rec.tid, rec.npages + len(new)), entry.pack())
                    new.append(entry)
                    for tot, m in zip(totals, minis, strict=True):
                        tot[0] += m.length
                        tot[1] += m.csv_bytes
                        tot[2] += m.json_bytes
                ms = now_ms()
                rec = rec._replace(version=version, rows=rec.rows + nrows, npages=rec.npages + len(new),
                                   engine_pages=rec.engine_pages + sum(e.pages for e in new),
                                   last_ingest_ms=ms if source is not None else rec.last_ingest_ms,
                                   totals=tuple(ColumnTotals(*t) for t in totals))
                self.t["tables"].put(tx, table.name, rec.pack())
                if source is not None:
                    name, size, crc = source
                    self.t["ingested"].put(tx, ingest_key(rec.tid, name),
                                           IngestRecord(version, nrows, size, crc, ms).pack())
            except BaseException as ex:
                self.io.abort(tx)
                raise self.io.failure(ex) or ex from None
            self.io.commit(tx, durable=True)
            table._committed(rec, new)
            return AppendResult(version, nrows, len(new))

    def _allocate(self, tx, pages: int) -> int:
        """A run of ``pages`` claimed for raw bytes; on a volume with tracks, a run of at least
        a track starts on a track boundary (a projection then reads whole tracks)."""
        track = self.io.raw.track_pages
        first = self.e.alloc_region(tx, pages, track if pages >= track > 1 else 1)
        self.io.raw.claim(first, pages)
        return first

    # ----- reading ------------------------------------------------------------------------------
    def column(self, table: Table, entry: PageEntry, col: int, where: str) -> list:
        """The values of column ``col`` in one PAX page: its minipage only, read and verified
        (a mirror's good copy replaces a damaged one)."""
        m = entry.minis[col]
        pos = entry.page * PAGE_SIZE + m.offset
        data = self.io.raw.read(pos, m.length)
        self.bytes_read += m.length
        try:
            check_minipage(data, m.crc, where)
        except PaxDamaged:
            found = self.io.raw.good_copy(pos, m.length, lambda d: minipage_ok(d, m.crc), where)
            if found is None:
                raise
            data = found[0]
        return decode_column(table.schema.columns[col].type, entry.rows, data, where)

    def placement(self) -> str:
        """How PAX pages sit on the volume (said in status)."""
        track = self.io.raw.track_pages
        return f"track-aligned ({track} pages per track)" if track > 1 else "flat"

    def close(self) -> None:
        self.io.close()


def _rows_per_page(schema: Schema, columns: Sequence[Sequence]) -> int:
    """Rows of one PAX page: about :data:`PAX_TARGET` bytes, from the rows' average width."""
    n = len(columns[0]) if columns else 0
    if not n:
        return 1
    width = 1
    sample = min(n, 256)
    for c, values in zip(schema.columns, columns, strict=True):
        if c.type.kind == "string":
            width += 4 + sum(len(v) for v in values[:sample] if v is not None) * 2 // sample
        else:
            width += _WIDTH.get(c.type.kind, 8)
    return max(1, min(MAX_PAGE_ROWS, PAX_TARGET // width))

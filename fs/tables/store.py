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

**Snapshots.** A filesystem snapshot freezes every table: :meth:`TableStore.freeze` writes each
table's record (its version) under ``\\0frozen`` + the snapshot's epoch, in the snapshot's own
create transaction; since pages are never rewritten, the frozen version is the prefix of the
table's first ``npages`` pages (:meth:`TableStore.frozen_table`). A table some snapshot froze
cannot be removed (EBUSY naming the snapshot; ZFS's "dataset has snapshots"): removing it
would free pages the snapshot shows. Deleting the snapshot drops its records
(:meth:`TableStore.thaw`, in the transaction that drops the snapshot's record).
"""

from __future__ import annotations

import errno
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import crc32c

from ..engine.page import PAGE_SIZE
from ..errors import FsError
from ..limits import check_name
from ..rawstore import EngineIO, has_trees, refuse_if_held
from .index import (
    ALL_TREES,
    DOOMED,
    FROZEN,
    KEY_NEXT_ID,
    PREFIX,
    TREES,
    U64,
    ColumnTotals,
    IngestRecord,
    PageEntry,
    RejectedRecord,
    TableRecord,
    frozen_key,
    ingest_key,
    page_key,
    table_range,
)
from .keys import MAX_KEY_BYTES, ROW_REF, key_bytes
from .pax import (
    MinipageOverlap,
    PaxDamaged,
    check_minipage,
    decode_column,
    encode_pieces,
    header_size,
    minipage_ok,
)
from .schema import Schema, parse_schema

PAX_TARGET = 1 << 20  # bytes of one PAX page (its rows are cut to about this much)
MAX_PAGE_ROWS = 1 << 16
PURGE_BATCH = 64  # PAX pages freed per transaction of a removal
_WIDTH = {"int32": 4, "date": 4, "bool": 1, "string": 12}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


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
        self.bytes_read = 0  # minipage bytes read from the volume by this process (views, lookups)
        self.removed = False
        self._snap = Snapshot(rec.version, rec.rows, tuple(pages), rec.totals)

    def snapshot(self) -> Snapshot:
        return self._snap

    def _committed(self, rec: TableRecord, new: list[PageEntry]) -> None:
        self.rec = rec
        self.pages += new
        self._snap = Snapshot(rec.version, rec.rows, tuple(self.pages), rec.totals)


class KeyConflict(ValueError):
    """A batch whose key values repeat one already in the table, or in the batch (``row``: the
    first offending row of the batch, 0-based)."""

    def __init__(self, row: int, reason: str):
        self.row = row
        super().__init__(reason)


class RowTooWide(FsError):
    """A batch with a row whose value cannot fit its minipage in one track row of a quadrangle
    volume (``row``: that row of the batch, 0-based); EFBIG to a caller that does not reject
    the file."""

    def __init__(self, row: int, limit: int):
        self.row = row
        super().__init__(errno.EFBIG, f"a value of this row does not fit one track row of the quadrangle volume "
                                      f"({limit} bytes per column and page)")


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
        self.t = self.io.trees(ALL_TREES, PREFIX) if has_tables(engine) else None  # made with the first table
        self._lock = threading.Lock()  # the set of tables, and every commit
        self.bytes_read = 0
        self.tables: dict[bytes, Table] = {}
        # snapshot epoch -> table name -> the record it froze; snapshot_name: the name of a live
        # snapshot by epoch (None: gone), set by whoever serves snapshots
        self.frozen: dict[int, dict[bytes, TableRecord]] = {}
        self.snapshot_name: Callable[[int], bytes | None] = lambda epoch: str(epoch).encode()
        self._frozen_tables: dict[tuple[int, bytes], Table] = {}
        for key, raw in self.t["tables"].items(FROZEN, FROZEN + b"\xff") if self.t is not None else ():
            epoch = U64.unpack(key[len(FROZEN) : len(FROZEN) + 8])[0]
            self.frozen.setdefault(epoch, {})[key[len(FROZEN) + 8 :]] = TableRecord.unpack(raw, f"frozen {key!r}")
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
        check_name(name, "table name")
        schema = parse_schema(schema_text)
        with self._lock:
            if name in self.tables:
                raise FsError(errno.EEXIST, f"table {name.decode(errors='replace')!r} exists")
            if self.t is None:
                self.t = self.io.trees(ALL_TREES, PREFIX)
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
            refuse_if_held("table", name, self.frozen, self.snapshot_name)
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
        for tree in ("pages", "keys", "rejected", "ingested"):
            while True:
                tx = self.io.begin()
                batch = list(itertools.islice(self.t[tree].items(lo, hi), PURGE_BATCH))
                for key, raw in batch:
                    self.t[tree].delete(tx, key)
                    if tree in ("pages", "rejected"):
                        e = PageEntry.unpack(raw) if tree == "pages" else RejectedRecord.unpack(raw)
                        if e.pages:
                            self.io.free(tx, e.page, e.pages)
                if not batch and tree == "ingested":
                    self.t["tables"].delete(tx, DOOMED + U64.pack(tid))
                self.io.commit(tx, durable=not batch)
                if not batch:
                    break

    # ----- snapshots ----------------------------------------------------------------------------
    def freeze(self, tx, epoch: int) -> None:
        """Record every table's current version for snapshot ``epoch``, in ``tx`` (the snapshot's
        create transaction: both or neither)."""
        with self._lock:
            if self.t is None:
                return
            got = {}
            for name, table in self.tables.items():
                self.t["tables"].put(tx, frozen_key(epoch, name), table.rec.pack())
                got[name] = table.rec
            self.frozen[epoch] = got

    def thaw(self, tx, epoch: int) -> None:
        """Drop snapshot ``epoch``'s records, in ``tx`` (the transaction dropping the snapshot)."""
        with self._lock:
            if self.t is None:
                return
            for key in list(self.t["tables"].keys(frozen_key(epoch, b""), frozen_key(epoch + 1, b""))):
                self.t["tables"].delete(tx, key)
            self.frozen.pop(epoch, None)
            for k in [k for k in self._frozen_tables if k[0] == epoch]:
                del self._frozen_tables[k]

    def frozen_names(self, epoch: int) -> list[bytes]:
        return sorted(self.frozen.get(epoch, {}))

    def frozen_table(self, epoch: int, name: bytes) -> Table:
        """Table ``name`` as snapshot ``epoch`` froze it: its record then, the prefix of its pages
        that version had (ENOENT: the snapshot held no such table)."""
        self._lock.acquire()
        try:
            got = self._frozen_tables.get((epoch, name))
            if got is None:
                rec = self.frozen.get(epoch, {}).get(name)
                live = self.tables.get(name)
                if rec is None or live is None or live.rec.tid != rec.tid:
                    raise FsError(errno.ENOENT, f"snapshot {epoch} holds no table {name.decode(errors='replace')!r}")
                got = self._frozen_tables[(epoch, name)] = Table(name, rec, live.pages[: rec.npages])
            return got
        finally:
            self._lock.release()

    def live_table(self, name: bytes) -> Table | None:
        return self.tables.get(name)

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
            keys = self._keys(table, columns) if table.schema.key else None
            version = rec.version + 1
            new: list[PageEntry] = []
            totals = [list(t) for t in rec.totals]
            tx = self.io.begin()
            try:
                per = self._rows_per_page(table.schema, columns)
                start = 0
                while start < nrows:
                    chunk = [c[start : start + per] for c in columns]
                    try:
                        entry = self._write_page(tx, table, chunk, rec.npages + len(new), version)
                    except MinipageOverlap:
                        if per == 1:
                            raise RowTooWide(start, self.io.raw.quad_rows.pages * PAGE_SIZE) from None
                        per = max(1, len(chunk[0]) // 2)
                        continue
                    self.t["pages"].put(tx, page_key(rec.tid, rec.npages + len(new)), entry.pack())
                    new.append(entry)
                    if keys is not None:
                        seq = rec.npages + len(new) - 1
                        for row, k in enumerate(keys[start : start + len(chunk[0])]):
                            self.t["keys"].put(tx, k, ROW_REF.pack(seq, row))
                    for tot, m in zip(totals, entry.minis, strict=True):
                        tot[0] += m.length
                        tot[1] += m.csv_bytes
                        tot[2] += m.json_bytes
                    start += len(chunk[0])
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

    def _write_page(self, tx, table: Table, chunk: list[Sequence], seq: int, version: int) -> PageEntry:
        """Encode one PAX page and write it into freshly allocated raw pages. On a quadrangle
        volume minipage ``c`` starts on the ``c``-th track row after the header: a projection
        then reads only its columns' rows (tracks), and the first blocks of a page's minipages
        are one quadrangle column, read as one semi-sequential batch. Elsewhere they are packed
        one after another. :class:`MinipageOverlap` when the rows do not fit."""
        schema, quad = table.schema, self.io.raw.quad_rows
        ncols = len(schema.columns)
        head_pages = -(-header_size(ncols) // PAGE_SIZE)
        if quad is None:
            pieces, minis = encode_pieces(schema, chunk, table.rec.tid, seq)
            pages = -(-max(at + len(data) for at, data in pieces) // PAGE_SIZE)
            first = self._allocate(tx, pages)
        else:
            # room for the header, up to a row to reach a row boundary, then a row per column
            pages = head_pages + quad.pages - 1 + ncols * quad.pages
            row_bytes = quad.pages * PAGE_SIZE
            head = head_pages * PAGE_SIZE  # does each minipage fit its row? (checked before allocating)
            encode_pieces(schema, chunk, table.rec.tid, seq, [head + c * row_bytes for c in range(ncols)],
                          head + ncols * row_bytes)
            first = self._allocate(tx, pages)
            lead = (quad.phase - (first + head_pages)) % quad.pages + head_pages  # pages before row 0
            pieces, minis = encode_pieces(schema, chunk, table.rec.tid, seq,
                                          [(lead + c * quad.pages) * PAGE_SIZE for c in range(ncols)])
        for at, data in pieces:
            self.io.write(first, at, data)
        return PageEntry(first, pages, len(chunk[0]), version, tuple(minis))

    def _rows_per_page(self, schema: Schema, columns: Sequence[Sequence]) -> int:
        """Rows of one PAX page: about :data:`PAX_TARGET` bytes, or on a quadrangle volume as many
        as let the widest column's minipage fill one track row."""
        widths = _widths(schema, columns)
        quad = self.io.raw.quad_rows
        if quad is None:
            return max(1, min(MAX_PAGE_ROWS, PAX_TARGET // (1 + sum(widths))))
        return max(1, min(MAX_PAGE_ROWS, (quad.pages * PAGE_SIZE - 64) * 8 // (8 * max(widths) + 1)))

    def _keys(self, table: Table, columns: Sequence[Sequence]) -> list[bytes]:
        """The batch's key bytes; :class:`KeyConflict` for a repeated or too long key."""
        keys = key_bytes(table.schema, table.rec.tid, columns)
        names = ",".join(table.schema.columns[k].name for k in table.schema.key)
        seen: set[bytes] = set()
        for row, k in enumerate(keys):
            if len(k) > MAX_KEY_BYTES + 8:
                raise KeyConflict(row, f"the key ({names}) takes {len(k) - 8} bytes (limit {MAX_KEY_BYTES})")
            if k in seen or self.t["keys"].get(k) is not None:
                raise KeyConflict(row, f"key ({names}) = ({self._key_text(table, columns, row)}) is already "
                                       f"{'in this file' if k in seen else 'in the table'}")
            seen.add(k)
        return keys

    @staticmethod
    def _key_text(table: Table, columns: Sequence[Sequence], row: int) -> str:
        return ",".join(str(columns[k][row]) for k in table.schema.key)

    def find(self, table: Table, key: bytes) -> tuple[PageEntry, int] | None:
        """The PAX page and row holding key ``key`` (from :func:`key_bytes`), if any."""
        raw = self.t["keys"].get(key) if self.t is not None else None
        if raw is None:
            return None
        seq, row = ROW_REF.unpack(raw)
        pages = table.snapshot().pages
        return (pages[seq], row) if seq < len(pages) else None  # (an append not yet committed)

    def _allocate(self, tx, pages: int) -> int:
        """A run of ``pages`` claimed for raw bytes; on a volume with tracks, a run of at least
        a track starts on a track boundary (a projection then reads whole tracks)."""
        track = self.io.raw.track_pages
        first = self.e.alloc_region(tx, pages, track if pages >= track > 1 else 1)
        self.io.raw.claim(first, pages)
        return first

    # ----- rejected files -----------------------------------------------------------------------
    def reject(self, table: Table, name: bytes, data: bytes, error: str) -> RejectedRecord:
        """Keep a file an ingest refused, and why, in one durable transaction (its bytes in fresh
        raw pages); it replaces an earlier rejected file of that name."""
        key = ingest_key(table.rec.tid, name)
        with self._lock:
            if table.removed:
                raise FsError(errno.ENOENT, f"table {table.name.decode(errors='replace')!r} was removed")
            tx = self.io.begin()
            try:
                old = self.t["rejected"].get(key)
                if old is not None:
                    self._free_rejected(tx, RejectedRecord.unpack(old))
                pages = -(-len(data) // PAGE_SIZE)
                first = self._allocate(tx, pages) if pages else 0
                if pages:
                    self.io.write(first, 0, data)
                rec = RejectedRecord(first, pages, len(data), crc32c.crc32c(data), now_ms(),
                                     RejectedRecord.DATA | RejectedRecord.ERROR, error)
                self.t["rejected"].put(tx, key, rec.pack())
            except BaseException as ex:
                self.io.abort(tx)
                raise self.io.failure(ex) or ex from None
            self.io.commit(tx, durable=True)
            return rec

    def rejected(self, table: Table) -> list[tuple[bytes, RejectedRecord]]:
        """(file name, record) of each rejected file of ``table``, by name."""
        lo, hi = table_range(table.rec.tid)
        return [(k[8:], RejectedRecord.unpack(v)) for k, v in self.t["rejected"].items(lo, hi)]

    def rejected_bytes(self, rec: RejectedRecord, where: str) -> bytes:
        """A rejected file's bytes, verified (a mirror's good copy replaces a damaged one; EIO
        without one)."""
        pos = rec.page * PAGE_SIZE
        data = self.io.raw.read(pos, rec.size) if rec.size else b""
        if crc32c.crc32c(data) == rec.crc:
            return data
        found = self.io.raw.good_copy(pos, rec.size, lambda d: crc32c.crc32c(d) == rec.crc, where)
        if found is None:
            raise PaxDamaged(f"{where}: checksum mismatch")
        return found[0]

    def forget_rejected(self, table: Table, name: bytes, part: int) -> None:
        """The user removed ``NAME`` (:attr:`RejectedRecord.DATA`: its pages are freed) or
        ``NAME.error``; the record goes with the last of the two."""
        key = ingest_key(table.rec.tid, name)
        with self._lock:
            if table.removed:
                return
            raw = self.t["rejected"].get(key)
            if raw is None:
                return
            rec = RejectedRecord.unpack(raw)
            tx = self.io.begin()
            try:
                if part & RejectedRecord.DATA:
                    self._free_rejected(tx, rec)
                    rec = rec._replace(page=0, pages=0, size=0, crc=0)
                rec = rec._replace(parts=rec.parts & ~part)
                if rec.parts:
                    self.t["rejected"].put(tx, key, rec.pack())
                else:
                    self.t["rejected"].delete(tx, key)
            except BaseException as ex:
                self.io.abort(tx)
                raise self.io.failure(ex) or ex from None
            self.io.commit(tx, durable=True)

    def _free_rejected(self, tx, rec: RejectedRecord) -> None:
        if rec.pages:
            self.io.free(tx, rec.page, rec.pages)

    # ----- reading ------------------------------------------------------------------------------
    def column(self, table: Table, entry: PageEntry, col: int, where: str) -> list:
        """The values of column ``col`` in one PAX page: its minipage only, read and verified
        (a mirror's good copy replaces a damaged one)."""
        m = entry.minis[col]
        pos = entry.page * PAGE_SIZE + m.offset
        data = self.io.raw.read(pos, m.length)
        self.bytes_read += m.length
        table.bytes_read += m.length
        return decode_column(table.schema.columns[col].type, entry.rows, self._verified(pos, m, data, where), where)

    def columns(self, table: Table, entry: PageEntry, cols: Sequence[int], where: str) -> list[list]:
        """The values of columns ``cols`` in one PAX page: their minipages only, read as one
        batch (on a quadrangle volume each disk reads its tracks of them in one go) and each
        verified (a mirror's good copy replaces a damaged one)."""
        base = entry.page * PAGE_SIZE
        minis = [entry.minis[c] for c in cols]
        datas = self.io.raw.read_batch([(base + m.offset, m.length) for m in minis])
        out = []
        for c, m, data in zip(cols, minis, datas, strict=True):
            self.bytes_read += m.length
            table.bytes_read += m.length
            name = f"{where}: column {table.schema.columns[c].name}"
            out.append(decode_column(table.schema.columns[c].type, entry.rows,
                                     self._verified(base + m.offset, m, data, name), name))
        return out

    def row(self, table: Table, entry: PageEntry, row: int, where: str) -> list:
        """Every column's value in row ``row`` of one PAX page (a lookup by key): the page's
        minipages read as one batch — on a quadrangle volume one semi-sequential batch per disk —
        each verified (a mirror's good copy replaces a damaged one)."""
        base = entry.page * PAGE_SIZE
        datas = self.io.raw.read_batch([(base + m.offset, m.length) for m in entry.minis])
        out = []
        for c, (m, data) in enumerate(zip(entry.minis, datas, strict=True)):
            self.bytes_read += m.length
            table.bytes_read += m.length
            name = f"{where}: column {table.schema.columns[c].name}"
            out.append(decode_column(table.schema.columns[c].type, entry.rows,
                                     self._verified(base + m.offset, m, data, name), name)[row])
        return out

    def _verified(self, pos: int, m, data: bytes, where: str) -> bytes:
        """``data`` (minipage ``m`` read at ``pos``) if it passes its checksum, else a good copy."""
        try:
            check_minipage(data, m.crc, where)
        except PaxDamaged:
            found = self.io.raw.good_copy(pos, m.length, lambda d: minipage_ok(d, m.crc), where)
            if found is None:
                raise
            return found[0]
        return data

    def placement(self) -> str:
        """How PAX pages sit on the volume (said in status)."""
        quad, track = self.io.raw.quad_rows, self.io.raw.track_pages
        if quad is not None:
            return f"quadrangle (d={quad.depth}, {quad.pages} pages per track row)"
        return f"track-aligned ({track} pages per track)" if track > 1 else "flat"

    def close(self) -> None:
        self.io.close()


def _widths(schema: Schema, columns: Sequence[Sequence]) -> list[int]:
    """Each column's bytes per row, estimated from the first rows."""
    n = len(columns[0]) if columns else 0
    sample = max(1, min(n, 256))
    out = []
    for c, values in zip(schema.columns, columns, strict=True):
        if c.type.kind == "string":
            out.append(4 + sum(len(v) for v in values[:sample] if v is not None) * 2 // sample)
        else:
            out.append(_WIDTH.get(c.type.kind, 8))
    return out

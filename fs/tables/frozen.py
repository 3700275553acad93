"""The tables a filesystem snapshot froze, as ``/.snapshots/NAME/tables/TABLE/``.

::

    tables/TABLE/schema        the schema text
    tables/TABLE/rows.csv      all columns, CSV with a header   } the rows of the version the
    tables/TABLE/rows.jsonl    all columns, JSON lines          } snapshot froze, and no more
    tables/TABLE/columns/      C.csv, C.jsonl, and any projection by path (``c3,c1.csv``)
    tables/TABLE/status.json   that version's rows, pages, bytes per column

Everything is read-only (``fs/subtrees/snapshots.py`` refuses changes with EROFS). The frozen
record (``TableStore.freeze``) names a version; the version is the prefix of the table's pages
(PAX pages are never rewritten) and the live table keeps them (it cannot be removed while a
snapshot holds it). There is no ``ingest/`` and no ``key/`` here.

**Numbers** are 32-bit, local to one snapshot (``snapshots.py`` puts the epoch above them):
:data:`BASE` (bit 31) | table id << 16 | kind; the ``tables`` folder itself is :data:`BASE`.
Kinds are ``fs/tables/subtree.py``'s (folder, files, single columns); a multi-column projection
is a hash of its columns and format in ``0x1000..0xffff`` (probed on a collision). A table id of
2^14 or more has no number here (EOVERFLOW: left out of listings).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat

from ..errors import FsError
from ..keys import Inode
from ..subtrees.protocol import BytesFile, OpenFile
from .render import FORMATS, ViewReader, view_size
from .store import Table
from .subtree import (
    COLUMNS,
    DIR,
    ROWS_CSV,
    ROWS_JSONL,
    SCHEMA,
    SINGLE,
    STATUS,
    TablesSubtree,
    ViewHandle,
)

BASE = 1 << 31
TID_SHIFT = 16
MAX_TID = (1 << 14) - 1
PROJ_LO, PROJ_HI = 0x1000, 0x10000
NAMES = {b"schema": SCHEMA, b"rows.csv": ROWS_CSV, b"rows.jsonl": ROWS_JSONL, b"status.json": STATUS,
         b"columns": COLUMNS}


def is_frozen(local: int) -> bool:
    """Is a snapshot-local number one of the frozen tables' (not a tree inode)?"""
    return bool(local & BASE)


class FrozenViewHandle(ViewHandle):
    """A view of a frozen version; it counts as a reader of the live table (whose pages it reads)."""

    def __init__(self, subtree: TablesSubtree, reader: ViewReader, live: Table) -> None:
        super().__init__(subtree, reader)
        self.live = live

    def release(self) -> None:
        self.subtree.release_view(self.live)


class FrozenTables:
    def __init__(self, subtree: TablesSubtree) -> None:
        self.subtree = subtree
        self._projections: dict[tuple[int, int], dict[int, tuple[tuple[int, ...], str]]] = {}

    @property
    def store(self):
        return self.subtree.store_for_snapshots()

    # ----- names ----------------------------------------------------------------------------------
    def _table(self, epoch: int, tid: int) -> Table:
        store = self.store
        if store is not None:
            for name, rec in store.frozen.get(epoch, {}).items():
                if rec.tid == tid:
                    return store.frozen_table(epoch, name)
        raise FsError(errno.ENOENT, f"snapshot {epoch} holds no table id {tid}")

    @staticmethod
    def _local(table: Table, kind: int) -> int:
        if table.rec.tid > MAX_TID:
            raise FsError(errno.EOVERFLOW, f"table id {table.rec.tid} has no number in a snapshot")
        return BASE | table.rec.tid << TID_SHIFT | kind

    def _split(self, epoch: int, local: int) -> tuple[Table | None, int]:
        tid, kind = (local & ~BASE) >> TID_SHIFT, local & (PROJ_HI - 1)
        return (None, DIR) if tid == 0 else (self._table(epoch, tid), kind)

    def parent(self, epoch: int, local: int) -> int | None:
        """The parent's local number (None: the snapshot's root)."""
        table, kind = self._split(epoch, local)
        if table is None:
            return None
        return BASE if kind == DIR else self._local(table, DIR)

    def lookup(self, epoch: int, parent: int, name: bytes) -> int:
        table, kind = self._split(epoch, parent)
        if table is None:
            store = self.store
            if store is None or name not in store.frozen.get(epoch, {}):
                raise FsError(errno.ENOENT, f"snapshot {epoch} holds no table {name!r}")
            return self._local(store.frozen_table(epoch, name), DIR)
        if kind == DIR:
            if name not in NAMES:
                raise FsError(errno.ENOENT, f"{name!r} not found")
            return self._local(table, NAMES[name])
        if kind == COLUMNS:
            return self._local(table, self._projection(epoch, table, name))
        raise FsError(errno.ENOTDIR, "not a directory")

    def _projection(self, epoch: int, table: Table, name: bytes) -> int:
        stem, _, fmt = name.decode(errors="replace").rpartition(".")
        if fmt not in FORMATS or not stem:
            raise FsError(errno.ENOENT, f"{name!r}: a view is COLUMNS.csv or COLUMNS.jsonl")
        try:
            cols = tuple(table.schema.index(c) for c in stem.split(","))
        except KeyError as ex:
            raise FsError(errno.ENOENT, f"{name!r}: no column {ex.args[0]!r}") from None
        if len(set(cols)) != len(cols):
            raise FsError(errno.ENOENT, f"{name!r} names a column twice")
        if len(cols) == 1 and SINGLE + 2 * cols[0] + 1 < PROJ_LO:
            return SINGLE + 2 * cols[0] + FORMATS.index(fmt)
        want = (cols, fmt)
        known = self._projections.setdefault((epoch, table.rec.tid), {})
        h = int.from_bytes(hashlib.blake2b(repr(want).encode(), digest_size=4).digest(), "big")
        kind = PROJ_LO + h % (PROJ_HI - PROJ_LO)
        while known.get(kind, want) != want:
            kind = PROJ_LO + (kind + 1 - PROJ_LO) % (PROJ_HI - PROJ_LO)
        known[kind] = want
        return kind

    def _view_of(self, epoch: int, table: Table, kind: int) -> tuple[tuple[int, ...], str] | None:
        ncols = len(table.schema.columns)
        if kind == ROWS_CSV:
            return tuple(range(ncols)), "csv"
        if kind == ROWS_JSONL:
            return tuple(range(ncols)), "jsonl"
        if SINGLE <= kind < min(SINGLE + 2 * ncols, PROJ_LO):
            return ((kind - SINGLE) // 2,), FORMATS[(kind - SINGLE) % 2]
        if kind >= PROJ_LO:
            return self._projections.get((epoch, table.rec.tid), {}).get(kind)
        return None

    def readdir(self, epoch: int, local: int, after: int) -> list[tuple[bytes, int, int]]:
        """Entries (name, local number, cookie) past ``after``."""
        table, kind = self._split(epoch, local)
        if table is None:
            store = self.store
            out = []
            for name in store.frozen_names(epoch) if store is not None else ():
                try:
                    t = store.frozen_table(epoch, name)
                    out.append((name, self._local(t, DIR), t.rec.tid))
                except FsError:  # (no number: left out)
                    continue
        elif kind == DIR:
            out = [(n, self._local(table, k), k + 1) for n, k in NAMES.items()]
        elif kind == COLUMNS:
            out = [(f"{c.name}.{fmt}".encode(), self._local(table, SINGLE + 2 * i + f), SINGLE + 2 * i + f)
                   for i, c in enumerate(table.schema.columns) for f, fmt in enumerate(FORMATS)
                   if SINGLE + 2 * i + f < PROJ_LO]
        else:
            raise FsError(errno.ENOTDIR, "not a directory")
        return sorted((e for e in out if e[2] > after), key=lambda e: e[2])

    # ----- attributes and files -------------------------------------------------------------------
    def attrs(self, epoch: int, local: int, ino: int, time_ns: int) -> Inode:
        table, kind = self._split(epoch, local)
        if table is None or kind in (DIR, COLUMNS):
            return Inode(ino, stat.S_IFDIR | 0o555, 0, 0, 2, atime_ns=time_ns, mtime_ns=time_ns, ctime_ns=time_ns,
                         crtime_ns=time_ns)
        size = len(self._bytes(epoch, table, kind)) if kind in (SCHEMA, STATUS) else self._view_size(epoch, table,
                                                                                                      kind)
        return Inode(ino, stat.S_IFREG | 0o444, 0, 0, 1, size=size, atime_ns=time_ns, mtime_ns=time_ns,
                     ctime_ns=time_ns, crtime_ns=time_ns, blocks=(size + 511) // 512)

    def _view_size(self, epoch: int, table: Table, kind: int) -> int:
        view = self._view_of(epoch, table, kind)
        if view is None:
            raise FsError(errno.ENOENT, f"no view {kind:#x} of table {table.name!r}")
        return view_size(table.schema, table.snapshot(), *view)

    def _bytes(self, epoch: int, table: Table, kind: int) -> bytes:
        if kind == SCHEMA:
            return (table.schema.text() + "\n").encode()
        rec = table.rec
        doc = {"table": table.name.decode(errors="replace"), "state": "frozen", "snapshot_id": epoch,
               "schema": table.schema.text(), "version": rec.version, "rows": rec.rows, "pax_pages": rec.npages,
               "engine_pages": rec.engine_pages,
               "bytes": {c.name: {"stored": t.stored, "csv": t.csv_bytes, "json": t.json_bytes}
                         for c, t in zip(table.schema.columns, rec.totals, strict=True)},
               "created_ms": rec.created_ms, "last_ingest_ms": rec.last_ingest_ms or None}
        return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()

    def open(self, epoch: int, local: int, flags: int) -> OpenFile:
        table, kind = self._split(epoch, local)
        if table is None or kind in (DIR, COLUMNS):
            raise FsError(errno.EISDIR, "a directory")
        if flags & (os.O_WRONLY | os.O_RDWR) or flags & os.O_TRUNC:
            raise FsError(errno.EROFS, "a snapshot is read-only")
        if kind in (SCHEMA, STATUS):
            return BytesFile(self._bytes(epoch, table, kind))
        view = self._view_of(epoch, table, kind)
        if view is None:
            raise FsError(errno.ENOENT, f"no view {kind:#x} of table {table.name!r}")
        reader = ViewReader(self.store, table, table.snapshot(), view[0], view[1],
                            f"snapshot {epoch}: table {table.name.decode(errors='replace')}")
        live = self.subtree.hold_reader(table.name)
        return FrozenViewHandle(self.subtree, reader, live)

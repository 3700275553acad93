"""``/tables``: every table of the filesystem as a folder of files.

::

    /tables/NAME/schema        the schema text (written once after ``mkdir``: creates the table)
    /tables/NAME/rows.csv      all columns, CSV with a header row   } read-only views of the
    /tables/NAME/rows.jsonl    all columns, JSON lines              } table version at open
    /tables/NAME/columns/      C.csv and C.jsonl per column listed; any projection by path:
                               ``c3,c1.csv``, ``c2,c1.jsonl`` (columns in the order named)
    /tables/NAME/key/V1,V2     the row whose key is V1,V2 (CSV with a header; tables with a key)
    /tables/NAME/status.json   rows, pages, bytes per column, version, ingests, rejections
    /tables/NAME/ingest/       files to append (see ``staging``): a file closed there, or
                               renamed into it, is parsed and appended whole in one durable
                               transaction, then disappears; ``_`` and ``.`` names (Spark's
                               ``_SUCCESS``, Hadoop's ``.crc`` files) are accepted and dropped;
                               a malformed file goes to ``ingest/.rejected/`` with ``NAME.error``

The table store opens at the first use of a table — a name looked up or listed in ``/tables``
when the engine holds tables, or the first table made — not at mount: a filesystem that never
uses tables pays nothing for them (as ``/queues``).

``mkdir /tables/NAME`` makes a folder holding only ``schema`` and ``status.json`` until a valid
schema is written (a bad one: EINVAL, nothing created, the reason in ``status.json``);
``rmdir /tables/NAME`` removes the table and gives its space back (EBUSY while a view is open).

**Exactly once.** An ingest records the file's name, size and crc32c in the same transaction as
its rows; the same file arriving again (a writer retrying a close whose answer a crash lost) is
recognised and dropped. A view's size at ``stat`` is exact for the current version and computed
without a scan; an open view keeps its version. Views only grow by appends, so every version's
bytes start with the bytes of every earlier one.

**Inode numbers**: a table's folder and files are ``slot << 24 | kind`` with the table's id as
its slot (stable across remounts); a folder made by ``mkdir`` whose schema is not written yet
has a slot above :data:`PENDING_SLOT` (and keeps it, beside its id, until the mount stops). A
projection's number is a hash of its columns and format (probed on a collision), a staged file's
a number of this mount (staged files do not outlive it).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import crc32c

from ..errors import FsError
from ..keys import Inode
from ..limits import check_name
from ..subtrees.protocol import LOCAL_MASK, TOP, BytesFile, Caller, OpenFile, Subtree, dense_seek, subtree_ino
from .index import RejectedRecord
from .ingest import IngestError, parse_file
from .keys import key_bytes
from .render import FORMATS, ViewReader, render_row, view_size
from .schema import SchemaError
from .staging import Node, StoredNode, now_ns
from .store import KeyConflict, RowTooWide, Table, TableStore, has_tables
from .values import text_parser

log = logging.getLogger("traxfs.tables")

TAG = 5
SLOT_SHIFT = 24
KIND_MASK = (1 << SLOT_SHIFT) - 1
PENDING_SLOT = 1 << 23
DIR, SCHEMA, ROWS_CSV, ROWS_JSONL, STATUS, COLUMNS, INGEST, REJECTED, KEYS = range(9)
SINGLE = 0x100  # + 2·column + format: one column's view
STAGED = 0x1000  # .. KEYED: staged files and folders of this mount
KEYED = 0x600000  # .. PROJECTION: key/V1,V2 files by hash
PROJECTION = 0x800000  # .. KIND_MASK: projections by hash
FIXED_NAMES = {b"schema": SCHEMA, b"rows.csv": ROWS_CSV, b"rows.jsonl": ROWS_JSONL, b"status.json": STATUS,
               b"columns": COLUMNS, b"ingest": INGEST, b"key": KEYS}
REJECTED_NAME = b".rejected"
RECENT = 16  # ingests and rejections status.json lists
KEYED_KEPT = 4096  # rows found by key kept rendered per table


@dataclass(eq=False)
class Entry:
    """A table's folder in this mount (a created table, or a ``mkdir`` waiting for its schema)."""

    name: bytes
    slot: int  # its first slot in this mount (a readdir cookie in /tables)
    table: Table | None = None
    error: str | None = None  # the last schema refused
    schema_buf: bytearray = field(default_factory=bytearray)
    created_ns: int = field(default_factory=now_ns)
    nodes: dict[int, Node] = field(default_factory=dict)  # staged nodes by kind number
    projections: dict[int, tuple[tuple[int, ...], str]] = field(default_factory=dict)
    keyed: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)  # kind -> (name, the row as CSV)
    next_staged: int = STAGED
    ingests: list[dict] = field(default_factory=list)  # recent, newest last
    rejections: list[dict] = field(default_factory=list)
    ingest_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.nodes[INGEST] = Node(INGEST, b"ingest", None, stat.S_IFDIR | 0o777, 0, 0, children={})
        self.nodes[REJECTED] = Node(REJECTED, REJECTED_NAME, self.nodes[INGEST], stat.S_IFDIR | 0o755, 0, 0,
                                    children={})
        self.nodes[INGEST].children[REJECTED_NAME] = self.nodes[REJECTED]


class TablesSubtree(Subtree):
    name = b"tables"
    tag = TAG

    def __init__(self, engine) -> None:
        self._engine = engine
        self._store: TableStore | None = None  # opened at the first use of a table (see _load)
        self._lock = threading.Lock()
        self._entries: dict[bytes, Entry] = {}
        self._slots: dict[int, Entry] = {}
        self._next_pending = PENDING_SLOT
        self.started_ns = now_ns()

    # ----- the store, opened when first needed --------------------------------------------------
    @property
    def opened(self) -> bool:
        """Is the table store open (its tables read)? Not before /tables is first used."""
        return self._store is not None

    @property
    def store(self) -> TableStore:
        """The table store, opened now if it was not (tools and tests; the subtree's own code
        holds ``_lock`` and uses :meth:`_open`)."""
        with self._lock:
            return self._open()

    def _load(self) -> None:
        """Before answering for the names in /tables (``_lock`` held): read the stored tables
        if there are any — a filesystem that never made a table opens nothing."""
        if self._store is None and has_tables(self._engine):
            self._open()

    def _open(self) -> TableStore:
        """The store, opened (``_lock`` held), with an entry for each of its tables."""
        if self._store is None:
            store = TableStore(self._engine)
            store.snapshot_name = self._snapshot_name
            self._store = store
            for name in store.names():
                table = store.get(name)
                entry = Entry(name, table.rec.tid, table)
                self._add(entry)
                for fname, rec in store.rejected(table):
                    self._add_rejected(entry, fname, rec.error, rec, None)
                entry.rejections = sorted(entry.rejections, key=lambda r: r["at"])[-RECENT:]
        return self._store

    def _add_rejected(self, entry: Entry, name: bytes, why: str, rec: RejectedRecord | None,
                      data: bytes | None) -> None:
        """``ingest/.rejected/NAME`` and ``NAME.error`` (``_lock`` held): kept by the store
        (``rec``: the parts it still has), or in this mount's memory only (``data``: the store
        could not keep it). ``data`` None: found at open (the status lists it then)."""
        rejected = entry.nodes[REJECTED]
        where = f"table {entry.name.decode(errors='replace')}: rejected file {name.decode(errors='replace')!r}"
        for n, part in ((name, RejectedRecord.DATA), (name + b".error", RejectedRecord.ERROR)):
            if rec is not None and not rec.parts & part:
                continue
            if part == RejectedRecord.DATA and rec is not None:
                f: Node = StoredNode(entry.next_staged, n, rejected, stat.S_IFREG | 0o444, 0, 0, size=rec.size,
                                     load=lambda rec=rec: self._store.rejected_bytes(rec, where))
            else:
                f = Node(entry.next_staged, n, rejected, stat.S_IFREG | 0o444, 0, 0)
                f.write(0, data if part == RejectedRecord.DATA else
                        f"{name.decode(errors='replace')}: {why}\n".encode())
            if rec is not None:
                f.kept, f.rejected_of = part, name
                f.mtime_ns = f.ctime_ns = rec.time_ms * 1_000_000
            entry.next_staged += 1
            entry.nodes[f.local] = f
            rejected.children[n] = f
        if data is None:
            entry.rejections.append({"file": name.decode(errors="replace"), "error": why, "at": rec.time_ms / 1000})

    def _add(self, entry: Entry) -> None:
        self._entries[entry.name] = entry
        self._slots[entry.slot] = entry
        if entry.table is not None:
            self._slots[entry.table.rec.tid] = entry

    # ----- snapshots (fs/snapshot_store.py's holders; fs/tables/frozen.py serves them) ---------
    snapshots = None  # the SnapshotStore, set where both are made (names the snapshots holding a table)

    def prepare_snapshot(self) -> None:
        """Before a snapshot is taken or dropped (no lock of the filesystem held): the store open
        if there are tables, so :meth:`freeze` and :meth:`thaw` only write records."""
        with self._lock:
            self._load()

    def freeze(self, tx, epoch: int) -> None:
        if self._store is not None:
            self._store.freeze(tx, epoch)

    def thaw(self, tx, epoch: int) -> None:
        if self._store is not None:
            self._store.thaw(tx, epoch)

    def store_for_snapshots(self) -> TableStore | None:
        """The store if there are tables (None: there are none), opened now if need be."""
        with self._locked():
            self._load()
            return self._store

    def hold_reader(self, name: bytes) -> Table:
        """A frozen view opens: it reads the live table's pages, so it counts as its reader."""
        with self._lock:
            table = self._store.tables.get(name) if self._store is not None else None
            if table is None:
                raise FsError(errno.ENOENT, f"no table {name!r}")
            table.readers += 1
            return table

    def _snapshot_name(self, epoch: int) -> bytes | None:
        snap = self.snapshots.by_epoch(epoch) if self.snapshots is not None else None
        return None if snap is None else snap.name

    def close(self) -> None:
        for entry in self._entries.values():
            for node in entry.nodes.values():
                node.drop()
        if self._store is not None:
            self._store.close()

    # ----- numbers ------------------------------------------------------------------------------
    def _ino(self, entry: Entry, kind: int) -> int:
        slot = entry.table.rec.tid if entry.table is not None else entry.slot
        return subtree_ino(TAG, slot << SLOT_SHIFT | kind)

    def _split(self, ino: int) -> tuple[Entry | None, int]:
        """(entry, kind) of ``ino`` (entry None: the top)."""
        local = ino & LOCAL_MASK
        if local == TOP:
            return None, TOP
        entry = self._slots.get(local >> SLOT_SHIFT)
        if entry is None or self._entries.get(entry.name) is not entry:
            raise FsError(errno.ENOENT, f"inode {ino} does not exist (any more)")
        return entry, local & KIND_MASK

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The subtree's lock, held for the block."""
        self._lock.acquire()
        try:
            yield
        finally:
            self._lock.release()

    # ----- attributes ---------------------------------------------------------------------------
    def _dir(self, ino: int, mode: int = 0o755, t: int | None = None) -> Inode:
        t = t or self.started_ns
        return Inode(ino, stat.S_IFDIR | mode, 0, 0, 2, atime_ns=t, mtime_ns=t, ctime_ns=t, crtime_ns=t)

    def _file(self, ino: int, size: int, mode: int = 0o444, t: int | None = None) -> Inode:
        t = t or self.started_ns
        return Inode(ino, stat.S_IFREG | mode, 0, 0, 1, size=size, atime_ns=t, mtime_ns=t, ctime_ns=t, crtime_ns=t,
                     blocks=(size + 511) // 512)

    def _attrs(self, entry: Entry | None, kind: int) -> Inode:
        if entry is None:
            return self._dir(self.top_ino, 0o1777)
        ino = self._ino(entry, kind)
        table = entry.table
        changed = entry.created_ns
        if table is not None and table.rec.last_ingest_ms:
            changed = max(changed, table.rec.last_ingest_ms * 1_000_000)
        if kind == DIR:
            return self._dir(ino, 0o777, entry.created_ns)
        if kind == SCHEMA:
            if table is None:
                return self._file(ino, len(entry.schema_buf), 0o666, entry.created_ns)
            return self._file(ino, len(table.schema.text()) + 1, 0o444, entry.created_ns)
        if kind == STATUS:
            return self._file(ino, len(self._status(entry)), 0o444, changed)
        if table is None:
            raise FsError(errno.ENOENT, f"table {entry.name!r} has no schema yet")
        if kind == COLUMNS or kind == KEYS and table.schema.key:
            return self._dir(ino, 0o555, entry.created_ns)
        if KEYED <= kind < PROJECTION and kind in entry.keyed:
            return self._file(ino, len(entry.keyed[kind][1]), 0o444, entry.created_ns)
        view = self._view_of(entry, kind)
        if view is not None:
            cols, fmt = view
            return self._file(ino, view_size(table.schema, table.snapshot(), cols, fmt), 0o444, changed)
        node = entry.nodes.get(kind)
        if node is None or node.gone:
            raise FsError(errno.ENOENT, f"inode {ino} does not exist (any more)")
        return self._node_attrs(entry, node)

    def _node_attrs(self, entry: Entry, node: Node) -> Inode:
        ino = self._ino(entry, node.local)
        return Inode(ino, node.mode, node.uid, node.gid, 2 if node.is_dir else 1, size=node.size,
                     atime_ns=node.mtime_ns, mtime_ns=node.mtime_ns, ctime_ns=node.ctime_ns, crtime_ns=node.ctime_ns,
                     blocks=(node.size + 511) // 512)

    def _view_of(self, entry: Entry, kind: int) -> tuple[tuple[int, ...], str] | None:
        ncols = len(entry.table.schema.columns)
        if kind == ROWS_CSV:
            return tuple(range(ncols)), "csv"
        if kind == ROWS_JSONL:
            return tuple(range(ncols)), "jsonl"
        if SINGLE <= kind < SINGLE + 2 * ncols:
            return (((kind - SINGLE) // 2,), FORMATS[(kind - SINGLE) % 2])
        if kind >= PROJECTION:
            return entry.projections.get(kind)
        return None

    def getattr(self, ino: int, caller: Caller) -> Inode:
        with self._locked():
            entry, kind = self._split(ino)
            return self._attrs(entry, kind)

    def volatile(self, ino: int) -> bool:
        return ino & LOCAL_MASK != TOP

    # ----- names --------------------------------------------------------------------------------
    def lookup(self, parent: int, name: bytes, caller: Caller) -> Inode:
        with self._locked():
            entry, kind = self._split(parent)
            if entry is None:
                self._load()
                found = self._entries.get(name)
                if found is None:
                    raise FsError(errno.ENOENT, f"no table {name!r}")
                return self._attrs(found, DIR)
            if name == b"..":
                return self._up(entry, kind)
            return self._attrs(entry, self._child(entry, kind, name))

    def _up(self, entry: Entry, kind: int) -> Inode:
        if kind == DIR:
            return self._attrs(None, TOP)
        if kind in (COLUMNS, INGEST, KEYS):
            return self._attrs(entry, DIR)
        node = entry.nodes.get(kind)
        if node is None or node.parent is None:
            raise FsError(errno.ENOENT, "no parent")
        return self._attrs(entry, node.parent.local)

    def _child(self, entry: Entry, kind: int, name: bytes) -> int:
        if kind == DIR:
            child = FIXED_NAMES.get(name)
            if child is None or (entry.table is None and child not in (SCHEMA, STATUS)) or \
                    (child == KEYS and not entry.table.schema.key):
                raise FsError(errno.ENOENT, f"{name!r} not found")
            return child
        if kind == COLUMNS:
            return self._projection(entry, name)
        if kind == KEYS:
            return self._keyed(entry, name)
        node = entry.nodes.get(kind)
        if node is None or not node.is_dir:
            raise FsError(errno.ENOTDIR, "not a directory")
        child = node.children.get(name)
        if child is None:
            raise FsError(errno.ENOENT, f"{name!r} not found")
        return child.local

    def _projection(self, entry: Entry, name: bytes) -> int:
        """The kind number of the view ``columns/NAME`` (``c1,c2.csv``), made on first use."""
        stem, _, fmt = name.decode(errors="replace").rpartition(".")
        schema = entry.table.schema
        if fmt not in FORMATS or not stem:
            raise FsError(errno.ENOENT, f"{name!r}: a view is COLUMNS.csv or COLUMNS.jsonl")
        try:
            cols = tuple(schema.index(c) for c in stem.split(","))
        except KeyError as ex:
            raise FsError(errno.ENOENT, f"{name!r}: no column {ex.args[0]!r}") from None
        if len(set(cols)) != len(cols):
            raise FsError(errno.ENOENT, f"{name!r} names a column twice")
        if len(cols) == 1:
            return SINGLE + 2 * cols[0] + FORMATS.index(fmt)
        want = (cols, fmt)
        h = int.from_bytes(hashlib.blake2b(repr(want).encode(), digest_size=4).digest(), "big")
        kind = PROJECTION + h % (KIND_MASK + 1 - PROJECTION)
        while entry.projections.get(kind, want) != want:
            kind = PROJECTION + (kind + 1 - PROJECTION) % (KIND_MASK + 1 - PROJECTION)
        entry.projections[kind] = want
        return kind

    def _keyed(self, entry: Entry, name: bytes) -> int:
        """The kind number of ``key/V1,V2`` (the row whose key is those values, as CSV with a
        header), made on first use; ENOENT if no row has that key."""
        table = entry.table
        key = [table.schema.columns[k] for k in table.schema.key]
        parts = name.decode(errors="replace").split(",")
        if len(parts) != len(key):
            raise FsError(errno.ENOENT, f"{name!r}: the key has {len(key)} column(s) "
                                        f"({','.join(c.name for c in key)}), given as V1,V2,...")
        values: list[list] = [[] for _ in table.schema.columns]
        try:
            for c, k, text in zip(key, table.schema.key, parts, strict=True):
                values[k].append(text if c.type.kind == "string" else text_parser(c.type)(text))
        except (ValueError, OverflowError) as ex:
            raise FsError(errno.ENOENT, f"{name!r}: {ex}") from None
        h = int.from_bytes(hashlib.blake2b(name, digest_size=4).digest(), "big")
        kind = KEYED + h % (PROJECTION - KEYED)
        while kind in entry.keyed and entry.keyed[kind][0] != name:
            kind = KEYED + (kind + 1 - KEYED) % (PROJECTION - KEYED)
        if kind in entry.keyed:
            return kind
        found = self._store.find(table, key_bytes(table.schema, table.rec.tid, values)[0])
        if found is None:
            raise FsError(errno.ENOENT, f"no row with key {name!r}")
        page, row = found
        if len(entry.keyed) >= KEYED_KEPT:
            del entry.keyed[next(iter(entry.keyed))]  # the oldest: a later lookup renders it again
        entry.keyed[kind] = (name, render_row(self._store, table, page, row, f"table {entry.name!r}: key {name!r}"))
        return kind

    def readdir(self, ino: int, after: int, limit: int, caller: Caller) -> list[tuple[bytes, Inode, int]]:
        with self._locked():
            entry, kind = self._split(ino)
            if entry is None:
                self._load()
                items = sorted((e.slot, e.name, e) for e in self._entries.values())
                return [(name, self._attrs(e, DIR), slot) for slot, name, e in items if slot > after][:limit]
            if kind == DIR:
                names = [(k + 1, n, k) for n, k in FIXED_NAMES.items()
                         if (entry.table is not None or k in (SCHEMA, STATUS)) and
                         (k != KEYS or entry.table is not None and entry.table.schema.key)]
            elif kind == KEYS:
                names = []  # lookups only: key/V1,V2
            elif kind == COLUMNS:
                names = [(SINGLE + 2 * i + f + 1, f"{c.name}.{fmt}".encode(), SINGLE + 2 * i + f)
                         for i, c in enumerate(entry.table.schema.columns) for f, fmt in enumerate(FORMATS)]
            else:
                node = entry.nodes.get(kind)
                if node is None or not node.is_dir:
                    raise FsError(errno.ENOTDIR, "not a directory")
                names = sorted((c.local + 1, n, c.local) for n, c in node.children.items())
            return [(n, self._attrs(entry, k), cookie) for cookie, n, k in sorted(names) if cookie > after][:limit]

    # ----- the set of tables --------------------------------------------------------------------
    def create(self, parent: int, name: bytes, mode: int, caller: Caller, rdev: int = 0,
               target: bytes | None = None) -> Inode:
        with self._lock:
            entry, kind = self._split(parent)
            if entry is None:
                if not stat.S_ISDIR(mode):
                    raise FsError(errno.EPERM, "only folders (tables) can be made in /tables")
                check_name(name, "table name")
                self._load()
                if name in self._entries:
                    raise FsError(errno.EEXIST, f"table {name!r} exists")
                new = Entry(name, self._next_pending)
                self._next_pending += 1
                self._add(new)
                return self._attrs(new, DIR)
            if target is not None or not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise FsError(errno.EPERM, "only files and folders can be made here")
            parent_node = entry.nodes.get(kind) if entry.table is not None else None
            if parent_node is None or not parent_node.is_dir or kind == REJECTED:
                if kind in (DIR, COLUMNS, KEYS, REJECTED):
                    raise FsError(errno.EPERM, "files are made in ingest/ only")
                raise FsError(errno.ENOTDIR, "not a directory")
            if name in parent_node.children:
                raise FsError(errno.EEXIST, f"{name!r} exists")
            node = Node(entry.next_staged, name, parent_node, mode, caller.uid, caller.gid,
                        children={} if stat.S_ISDIR(mode) else None)
            entry.next_staged += 1
            entry.nodes[node.local] = node
            parent_node.children[name] = node
            return self._node_attrs(entry, node)

    def rmdir(self, parent: int, name: bytes, caller: Caller) -> None:
        with self._lock:
            entry, kind = self._split(parent)
            if entry is not None:
                node = self._staged_child(entry, kind, name)
                if not node.is_dir:
                    raise FsError(errno.ENOTDIR, f"{name!r} is not a directory")
                if node.children:
                    raise FsError(errno.ENOTEMPTY, f"{name!r} is not empty")
                if node.local == REJECTED:
                    raise FsError(errno.EPERM, "ingest/.rejected belongs to the table")
                self._forget(entry, node)
                return
            self._load()
            entry = self._entries.get(name)
            if entry is None:
                raise FsError(errno.ENOENT, f"no table {name!r}")
            if entry.table is not None:
                self._store.remove(name)  # EBUSY with open views; durable when it returns
            del self._entries[name]
            for node in entry.nodes.values():
                node.drop()

    def _staged_child(self, entry: Entry, kind: int, name: bytes) -> Node:
        parent = entry.nodes.get(kind)
        if parent is None or not parent.is_dir:
            raise FsError(errno.EPERM, "only entries of ingest/ can be removed")
        node = parent.children.get(name)
        if node is None:
            raise FsError(errno.ENOENT, f"{name!r} not found")
        return node

    def _forget(self, entry: Entry, node: Node, stored: bool = True) -> None:
        """``node`` leaves the tree (``_lock`` held); a rejected file's part the store keeps
        leaves the store too (``stored``)."""
        if stored and node.kept and entry.table is not None:
            self._store.forget_rejected(entry.table, node.rejected_of, node.kept)
        del node.parent.children[node.name]
        entry.nodes.pop(node.local, None)
        node.drop()

    def unlink(self, parent: int, name: bytes, caller: Caller) -> None:
        with self._lock:
            entry, kind = self._split(parent)
            if entry is None:
                raise FsError(errno.EISDIR, f"{name!r} is a table: rmdir removes it")
            node = self._staged_child(entry, kind, name)
            if node.is_dir:
                raise FsError(errno.EISDIR, f"{name!r} is a directory")
            self._forget(entry, node)

    def rename(self, old_parent: int, old_name: bytes, new_parent: int, new_name: bytes, flags: int,
               caller: Caller) -> None:
        with self._lock:
            entry, kind = self._split(old_parent)
            entry2, kind2 = self._split(new_parent)
            if entry is None or entry2 is not entry:
                raise FsError(errno.EXDEV if entry is not entry2 else errno.EPERM,
                              "tables cannot be renamed; files move only inside one table's ingest/")
            node = self._staged_child(entry, kind, old_name)
            if kind == REJECTED:
                raise FsError(errno.EPERM, "rejected files stay in ingest/.rejected (copy one out to retry it)")
            dest = entry.nodes.get(kind2)
            if dest is None or not dest.is_dir or kind2 == REJECTED or node.local == REJECTED:
                raise FsError(errno.EPERM, "files move only inside ingest/")
            anc = dest
            while anc is not None:
                if anc is node:
                    raise FsError(errno.EINVAL, "a folder cannot move into itself")
                anc = anc.parent
            old = dest.children.get(new_name)
            if old is not None and old is not node:
                if flags & 1:  # RENAME_NOREPLACE
                    raise FsError(errno.EEXIST, f"{new_name!r} exists")
                if old.is_dir != node.is_dir:
                    raise FsError(errno.EISDIR if old.is_dir else errno.ENOTDIR, f"{new_name!r} is of another type")
                if old.is_dir and old.children:
                    raise FsError(errno.ENOTEMPTY, f"{new_name!r} is not empty")
                self._forget(entry, old)
            del node.parent.children[node.name]
            node.name, node.parent = new_name, dest
            dest.children[new_name] = node
            node.ctime_ns = now_ns()
            arrived = kind2 == INGEST and not node.is_dir
        if arrived:
            self._ingest(entry, node)

    def setattr(self, ino: int, changes: dict, caller: Caller) -> Inode:
        with self._lock:
            entry, kind = self._split(ino)
            node = entry.nodes.get(kind) if entry is not None else None
            if node is None or kind in (INGEST, REJECTED):
                if entry is not None and kind == SCHEMA and entry.table is None and set(changes) <= {"size"}:
                    del entry.schema_buf[changes.get("size", 0):]
                    return self._attrs(entry, kind)
                if set(changes) <= {"atime_ns", "mtime_ns"}:
                    return self._attrs(entry, kind)  # (touch: accepted, nothing kept)
                raise FsError(errno.EPERM, "only ingest/'s files and folders can be changed")
            if "size" in changes:
                if node.parent is not None and node.parent.local == REJECTED:
                    raise FsError(errno.EPERM, "rejected files are read-only")
                if node.is_dir:
                    raise FsError(errno.EISDIR, "a directory has no size to set")
                node.truncate(changes["size"])
            if "mode" in changes:
                node.mode = stat.S_IFMT(node.mode) | changes["mode"] & 0o7777
            if "uid" in changes:
                node.uid = changes["uid"]
            if "gid" in changes:
                node.gid = changes["gid"]
            if "mtime_ns" in changes:
                node.mtime_ns = changes["mtime_ns"]
            node.ctime_ns = now_ns()
            return self._node_attrs(entry, node)

    # ----- files --------------------------------------------------------------------------------
    def open(self, ino: int, flags: int, caller: Caller) -> OpenFile:
        writing = flags & (os.O_WRONLY | os.O_RDWR)
        with self._locked():
            entry, kind = self._split(ino)
            if entry is None or kind in (DIR, COLUMNS, KEYS) or (entry.nodes.get(kind) is not None
                                                           and entry.nodes[kind].is_dir):
                raise FsError(errno.EISDIR, f"inode {ino} is a directory")
            if kind == SCHEMA:
                if entry.table is not None:
                    if writing:
                        raise FsError(errno.EACCES, "the schema of an existing table cannot change")
                    return BytesFile((entry.table.schema.text() + "\n").encode())
                if flags & os.O_TRUNC and writing:
                    entry.schema_buf.clear()
                return SchemaHandle(self, entry)
            if kind == STATUS:
                if writing:
                    raise FsError(errno.EACCES, "status.json is read-only")
                return BytesFile(self._status(entry))
            if entry.table is None:
                raise FsError(errno.ENOENT, f"table {entry.name!r} has no schema yet")
            if kind in entry.keyed:
                if writing:
                    raise FsError(errno.EACCES, "a row by key is read-only")
                return BytesFile(entry.keyed[kind][1])
            view = self._view_of(entry, kind)
            if view is not None:
                if writing:
                    raise FsError(errno.EACCES, "views are read-only: append through ingest/")
                table = entry.table
                reader = ViewReader(self._store, table, table.snapshot(), view[0], view[1],
                                    f"table {entry.name.decode(errors='replace')}")
                table.readers += 1
                return ViewHandle(self, reader)
            node = entry.nodes.get(kind)
            if node is None or node.gone:
                raise FsError(errno.ENOENT, f"inode {ino} does not exist (any more)")
            if writing and node.parent.local == REJECTED:
                raise FsError(errno.EACCES, "rejected files are read-only")
            if flags & os.O_TRUNC and writing:
                node.truncate(0)
            return StagedHandle(self, entry, node, bool(writing))

    def release_view(self, table: Table) -> None:
        with self._lock:
            table.readers -= 1

    # ----- ingest -------------------------------------------------------------------------------
    def _ingest(self, entry: Entry, node: Node) -> None:
        """A complete file in ``ingest/``: append its rows (or reject it), then it leaves."""
        with entry.ingest_lock:
            with self._lock:
                if node.gone or node.parent is not entry.nodes[INGEST]:
                    return
                name, data = node.name, node.contents()
            if _marker(name):
                self._done(entry, node, None)
                return
            try:
                columns = parse_file(entry.table.schema, name, data)
            except IngestError as ex:
                self._reject(entry, node, name, data, str(ex))
                return
            try:
                result = self._store.append(entry.table, columns, source=(name, len(data), crc32c.crc32c(data)))
            except (KeyConflict, RowTooWide) as ex:  # the file is refused whole, and says why
                self._reject(entry, node, name, data, f"row {ex.row + 1} (not counting the header): {ex}")
                return
            self._done(entry, node, {"file": name.decode(errors="replace"), "rows": result.rows,
                                     "bytes": len(data), "version": result.version, "duplicate": result.duplicate,
                                     "at": time.time()})

    def _done(self, entry: Entry, node: Node, record: dict | None) -> None:
        with self._lock:
            if not node.gone and node.parent is entry.nodes[INGEST]:
                self._forget(entry, node)
            if record is not None:
                entry.ingests = (entry.ingests + [record])[-RECENT:]

    def _reject(self, entry: Entry, node: Node, name: bytes, data: bytes, why: str) -> None:
        """A file refused whole: it moves to ``ingest/.rejected/`` with ``NAME.error``, both
        kept by the table store (one durable transaction) and there after a remount."""
        log.info("table %r: rejected %r: %s", entry.name, name, why)
        try:
            rec: RejectedRecord | None = self._store.reject(entry.table, name, data, why)
        except FsError as ex:  # (no room for it): this mount keeps it, as the staged files
            log.warning("table %r: rejected file %r kept in memory only: %s", entry.name, name, ex)
            rec = None
        with self._lock:
            if not node.gone and node.parent is entry.nodes[INGEST]:
                self._forget(entry, node)
            rejected = entry.nodes[REJECTED]
            for n in (name, name + b".error"):
                old = rejected.children.get(n)
                if old is not None:  # (the store's record of it was replaced, unless rec is None)
                    self._forget(entry, old, stored=rec is None)
            entry.rejections = (entry.rejections + [{"file": name.decode(errors="replace"), "error": why,
                                                     "at": time.time()}])[-RECENT:]
            self._add_rejected(entry, name, why, rec, data)

    def write_schema(self, entry: Entry, final: bool) -> None:
        """The schema text written so far: create the table when it is complete (at close, or a
        write ending in a newline that is not in the middle of a column list)."""
        with entry.ingest_lock:
            with self._lock:
                if entry.table is not None or not entry.schema_buf:
                    return
                text = entry.schema_buf.decode(errors="replace")
            if not final and (not text.endswith("\n") or text.rstrip().endswith(",")):
                return
            with self._lock:
                store = self._open()
            try:
                table = store.create(entry.name, text)
            except SchemaError as ex:
                with self._lock:
                    entry.error = str(ex)
                    entry.schema_buf.clear()
                raise FsError(errno.EINVAL, f"bad schema: {ex}") from None
            with self._lock:
                entry.table, entry.error = table, None
                entry.schema_buf.clear()
                self._slots[table.rec.tid] = entry

    # ----- status -------------------------------------------------------------------------------
    def _status(self, entry: Entry) -> bytes:
        doc: dict = {"table": entry.name.decode(errors="replace")}
        table = entry.table
        if table is None:
            doc["state"] = "waiting for a schema"
            if entry.error:
                doc["schema_error"] = entry.error
        else:
            rec = table.rec
            doc.update({
                "state": "ready", "schema": table.schema.text(), "version": rec.version, "rows": rec.rows,
                "pax_pages": rec.npages, "engine_pages": rec.engine_pages,
                "bytes": {c.name: {"stored": t.stored, "csv": t.csv_bytes, "json": t.json_bytes}
                          for c, t in zip(table.schema.columns, rec.totals, strict=True)},
                "created_ms": rec.created_ms, "last_ingest_ms": rec.last_ingest_ms or None,
                "placement": self._store.placement(), "volume_bytes_read": table.bytes_read,
                "ingests": entry.ingests,
                "rejected": entry.rejections,
            })
        return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


class ViewHandle(OpenFile):
    """A view of the table version at open."""

    direct_io = True

    def __init__(self, subtree: TablesSubtree, reader: ViewReader) -> None:
        self.subtree, self.reader = subtree, reader
        self._lock = threading.Lock()

    def read(self, off: int, size: int) -> bytes:
        with self._lock:
            return self.reader.read(off, size)

    def seek(self, off: int, whence: int) -> int:
        return dense_seek(off, whence, self.reader.size)

    def release(self) -> None:
        self.subtree.release_view(self.reader.table)


class SchemaHandle(OpenFile):
    direct_io = True

    def __init__(self, subtree: TablesSubtree, entry: Entry) -> None:
        self.subtree, self.entry = subtree, entry

    def read(self, off: int, size: int) -> bytes:
        with self.subtree._lock:
            return bytes(self.entry.schema_buf[off : off + size])

    def write(self, off: int, data: bytes) -> int:
        with self.subtree._lock:
            if self.entry.table is not None:
                raise FsError(errno.EEXIST, "the table exists: its schema cannot change")
            buf = self.entry.schema_buf
            if off > len(buf):
                buf.extend(bytes(off - len(buf)))
            buf[off : off + len(data)] = data
        self.subtree.write_schema(self.entry, final=False)
        return len(data)

    def flush_pending(self) -> bool:
        return self.entry.table is None and bool(self.entry.schema_buf)

    def flush(self) -> None:
        self.subtree.write_schema(self.entry, final=True)


class StagedHandle(OpenFile):
    """A file of ``ingest/``: written like any file; closed in ``ingest/`` itself, ingested."""

    direct_io = True

    def __init__(self, subtree: TablesSubtree, entry: Entry, node: Node, writing: bool) -> None:
        self.subtree, self.entry, self.node, self.writing = subtree, entry, node, writing

    def read(self, off: int, size: int) -> bytes:
        with self.subtree._lock:
            return self.node.read(off, size)

    def write(self, off: int, data: bytes) -> int:
        if not self.writing:
            raise FsError(errno.EBADF, "not open for writing")
        with self.subtree._lock:
            if self.node.gone:
                raise FsError(errno.ENOENT, "the file was ingested or removed")
            return self.node.write(off, bytes(data))

    def seek(self, off: int, whence: int) -> int:
        return dense_seek(off, whence, self.node.size)

    def _arrived(self) -> bool:
        return self.writing and not self.node.gone and self.node.parent is self.entry.nodes[INGEST]

    def flush_pending(self) -> bool:
        return self._arrived() and not _marker(self.node.name)

    def flush(self) -> None:
        """close(2) of a data file written in ``ingest/``: ingest it now, so the close answers
        with the file's fate (a marker waits for :meth:`release`: Hadoop chmods ``_SUCCESS``
        from a child process after the child closed its inherited descriptor)."""
        if self.flush_pending():
            self.subtree._ingest(self.entry, self.node)

    def release(self) -> None:
        if self._arrived() and _marker(self.node.name):
            self.subtree._ingest(self.entry, self.node)


def _marker(name: bytes) -> bool:
    """Names that are not rows: Spark's ``_SUCCESS``, Hadoop's ``.NAME.crc`` (dropped on arrival)."""
    return name.startswith((b"_", b"."))


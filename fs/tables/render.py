"""The views of a table version: CSV (with a header row) and JSON lines, of all columns or any
projection, their sizes known without reading a row.

A view's size is computed from the per-column totals the store adds up at append time (the
bytes each column's values print as, ``values``), so ``stat`` is exact and cheap and a byte
range split of the view (Spark) gives every row exactly once:

* CSV: the header ``c1,c2,...\\n``, then per row the fields joined by ``,`` and ``\\n``:
  header + Σ column CSV bytes + rows · columns;
* JSON lines: per row ``{"c1": v1, "c2": v2}\\n``: Σ (rows · (len(json name) + 2) + column JSON
  bytes) + rows · (3 + 2 · (columns − 1)).

A :class:`ViewReader` serves reads of one snapshot, rendering one PAX page at a time (the pages
its byte range touches), reading only the minipages of its columns.
"""

from __future__ import annotations

import bisect
import errno
import json
from collections.abc import Sequence

from ..errors import FsError
from .index import PageEntry
from .schema import Schema
from .store import Snapshot, Table, TableStore
from .values import printed_texts

FORMATS = ("csv", "jsonl")


def header(schema: Schema, cols: Sequence[int], fmt: str) -> bytes:
    return (",".join(schema.columns[c].name for c in cols) + "\n").encode() if fmt == "csv" else b""


def _keys_bytes(schema: Schema, cols: Sequence[int]) -> int:
    return sum(len(json.dumps(schema.columns[c].name)) + 2 for c in cols)


def body_size(schema: Schema, cols: Sequence[int], fmt: str, rows: int, csv_bytes: Sequence[int],
              json_bytes: Sequence[int]) -> int:
    """Bytes of ``rows`` rows whose columns print as the given totals (indexed by column)."""
    if not cols:
        return 0
    if fmt == "csv":
        return sum(csv_bytes[c] for c in cols) + rows * len(cols)
    return sum(json_bytes[c] for c in cols) + rows * (_keys_bytes(schema, cols) + 3 + 2 * (len(cols) - 1))


def view_size(schema: Schema, snap: Snapshot, cols: Sequence[int], fmt: str) -> int:
    """The size of a view of ``snap``, from its totals: no page read."""
    return len(header(schema, cols, fmt)) + body_size(schema, cols, fmt, snap.rows,
                                                      [t.csv_bytes for t in snap.totals],
                                                      [t.json_bytes for t in snap.totals])


def page_size(schema: Schema, entry: PageEntry, cols: Sequence[int], fmt: str) -> int:
    return body_size(schema, cols, fmt, entry.rows, [m.csv_bytes for m in entry.minis],
                     [m.json_bytes for m in entry.minis])


def render_page(store: TableStore, table: Table, entry: PageEntry, cols: Sequence[int], fmt: str,
                where: str) -> bytes:
    """The rows of one PAX page as the view prints them."""
    schema = table.schema
    texts = []
    for c, values in zip(cols, store.columns(table, entry, cols, where), strict=True):
        col = schema.columns[c]
        printed = printed_texts(col.type, values, fmt)
        if fmt != "csv":
            key = json.dumps(col.name) + ": "
            printed = [key + v for v in printed]
        texts.append(printed)
    if fmt == "csv":
        lines = map(",".join, zip(*texts, strict=True))
        out = ("\n".join(lines) + "\n").encode() if entry.rows else b""
    else:
        lines = ("{" + ", ".join(parts) + "}" for parts in zip(*texts, strict=True))
        out = ("\n".join(lines) + "\n").encode() if entry.rows else b""
    return out


class ViewReader:
    """Reads of one view of one snapshot (what an open of a view file returns)."""

    def __init__(self, store: TableStore, table: Table, snap: Snapshot, cols: Sequence[int], fmt: str, where: str):
        self.store, self.table, self.snap, self.cols, self.fmt, self.where = store, table, snap, list(cols), fmt, where
        self.head = header(table.schema, cols, fmt)
        self.ends = []  # end offset of each PAX page's rows in the view
        at = len(self.head)
        for e in snap.pages:
            at += page_size(table.schema, e, cols, fmt)
            self.ends.append(at)
        self.size = at
        self._cache: tuple[int, bytes] | None = None

    def _page(self, k: int) -> bytes:
        if self._cache is not None and self._cache[0] == k:
            return self._cache[1]
        e = self.snap.pages[k]
        data = render_page(self.store, self.table, e, self.cols, self.fmt, f"{self.where}: PAX page {k}")
        want = self.ends[k] - (self.ends[k - 1] if k else len(self.head))
        if len(data) != want:
            raise FsError(errno.EIO, f"{self.where}: PAX page {k} renders as {len(data)} bytes, its index says "
                                     f"{want}")
        self._cache = (k, data)
        return data

    def read(self, off: int, size: int) -> bytes:
        end = min(self.size, off + size)
        out = []
        if off < len(self.head):
            out.append(self.head[off:end])
            off = min(end, len(self.head))
        k = bisect.bisect_right(self.ends, off)
        while off < end and k < len(self.ends):
            start = self.ends[k - 1] if k else len(self.head)
            data = self._page(k)
            piece = data[off - start : end - start]
            out.append(piece)
            off += len(piece)
            k += 1
        return b"".join(out)


def render_row(store: TableStore, table: Table, entry: PageEntry, row: int, where: str) -> bytes:
    """One row of a PAX page as CSV with a header (a lookup by key): every column's minipage is
    read (as one batch) and verified, and the row's value taken."""
    schema = table.schema
    values = store.row(table, entry, row, where)
    fields = [printed_texts(col.type, [v], "csv")[0] for col, v in zip(schema.columns, values, strict=True)]
    return header(schema, range(len(schema.columns)), "csv") + (",".join(fields) + "\n").encode()

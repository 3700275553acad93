"""The table store's records in engine B+trees (catalog names ``btree:t.NAME``).

==========  ========================  =========================================================
tree        key                       value
==========  ========================  =========================================================
tables      name                      :class:`TableRecord`: id, creation, version, rows, pages,
                                      last ingest, schema text, per-column byte totals
            ``\\0next``                the next table id
            ``\\0doomed`` + id         a removed table whose pages are still being freed
pages       table id + sequence       :class:`PageEntry`: where a PAX page is, its rows, the
                                      table version that added it, its minipage directory
ingested    table id + file name      :class:`IngestRecord`: the file's size and crc32c, the
                                      version and rows it added (exactly-once ingest)
keys        table id + key bytes      the row's PAX page sequence number (u64) and row (u32),
                                      big-endian (tables with a key; ``keys.py``)
rejected    table id + file name      :class:`RejectedRecord`: a file refused by an ingest — its
                                      bytes (raw pages, crc32c), the reason, which of ``NAME``
                                      and ``NAME.error`` are still in ``ingest/.rejected``
==========  ========================  =========================================================

Keys are big-endian, so a table's entries are adjacent and in order. Names hold no NUL, so the
``\\0`` keys never collide with one. Records start with their version byte.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .pax import MiniPage

TREES = ("tables", "pages", "ingested")  # a store exists when these do
ALL_TREES = TREES + ("keys", "rejected")  # (made at the next open where missing)
PREFIX = "t"
RECORD_VERSION = 1
U64 = struct.Struct(">Q")
U64X2 = struct.Struct(">QQ")
KEY_NEXT_ID = b"\0next"
DOOMED = b"\0doomed"
_TABLE = struct.Struct("<BQQQQQQQI")
_TOTALS = struct.Struct("<QQQ")
_PAGE = struct.Struct("<BQIIQH")
_MINI = struct.Struct("<IIIQQ")
_INGEST = struct.Struct("<BQQQIQ")
_REJECTED = struct.Struct("<BQIQIQBI")


class ColumnTotals(NamedTuple):
    stored: int  # minipage bytes
    csv_bytes: int  # rendered CSV field bytes
    json_bytes: int  # rendered JSON value bytes


class TableRecord(NamedTuple):
    tid: int
    created_ms: int
    version: int  # commits so far (0: created, nothing appended)
    rows: int
    npages: int  # PAX pages
    engine_pages: int
    last_ingest_ms: int
    schema_text: str
    totals: tuple[ColumnTotals, ...]

    def pack(self) -> bytes:
        text = self.schema_text.encode()
        return (_TABLE.pack(RECORD_VERSION, self.tid, self.created_ms, self.version, self.rows, self.npages,
                            self.engine_pages, self.last_ingest_ms, len(text)) + text +
                b"".join(_TOTALS.pack(*t) for t in self.totals))

    @classmethod
    def unpack(cls, raw: bytes, where: str) -> TableRecord:
        if not raw or raw[0] != RECORD_VERSION:
            raise ValueError(f"{where}: table record version {raw[:1].hex() or 'missing'}; this traxfs reads "
                             f"version {RECORD_VERSION}")
        _, tid, created, version, rows, npages, epages, last, n = _TABLE.unpack_from(raw)
        at = _TABLE.size + n
        text = raw[_TABLE.size : at].decode()
        totals = tuple(ColumnTotals(*_TOTALS.unpack_from(raw, at + i * _TOTALS.size))
                       for i in range((len(raw) - at) // _TOTALS.size))
        return cls(tid, created, version, rows, npages, epages, last, text, totals)


class PageEntry(NamedTuple):
    page: int  # first engine page
    pages: int  # engine pages
    rows: int
    version: int  # the table version whose commit added it
    minis: tuple[MiniPage, ...]

    def pack(self) -> bytes:
        return (_PAGE.pack(RECORD_VERSION, self.page, self.pages, self.rows, self.version, len(self.minis)) +
                b"".join(_MINI.pack(*m) for m in self.minis))

    @classmethod
    def unpack(cls, raw: bytes) -> PageEntry:
        if not raw or raw[0] != RECORD_VERSION:
            raise ValueError(f"PAX page entry version {raw[:1].hex() or 'missing'}; this traxfs reads version "
                             f"{RECORD_VERSION}")
        _, page, pages, rows, version, n = _PAGE.unpack_from(raw)
        minis = tuple(MiniPage(*_MINI.unpack_from(raw, _PAGE.size + i * _MINI.size)) for i in range(n))
        return cls(page, pages, rows, version, minis)


class IngestRecord(NamedTuple):
    version: int
    rows: int
    size: int
    crc: int
    time_ms: int

    def pack(self) -> bytes:
        return _INGEST.pack(RECORD_VERSION, *self)

    @classmethod
    def unpack(cls, raw: bytes) -> IngestRecord:
        return cls(*_INGEST.unpack(raw)[1:])


class RejectedRecord(NamedTuple):
    """A rejected file: its bytes in ``pages`` raw pages from ``page`` (none when empty or
    removed), their size and crc32c, when, why, and which parts the user has not removed."""

    page: int
    pages: int
    size: int
    crc: int
    time_ms: int
    parts: int  # DATA | ERROR
    error: str

    DATA = 1  # NAME (the file's bytes)
    ERROR = 2  # NAME.error (the reason)

    def pack(self) -> bytes:
        text = self.error.encode()
        return _REJECTED.pack(RECORD_VERSION, self.page, self.pages, self.size, self.crc, self.time_ms, self.parts,
                              len(text)) + text

    @classmethod
    def unpack(cls, raw: bytes) -> RejectedRecord:
        if not raw or raw[0] != RECORD_VERSION:
            raise ValueError(f"rejected-file record version {raw[:1].hex() or 'missing'}; this traxfs reads "
                             f"version {RECORD_VERSION}")
        _, page, pages, size, crc, ms, parts, n = _REJECTED.unpack_from(raw)
        return cls(page, pages, size, crc, ms, parts, raw[_REJECTED.size : _REJECTED.size + n].decode())


def page_key(tid: int, seq: int) -> bytes:
    return U64X2.pack(tid, seq)


def ingest_key(tid: int, name: bytes) -> bytes:
    return U64.pack(tid) + name


def table_range(tid: int) -> tuple[bytes, bytes]:
    """(start, stop) of every key of table ``tid`` in ``pages`` and ``ingested``."""
    return U64.pack(tid), U64.pack(tid + 1)

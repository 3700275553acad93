"""The PAX page format (version 2): the same rows of every column, one minipage per column.

A PAX page is a run of raw engine pages::

    header   magic ``TRAXPAX1``, version u16, columns u16, rows u32, table id u64,
             page sequence number u64 (0, 1, 2, ... in the table), crc32c of the header u32
             (computed with the field zero; the directory included), 4 bytes reserved
    directory  per column: minipage offset u32, length u32, crc32c u32
    minipages  each 8-byte aligned, in column order, where the directory says: version 2 lets
               them leave gaps (on a quadrangle volume the store starts minipage c on the
               c-th track row of the page, so column c of every page lies on its own tracks
               and a page's minipages are one semi-sequential batch); version 1 packed them
               one after another, and is still read:
               NULL bitmap  ceil(rows/8) bytes (bit set: NULL), padded to 8 bytes
               values       int32/date: 4 bytes, int64/decimal/timestamp/float64: 8 bytes,
                            bool: 1 byte — little-endian, one per row (0 for a NULL);
                            string: rows+1 offsets u32 into the UTF-8 bytes that follow

Each minipage carries its own checksum, and the store's index keeps a copy of the directory, so
a projection reads (and verifies) only the minipages of its columns. Everything little-endian.
"""

from __future__ import annotations

import errno
import struct
import sys
from array import array
from collections.abc import Sequence
from itertools import accumulate
from typing import NamedTuple

import crc32c

from ...ext.csvcolumns import encode_column as encode_c
from ..errors import FsError
from .schema import ColType, Schema
from .values import printed_bytes

MAGIC = b"TRAXPAX1"
VERSION = 2
READS = (1, 2)  # versions this traxfs reads
HEADER = struct.Struct("<8sHHIQQI4x")  # 40 bytes
DIRENT = struct.Struct("<III")
_FIXED = {"int32": "i", "date": "i", "int64": "q", "decimal": "q", "timestamp": "q", "float64": "d", "bool": "B"}
_crc = crc32c.crc32c
FAST = True  # minipages made by ext/csvcolumns; False: the Python reference (bench_table times both)
assert sys.byteorder == "little", "the PAX format is little-endian; arrays are written as they are in memory"


class PaxDamaged(FsError):
    """A PAX page or minipage that fails its checks (EIO for a reader)."""

    def __init__(self, detail: str):
        super().__init__(errno.EIO, detail)


class MiniPage(NamedTuple):
    """Where a column's minipage is in its PAX page, and what its values print as."""

    offset: int
    length: int
    crc: int
    csv_bytes: int  # the column's CSV fields of these rows, added up (NULL: 0)
    json_bytes: int  # the column's JSON values (NULL: 4, ``null``)


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def header_size(ncols: int) -> int:
    return _pad8(HEADER.size + ncols * DIRENT.size)


def encode_column(t: ColType, values: Sequence) -> tuple[bytes, int, int]:
    """(minipage, CSV bytes, JSON bytes) of one column's values: in C (``ext/csvcolumns``) when
    :data:`FAST` is set, else :func:`encode_column_reference`."""
    if FAST:
        return encode_c(t.kind, t.scale, values)
    return encode_column_reference(t, values)


def encode_column_reference(t: ColType, values: Sequence) -> tuple[bytes, int, int]:
    """:func:`encode_column` in Python: the reference the C path is tested against."""
    rows = len(values)
    nulls = bytearray(_pad8((rows + 7) // 8))
    present = values
    if None in values:
        present = []
        for i, v in enumerate(values):
            if v is None:
                nulls[i >> 3] |= 1 << (i & 7)
            else:
                present.append(v)
    csv_n, json_n = printed_bytes(t, present)
    json_n += 4 * (rows - len(present))
    if t.kind == "string":
        encoded = [b"" if v is None else v.encode() for v in values]
        offs = array("I", [0])
        offs.extend(accumulate(map(len, encoded)))
        body = offs.tobytes() + b"".join(encoded)
    else:
        body = array(_FIXED[t.kind], values if present is values else [0 if v is None else v for v in values]).tobytes()
    return bytes(nulls) + body, csv_n, json_n


class MinipageOverlap(ValueError):
    """A minipage longer than the room its place leaves before the next one (fewer rows fit)."""


def encode(schema: Schema, columns: Sequence[Sequence], table_id: int, seq: int) -> tuple[bytes, list[MiniPage]]:
    """A PAX page of ``columns`` (one sequence of values per schema column, all the same
    length), minipages packed one after another, and its directory."""
    pieces, dirs = encode_pieces(schema, columns, table_id, seq)
    return b"".join(data for _, data in pieces), dirs


def encode_pieces(schema: Schema, columns: Sequence[Sequence], table_id: int, seq: int,
                  places: Sequence[int] | None = None, end: int | None = None
                  ) -> tuple[list[tuple[int, bytes]], list[MiniPage]]:
    """A PAX page as (offset, bytes) pieces — the header at 0, then each minipage — and its
    directory. ``places``: the offset of each column's minipage (8-byte aligned, ascending);
    without it they follow one another. :class:`MinipageOverlap` when a minipage would run into
    the next place (or past ``end``)."""
    rows = len(columns[0]) if columns else 0
    ncols = len(schema.columns)
    at = header_size(ncols)
    if len(columns) != ncols:
        raise ValueError(f"{len(columns)} columns for a schema of {ncols}")
    pieces, dirs = [], []
    for c, values in enumerate(columns):
        if len(values) != rows:
            raise ValueError("columns of different lengths")
        mini, csv_n, json_n = encode_column(schema.columns[c].type, values)
        if places is not None:
            if places[c] < at or places[c] % 8:
                raise MinipageOverlap(f"minipage {c} at {places[c]} overlaps what precedes it (up to {at})")
            at = places[c]
        dirs.append(MiniPage(at, len(mini), _crc(mini), csv_n, json_n))
        pad = _pad8(len(mini)) - len(mini)
        pieces.append((at, mini + bytes(pad)))
        at += len(mini) + pad
    if end is not None and at > end:
        raise MinipageOverlap(f"the last minipage ends at {at}, past {end}")
    directory = b"".join(DIRENT.pack(d.offset, d.length, d.crc) for d in dirs)
    head = HEADER.pack(MAGIC, VERSION, ncols, rows, table_id, seq, 0) + directory
    crc = _crc(head)
    head = HEADER.pack(MAGIC, VERSION, ncols, rows, table_id, seq, crc) + directory
    return [(0, head + bytes(header_size(ncols) - len(head)))] + pieces, dirs


class Header(NamedTuple):
    ncols: int
    rows: int
    table_id: int
    seq: int
    dirs: list[tuple[int, int, int]]  # (offset, length, crc) per column


def parse_header(data: bytes, where: str) -> Header:
    """The header of a PAX page (its first ``header_size`` bytes at least), verified."""
    if len(data) < HEADER.size:
        raise PaxDamaged(f"{where}: PAX page header cut short ({len(data)} bytes)")
    magic, version, ncols, rows, tid, seq, crc = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise PaxDamaged(f"{where}: not a PAX page (magic {magic!r})")
    if version not in READS:
        raise PaxDamaged(f"{where}: PAX page version {version}; this traxfs reads versions "
                         f"{', '.join(map(str, READS))}")
    end = HEADER.size + ncols * DIRENT.size
    if len(data) < end:
        raise PaxDamaged(f"{where}: PAX page directory cut short")
    body = HEADER.pack(magic, version, ncols, rows, tid, seq, 0) + bytes(data[HEADER.size : end])
    if _crc(body) != crc:
        raise PaxDamaged(f"{where}: PAX page header checksum mismatch")
    dirs = [DIRENT.unpack_from(data, HEADER.size + i * DIRENT.size) for i in range(ncols)]
    return Header(ncols, rows, tid, seq, dirs)


def minipage_ok(data: bytes, crc: int) -> bool:
    return _crc(data) == crc


def check_minipage(data: bytes, crc: int, where: str) -> None:
    if _crc(data) != crc:
        raise PaxDamaged(f"{where}: minipage checksum mismatch")


def decode_column(t: ColType, rows: int, data: bytes, where: str) -> list:
    """The values of one minipage (verified by the caller), NULLs as None."""
    nb = _pad8((rows + 7) // 8)
    nulls = data[:nb]
    if t.kind == "string":
        offs = array("I")
        offs.frombytes(data[nb : nb + 4 * (rows + 1)])
        blob = data[nb + 4 * (rows + 1) :]
        if len(offs) != rows + 1 or offs[-1] > len(blob):
            raise PaxDamaged(f"{where}: string minipage offsets out of range")
        text = bytes(blob)
        vals: list = [text[offs[i] : offs[i + 1]].decode() for i in range(rows)]
    else:
        vals_a = array(_FIXED[t.kind])
        need = vals_a.itemsize * rows
        if len(data) - nb < need:
            raise PaxDamaged(f"{where}: minipage cut short")
        vals_a.frombytes(data[nb : nb + need])
        vals = vals_a.tolist()
        if t.kind == "bool":
            vals = [bool(v) for v in vals]
    if any(nulls):
        for i in range(rows):
            if nulls[i >> 3] >> (i & 7) & 1:
                vals[i] = None
    return vals

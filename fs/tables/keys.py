"""A table's key: the bytes a row's key values are stored under in the ``t.keys`` B+tree.

Point lookups only (no order is promised): each key column's value in a fixed form — the
integer types (int32, int64, decimal, date, timestamp) as 8 bytes big-endian two's complement,
bool as one byte, a string as its UTF-8 length (4 bytes) and bytes — concatenated in key order,
after the table id (8 bytes), so two different keys never share bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from ..struct.btree_node import MAX_KEY
from .schema import ColType, Schema

U32 = struct.Struct(">I")
ROW_REF = struct.Struct(">QI")  # PAX page sequence number, row in it
MAX_KEY_BYTES = MAX_KEY - 8  # the table id comes first


def _column(t: ColType, values: Sequence) -> list[bytes]:
    if t.kind == "string":
        return [U32.pack(len(b)) + b for b in (v.encode() for v in values)]
    if t.kind == "bool":
        return [b"\1" if v else b"\0" for v in values]
    return [v.to_bytes(8, "big", signed=True) for v in values]


def key_bytes(schema: Schema, tid: int, columns: Sequence[Sequence]) -> list[bytes]:
    """The tree key of every row of ``columns`` (one sequence per schema column)."""
    head = tid.to_bytes(8, "big")
    parts = [_column(schema.columns[k].type, columns[k]) for k in schema.key]
    return [head + b"".join(p) for p in zip(*parts, strict=True)]

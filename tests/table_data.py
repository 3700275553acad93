"""Hypothesis strategies for tables: random schemas and rows that fit them (NULLs, quotes,
commas, newlines and unicode in strings, the edges of every type's range)."""

from __future__ import annotations

from hypothesis import strategies as st

from traxfs.fs.tables.schema import ColType, Column, Schema

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,11}", fullmatch=True)
TYPES = st.one_of(
    st.sampled_from([ColType(k) for k in ("int32", "int64", "float64", "date", "timestamp", "bool", "string")]),
    st.integers(1, 18).flatmap(lambda p: st.integers(0, p).map(lambda s: ColType("decimal", p, s))),
)
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12) | \
    st.sampled_from(["", ",", '"', '""', "a\nb", "a\r\nb", " x ", "ü,\"é\"", "null", "\t"])


def schemas(max_columns: int = 6, line_breaks: bool = True) -> st.SearchStrategy[Schema]:
    return st.lists(st.tuples(NAMES, TYPES, st.booleans()), min_size=1, max_size=max_columns,
                    unique_by=lambda c: c[0]).map(lambda cols: Schema(tuple(Column(n, t, nl) for n, t, nl in cols)))


def value(t: ColType, line_breaks: bool = True) -> st.SearchStrategy:
    if t.kind == "int32":
        return st.integers(-(1 << 31), (1 << 31) - 1)
    if t.kind == "int64":
        return st.integers(-(1 << 63), (1 << 63) - 1)
    if t.kind == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if t.kind == "decimal":
        return st.integers(-(10 ** t.precision) + 1, 10 ** t.precision - 1)
    if t.kind == "date":
        return st.integers(-719162, 2932896)  # 0001-01-01 .. 9999-12-31
    if t.kind == "timestamp":
        return st.integers(-62135596800 * 10**6, 253402300799 * 10**6 + 999999)
    if t.kind == "bool":
        return st.booleans()
    text = TEXT if line_breaks else TEXT.filter(lambda s: "\n" not in s and "\r" not in s)
    return text


def rows(schema: Schema, max_rows: int = 30, line_breaks: bool = True) -> st.SearchStrategy[list[tuple]]:
    cells = [value(c.type, line_breaks) if not c.nullable else st.none() | value(c.type, line_breaks)
             for c in schema.columns]
    return st.lists(st.tuples(*cells), max_size=max_rows)


def columns_of(schema: Schema, table_rows: list[tuple]) -> list[list]:
    return [[r[i] for r in table_rows] for i in range(len(schema.columns))]

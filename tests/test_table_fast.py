"""The C path of a table ingest (ext/csvcolumns) against the Python reference: the same columns
of the same values, or the same error at the same line and column, for random schemas and CSV
(valid, respelled and malformed); the same minipages and printed sizes for random columns."""

from __future__ import annotations

import codecs

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from table_data import TYPES, columns_of, rows, schemas, value

from traxfs.fs.tables.ingest import IngestError, parse_csv, parse_csv_reference
from traxfs.fs.tables.pax import encode_column, encode_column_reference
from traxfs.fs.tables.values import csv_printer

MANY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# other spellings of values the C path reads itself or hands to the reference's parser
RESPELL = {"int32": ["+7", " 7", "007", "1_0", "-0", "2147483648", "٣"], "int64": ["+7", "9" * 19, "-9" * 1, " 1 "],
           "decimal": [".5", "5.", "+1.50", "-0.000", "1.2345", "00000000000000000000001", "1e3", " 2 ", "."],
           "date": ["2024-02-29", "2023-02-29", "0000-01-01", "20240501", "2024-13-01", " 2024-05-01"],
           "bool": ["TRUE", " false", "yes", "1"], "float64": ["1e5", "nan", "inf", "1_0.5", "-0.0"],
           "timestamp": ["2024-05-01T12:00:00", "2024-05-01 12:00:00+02:00", "2024-05-01T12:00:00.5Z", "x"],
           "string": ["", "a\x00b", "é"]}
TOKENS = ["", ",", '"', '""', "\n", "\r", "\r\n", "1", "-", ".", "x", "é", "2024-05-01", "true", " ", "9" * 20]


def outcome(parse, schema, data: bytes):
    try:
        cols = parse(schema, data)
    except IngestError as ex:
        return "error", ex.line, ex.column, ex.reason
    return "ok", cols, [[type(v) for v in c] for c in cols]


def same(schema, data: bytes) -> None:
    assert outcome(parse_csv, schema, data) == outcome(parse_csv_reference, schema, data)


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


@st.composite
def csv_files(draw):
    """A schema and a CSV file for it: its rows printed as the views print them, with fields
    respelled, quoted or broken at random, header columns in any order, blank lines, CRLF."""
    schema = draw(schemas(max_columns=5))
    table_rows = draw(rows(schema, max_rows=12))
    order = draw(st.permutations(range(len(schema.columns))))
    eol = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    printers = [csv_printer(c.type) for c in schema.columns]
    lines = [",".join(draw(st.sampled_from([schema.columns[c].name, _quote(schema.columns[c].name)]))
                      for c in order)]
    for r in table_rows:
        fields = []
        for c in order:
            v, kind = r[c], schema.columns[c].type.kind
            text = "" if v is None else printers[c](v)
            pick = draw(st.integers(0, 19))
            if pick == 0:
                text = draw(st.sampled_from(RESPELL[kind]))
            elif pick == 1 and v is not None and kind != "string":
                text = _quote(text)
            elif pick == 2:
                text = draw(st.sampled_from(TOKENS))
            fields.append(text)
        lines.append(",".join(fields))
    if draw(st.integers(0, 3)) == 0 and len(lines) > 1:
        lines.insert(draw(st.integers(0, len(lines))), "")
    text = eol.join(lines) + draw(st.sampled_from([eol, "", eol + eol]))
    data = text.encode()
    if draw(st.integers(0, 9)) == 0:
        data = codecs.BOM_UTF8 + data
    return schema, data


@MANY
@given(csv_files())
def test_c_parse_equals_reference(case):
    same(*case)


@MANY
@given(schemas(max_columns=4), st.lists(st.sampled_from(TOKENS), max_size=40), st.booleans())
def test_c_parse_equals_reference_on_garbage(schema, tokens, header_first):
    """Random bodies of structural characters and values, after a valid header (or none)."""
    head = ",".join(c.name for c in schema.columns) + "\n" if header_first else ""
    same(schema, (head + "".join(tokens)).encode())


@settings(max_examples=100, deadline=None)
@given(schemas(max_columns=3), st.binary(max_size=40))
def test_c_parse_equals_reference_on_bytes(schema, body):
    same(schema, (",".join(c.name for c in schema.columns) + "\n").encode() + body)


def test_c_parse_examples():
    """Cases the generators may miss: long and unterminated quoted fields, a quote closed at the
    last doubled one, a one-column file's blank lines (NULLs), a NULL in a NOT NULL column
    after a bad value of a later column (the first column in file order wins)."""
    from traxfs.fs.tables.schema import parse_schema
    s1 = parse_schema("a string, b int64 not null")
    for body in [b'a,b\n"x\n\ny""\n', b'a,b\n"x\ny""z\n1', b'a,b\n"' + b"x" * 200_000 + b'",1\n', b"a,b\n1,x\n,\n",
                 b"b,a\nzz,\n,x\n", b"a,b\n" + b"x" * 200_000 + b",1\n", b'"a","b"\n"",1\n', b"a,b\n,1\n,2,3\n\"",
                 b"a,b,c\n1,2,3\n", b",a\n", b"a,,b\n", b"\n\n\r\na,b\n\nx,1\r\n\r\n"]:
        same(s1, body)
    s2 = parse_schema("a int32")
    for body in [b"a\n1\n\n2\n\n", b"a\r\n\r\n", b"\n\na\n\n", b" \n\t", b"a\n\"\"\n"]:
        same(s2, body)
    s3 = parse_schema("a int32 not null")
    same(s3, b"a\n1\n\n2\n")


@settings(max_examples=300, deadline=None)
@given(TYPES.flatmap(lambda t: st.tuples(st.just(t), st.lists(st.none() | value(t), max_size=30))))
def test_c_minipage_equals_reference(tv):
    t, vals = tv
    assert encode_column(t, vals) == encode_column_reference(t, vals)


@settings(max_examples=50, deadline=None)
@given(schemas(max_columns=4).flatmap(lambda s: st.tuples(st.just(s), rows(s, max_rows=20))))
def test_c_minipages_of_a_batch(case):
    schema, table_rows = case
    for c, vals in zip(schema.columns, columns_of(schema, table_rows), strict=True):
        assert encode_column(c.type, vals) == encode_column_reference(c.type, vals)


# ----- JSON lines: gathered by column, checked a column at a time -------------------------------
JSON_ODD = ['"x"', "1", "1.0", "-0.0", "0", "true", "null", "1e3", '"1.5"', '" 2 "', '"2024-05-01"', "[1]", "{}",
            str(1 << 63), "2147483648", '"\\ud800"', '"a\\u2028b"', "1.005", '"2024-05-01T12:00:00Z"']


@st.composite
def jsonl_files(draw):
    """A schema and a JSON-lines file for it: its rows printed as the views print them, then
    up to two changes — a value swapped for an odd one, a key dropped, unknown or repeated, a
    line broken — so most files hold one problem, or none."""
    from traxfs.fs.tables.values import json_printer

    schema = draw(schemas(max_columns=4))
    table_rows = draw(rows(schema, max_rows=10))
    shows = [json_printer(c.type) for c in schema.columns]
    cells = [[f'"{c.name}": ' + ("null" if v is None else show(v))
              for c, show, v in zip(schema.columns, shows, r, strict=True)] for r in table_rows]
    broken: dict[int, str] = {}
    for _ in range(draw(st.integers(0, 2)) if cells else 0):
        r, c = draw(st.integers(0, len(cells) - 1)), draw(st.integers(0, len(schema.columns) - 1))
        how = draw(st.integers(0, 4))
        if how == 0:
            cells[r][c] = ""  # missing: NULL
        elif how == 1:
            cells[r].append(draw(st.sampled_from(['"nosuch": 1', cells[r][0] or '"x": 2'])))
        elif how == 2:
            broken[r] = draw(st.sampled_from(["[1]", "{", "\ufeff{}", "  ", "", "1", "{}x"]))
        else:
            cells[r][c] = f'"{schema.columns[c].name}": {draw(st.sampled_from(JSON_ODD))}'
    lines = [broken.get(i, "{" + ", ".join(draw(st.permutations([x for x in items if x]))) + "}")
             for i, items in enumerate(cells)]
    return schema, ("\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n"]))).encode()


@MANY
@given(jsonl_files())
def test_jsonl_by_columns_equals_line_by_line(case):
    from traxfs.fs.tables.ingest import parse_jsonl, parse_jsonl_reference

    schema, data = case
    got, want = outcome(parse_jsonl, schema, data), outcome(parse_jsonl_reference, schema, data)
    assert got == want
    if got[0] == "ok":  # (floats: -0.0 == 0.0, so compare what is stored)
        for c, a, b in zip(schema.columns, got[1], want[1], strict=True):
            assert encode_column(c.type, a) == encode_column(c.type, b)


def test_jsonl_examples():
    """A bool is no int, -0.0 and 0 are different floats, 1 and 1.0 the same decimal."""
    from traxfs.fs.tables.ingest import parse_jsonl, parse_jsonl_reference
    from traxfs.fs.tables.schema import parse_schema

    for schema, body in [("a int64", b'{"a": 1}\n{"a": true}\n'), ("a float64", b'{"a": -0.0}\n{"a": 0}\n'),
                         ("a decimal(4,2)", b'{"a": 1}\n{"a": 1.0}\n{"a": "1.00"}\n'),
                         ("a bool", b'{"a": 1}\n'), ("a string", b'{"a": "\\ud800"}\n')]:
        s = parse_schema(schema)
        got, want = outcome(parse_jsonl, s, body), outcome(parse_jsonl_reference, s, body)
        assert got == want, body
        if got[0] == "ok":
            assert encode_column(s.columns[0].type, got[1][0]) == encode_column(s.columns[0].type, want[1][0])

"""The table store without FUSE (fs/tables): schema text, values, the PAX format, parsing files
to ingest, the views and their sizes, appends (one transaction, exactly once), reopen and crash,
removal giving space back."""

from __future__ import annotations

import errno
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from table_data import TYPES, columns_of, rows, schemas, value

from traxfs.fs.errors import FsError
from traxfs.fs.filesystem import FileSystem
from traxfs.fs.tables.ingest import IngestError, parse_csv, parse_jsonl
from traxfs.fs.tables.keys import key_bytes
from traxfs.fs.tables.pax import PaxDamaged, decode_column, encode, parse_header
from traxfs.fs.tables.render import ViewReader, view_size
from traxfs.fs.tables.schema import SchemaError, parse_schema
from traxfs.fs.tables.store import KeyConflict, TableStore
from traxfs.fs.tables.values import csv_printer, json_printer, printed_bytes, printed_texts
from traxfs.volume.device import create_image

MiB = 1 << 20
QUICK = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----- schema -------------------------------------------------------------------------------------
@QUICK
@given(schemas(max_columns=8, keys=True))
def test_schema_text_round_trip(schema):
    assert parse_schema(schema.text()) == schema


def test_schema_parses_spacing_and_case():
    s = parse_schema(" a INT64 NOT NULL ,b Decimal( 12 , 2 ),\n c string ")
    assert s.text() == "a int64 not null, b decimal(12,2), c string"


@pytest.mark.parametrize("text, words", [
    ("a int64, key(a)", "must be declared not null"), ("a int64 not null, key(b)", "no column"),
    ("a float64 not null, key(a)", "float64 cannot be a key"), ("a int64 not null, key(a), key(a)", "second key"),
    ("a int64 not null, key(a,a)", "twice"), ("key(a)", "no columns"),
    ("", "empty"), ("a", "not 'name type"), ("a int64, a string", "twice"), ("a int128", "unknown type"),
    ("a decimal", "precision"), ("a decimal(19,2)", "1 <= p <= 18"), ("a decimal(3,4)", "s <= p"),
    ("1a int64", "column name"), ("a int64(3,1)", "no parameters"), ("a-b int64", "column name"),
    ("a int64,", "not 'name type"), ("a decimal(3,1", "unbalanced"),
])
def test_bad_schemas_say_why(text, words):
    with pytest.raises(SchemaError, match=words):
        parse_schema(text)


# ----- PAX pages ----------------------------------------------------------------------------------
@QUICK
@given(st.data())
def test_pax_encode_decode(data):
    schema = data.draw(schemas())
    table_rows = data.draw(rows(schema, max_rows=40))
    cols = columns_of(schema, table_rows)
    page, minis = encode(schema, cols, 7, 3)
    head = parse_header(page, "test")
    assert (head.ncols, head.rows, head.table_id, head.seq) == (len(cols), len(table_rows), 7, 3)
    for c, values, m in zip(schema.columns, cols, minis, strict=True):
        assert decode_column(c.type, len(table_rows), page[m.offset : m.offset + m.length], "t") == values


def test_pax_header_damage_is_caught():
    schema = parse_schema("a int64, b string")
    page, _ = encode(schema, [[1, 2], ["x", None]], 1, 0)
    for at in (0, 9, 20, 44):
        bad = bytearray(page)
        bad[at] ^= 1
        with pytest.raises(PaxDamaged):
            parse_header(bytes(bad), "test")


# ----- parsing and printing -----------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(TYPES.flatmap(lambda t: st.tuples(st.just(t), st.lists(st.none() | value(t), max_size=20))))
def test_bulk_printing_equals_value_by_value(tv):
    """The column-at-a-time sizes and texts (what appends and views use) equal the printers'."""
    t, vals = tv
    present = [v for v in vals if v is not None]
    csv_show, json_show = csv_printer(t), json_printer(t)
    assert printed_bytes(t, present) == (sum(len(csv_show(v).encode()) for v in present),
                                         sum(len(json_show(v).encode()) for v in present))
    assert printed_texts(t, vals, "csv") == ["" if v is None else csv_show(v) for v in vals]
    assert printed_texts(t, vals, "jsonl") == ["null" if v is None else json_show(v) for v in vals]


def _render(store, table, cols, fmt) -> bytes:
    reader = ViewReader(store, table, table.snapshot(), cols, fmt, "t")
    return reader.read(0, reader.size + 10)


@pytest.fixture
def store(tmp_path):
    dev = create_image(str(tmp_path / "fs.img"), 64 * MiB)
    FileSystem.mkfs(dev)
    fs = FileSystem.open(dev)
    s = TableStore(fs.e)
    yield s
    s.close()
    fs.close()
    dev.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.data())
def test_views_parse_back_and_sizes_are_exact(store, data):
    """Rows appended print as CSV and JSON lines that parse back to the same values; every
    view's size (from the totals) is the length of what it prints; a projection is the same
    columns of rows.csv."""
    schema = data.draw(schemas())
    name = f"t{len(store.names())}".encode()
    table = store.create(name, schema.text())
    batches = data.draw(st.lists(rows(schema, max_rows=20), min_size=1, max_size=3))
    for b in batches:
        store.append(table, columns_of(schema, b))
    everything = [r for b in batches for r in b]
    n = len(schema.columns)
    for fmt, parse in (("csv", parse_csv), ("jsonl", parse_jsonl)):
        text = _render(store, table, range(n), fmt)
        assert len(text) == view_size(schema, table.snapshot(), range(n), fmt)
        assert parse(schema, text) == columns_of(schema, everything)
    proj = data.draw(st.permutations(range(n)).map(lambda p: p[: max(1, len(p) // 2)]))
    text = _render(store, table, proj, "csv")
    assert len(text) == view_size(schema, table.snapshot(), proj, "csv")
    sub = parse_schema(", ".join(schema.columns[c].text() for c in proj))
    assert parse_csv(sub, text) == [columns_of(schema, everything)[c] for c in proj]


@pytest.mark.parametrize("body, line, column, words", [
    (b"a,b\n1,x\n2\n", 3, 2, "1 fields where the header has 2"),
    (b"a,b\n1,x\nzz,y\n", 3, "1 (a)", "invalid literal"),
    (b"a,c\n1,x\n", 1, 2, "no column"),
    (b"a\n1\n", 1, 0, "lacks column"),
    (b"a,b\n,x\n", 2, "1 (a)", "NOT NULL"),
    (b'a,b\n1,"x\n2,y\n', 2, 2, "never closed"),
    (b'a,b\n1,x"y""\n', 2, 2, "quote inside"),
    (b"a,b\n1,\xff\n", 2, 0, "not UTF-8"),
    (b"a,b\n99999999999999999999,x\n", 2, "1 (a)", "outside the range"),
])
def test_malformed_csv_names_line_and_column(body, line, column, words):
    schema = parse_schema("a int64 not null, b string")
    with pytest.raises(IngestError, match=words) as ex:
        parse_csv(schema, body)
    assert (ex.value.line, ex.value.column) == (line, column)


@pytest.mark.parametrize("body, line, words", [
    (b'{"a": 1}\n{"a": "x"}\n', 2, "not an integer"),
    (b'{"a": 1}\n\n[1]\n', 3, "not a JSON object"),
    (b'{"a": 1, "z": 2}\n', 1, "no column"),
    (b'{"a": 1}\n{"a": 1\n', 2, "not JSON"),
    (b'{"b": "x"}\n', 1, "NOT NULL"),
    (b'{"a": 1, "c": 1.005}\n', 1, "more than 2 digits"),
])
def test_malformed_jsonl_names_line(body, line, words):
    schema = parse_schema("a int64 not null, b string, c decimal(5,2)")
    with pytest.raises(IngestError, match=words) as ex:
        parse_jsonl(schema, body)
    assert ex.value.line == line


def test_csv_null_and_empty_string_differ():
    schema = parse_schema("a string, b string")
    assert parse_csv(schema, b'a,b\n,""\n"",\n') == [[None, ""], ["", None]]
    assert parse_csv(schema, b"b,a\r\nx,y\r\n\r\n") == [["y"], ["x"]]


# ----- the store ----------------------------------------------------------------------------------
def test_append_is_exactly_once_per_file(store):
    table = store.create(b"t", "a int64")
    first = store.append(table, [[1, 2, 3]], source=(b"f.csv", 10, 1234))
    again = store.append(table, [[1, 2, 3]], source=(b"f.csv", 10, 1234))
    assert again.duplicate and again.version == first.version and table.rec.rows == 3
    other = store.append(table, [[4]], source=(b"f.csv", 10, 999))  # same name, other contents
    assert not other.duplicate and table.rec.rows == 4


def test_reader_keeps_its_version(store):
    table = store.create(b"t", "a int64, b string")
    store.append(table, [[1], ["one"]])
    reader = ViewReader(store, table, table.snapshot(), [0, 1], "csv", "t")
    store.append(table, [[2], ["two"]])
    assert reader.read(0, 1000) == b"a,b\n1,one\n"
    assert _render(store, table, [0, 1], "csv") == b"a,b\n1,one\n2,two\n"


def test_bad_schema_creates_nothing(store):
    with pytest.raises(SchemaError):
        store.create(b"t", "a nosuchtype")
    assert store.names() == []
    with pytest.raises(FsError) as ex:
        store.create(b"a/b", "a int64")
    assert ex.value.errno == errno.EINVAL


def test_remove_gives_space_back_and_survives_reopen(tmp_path):
    dev = create_image(str(tmp_path / "fs.img"), 64 * MiB)
    FileSystem.mkfs(dev)
    fs = FileSystem.open(dev)
    store = fs._root_names[b"tables"].store
    free0 = fs.e.free_pages()
    table = store.create(b"big", "a int64, b string")
    store.append(table, [list(range(50000)), [f"row {i}" for i in range(50000)]])
    assert fs.e.free_pages() < free0 - 100
    fs.close()
    fs = FileSystem.open(dev)  # clean reopen: everything there
    store = fs._root_names[b"tables"].store
    table = store.get(b"big")
    assert table.rec.rows == 50000
    text = _render(store, table, [1], "jsonl")
    assert text.count(b"\n") == 50000 and json.loads(text.splitlines()[-1]) == {"b": "row 49999"}
    store.remove(b"big")
    fs.e.make_durable()
    fs.close()
    fs = FileSystem.open(dev)
    assert fs._root_names[b"tables"].store.names() == []
    assert fs.e.free_pages() >= free0 - 10  # the store's five trees stay (two pages each)
    fs.close()
    dev.close()


def test_crash_keeps_committed_appends(tmp_path):
    dev = create_image(str(tmp_path / "fs.img"), 64 * MiB)
    FileSystem.mkfs(dev)
    fs = FileSystem.open(dev)
    store = fs._root_names[b"tables"].store
    table = store.create(b"t", "a int64")
    store.append(table, [list(range(1000))], source=(b"one.csv", 1, 1))
    fs.crash()
    fs = FileSystem.open(dev)
    store = fs._root_names[b"tables"].store
    table = store.get(b"t")
    assert table.rec.rows == 1000 and store.ingested(table, b"one.csv") is not None
    assert _render(store, table, [0], "csv") == b"a\n" + b"".join(b"%d\n" % i for i in range(1000))
    fs.close()
    dev.close()


def test_a_key_finds_its_row_and_refuses_repeats(store):
    table = store.create(b"k", "a int64 not null, b string not null, c date, key(b,a)")
    store.append(table, [[1, 2, 3], ["x", "y", "x"], [None, 5, 6]])
    k = key_bytes(table.schema, table.rec.tid, [[2], ["y"], [None]])[0]
    page, row = store.find(table, k)
    assert row == 1 and store.column(table, page, 2, "t")[row] == 5
    assert store.find(table, key_bytes(table.schema, table.rec.tid, [[2], ["x"], [None]])[0]) is None
    with pytest.raises(KeyConflict, match=r"row|already in the table") as ex:
        store.append(table, [[9, 3], ["z", "x"], [None, None]])
    assert ex.value.row == 1 and table.rec.rows == 3  # nothing appended
    with pytest.raises(KeyConflict, match="already in this file") as ex:
        store.append(table, [[7, 7], ["q", "q"], [None, None]])
    assert ex.value.row == 1 and table.rec.rows == 3
    store.append(table, [[7], ["q"], [None]])
    assert table.rec.rows == 4


def test_a_projection_reads_only_its_minipages(store):
    """Bytes read from the volume by a view: exactly its columns' minipages, nothing else."""
    table = store.create(b"wide", "a int64, b string, c float64, d date")
    n = 40000
    store.append(table, [list(range(n)), [f"text {i}" for i in range(n)], [i / 7 for i in range(n)],
                         [i % 3000 for i in range(n)]])
    for cols in ([0], [2, 0], [1], [0, 1, 2, 3]):
        before = store.bytes_read
        _render(store, table, cols, "csv")
        want = sum(e.minis[c].length for e in table.pages for c in cols)
        assert store.bytes_read - before == want, cols
    total = sum(e.minis[c].length for e in table.pages for c in range(4))
    assert sum(e.minis[0].length for e in table.pages) < total / 3


def test_an_append_that_does_not_fit_changes_nothing(tmp_path):
    """A batch of many PAX pages that runs out of space half-way: ENOSPC, no row appended, no
    page kept (one transaction, aborted), and the table takes a batch that fits afterwards."""
    dev = create_image(str(tmp_path / "fs.img"), 24 * MiB)
    FileSystem.mkfs(dev, log_size=4 * MiB)
    fs = FileSystem.open(dev)
    store = fs._root_names[b"tables"].store
    table = store.create(b"t", "a int64, b string")
    store.append(table, [[1], ["one"]])
    free = fs.e.free_pages()
    n = 600000  # ~ 40 MB: twice the free space
    with pytest.raises(FsError) as ex:
        store.append(table, [list(range(n)), ["x" * 60] * n])
    assert ex.value.errno == errno.ENOSPC
    assert (table.rec.rows, table.rec.version, len(table.pages)) == (1, 1, 1)
    assert fs.e.free_pages() == free
    store.append(table, [[2], ["two"]])
    assert _render(store, table, [0, 1], "csv") == b"a,b\n1,one\n2,two\n"
    fs.close()
    fs = FileSystem.open(dev)
    assert fs._root_names[b"tables"].store.get(b"t").rec.rows == 2
    fs.close()
    dev.close()


def test_the_table_store_opens_at_first_use(tmp_path):
    """A filesystem that never made a table opens no table store at mount, nor when /tables is
    listed or looked in; the first table opens it; after a remount, the first use of /tables."""
    from traxfs.fs.limits import ROOT_INO

    dev = create_image(str(tmp_path / "fs.img"), 64 * MiB)
    FileSystem.mkfs(dev)
    fs = FileSystem.open(dev)
    sub = fs._root_names[b"tables"]
    top = fs.lookup(ROOT_INO, b"tables").ino
    assert fs.readdir(top, 0) == [] and not sub.opened
    with pytest.raises(FsError):
        fs.lookup(top, b"nothing")
    t = fs.mkdir(top, b"t", 0o755, 0, 0)
    assert not sub.opened  # a folder waiting for its schema stores nothing
    h = fs.open_file(fs.lookup(t.ino, b"schema").ino, os.O_WRONLY)
    h.write(0, b"a int64\n")
    h.release()
    assert sub.opened and sub.store.names() == [b"t"]
    fs.close()
    fs = FileSystem.open(dev)
    sub = fs._root_names[b"tables"]
    assert not sub.opened
    assert [name for name, *_ in fs.readdir(fs.lookup(ROOT_INO, b"tables").ino, 0)] == [b"t"]
    assert sub.opened
    fs.close()
    dev.close()

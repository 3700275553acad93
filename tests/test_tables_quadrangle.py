"""Tables on a quadrangle volume of simulated Atlas 10K III disks (Atropos §6): minipage ``c`` of
a PAX page starts on the ``c``-th track row of the page, so a projection reads only its columns'
tracks, and a row fetched by key is one semi-sequential batch; fsck finds the store clean. On a
flat device the placement says so (``test_tables.py`` covers the flat store)."""

from __future__ import annotations

import errno

import crc32c
import pytest
from conftest import QUAD_DISK, MiB

from traxfs.fs.engine.page import PAGE_SIZE
from traxfs.fs.errors import FsError
from traxfs.fs.filesystem import FileSystem
from traxfs.fs.tables.check import check_tables
from traxfs.fs.tables.keys import key_bytes
from traxfs.fs.tables.pax import DIRENT, HEADER, PaxDamaged, encode, parse_header
from traxfs.fs.tables.render import ViewReader, render_row
from traxfs.fs.tables.schema import parse_schema
from traxfs.fs.tables.store import TableStore
from traxfs.volume.device import SECTOR, create_image

pytestmark = pytest.mark.timeout(180)
SPEC = QUAD_DISK
SCHEMA = "k int64 not null, price float64, note string, day date, key(k)"
N = 30_000


def _columns(lo: int, hi: int) -> list[list]:
    return [list(range(lo, hi)), [i / 8 for i in range(lo, hi)],
            [None if i % 11 == 0 else f"note {i}, \"q\"" for i in range(lo, hi)], [i % 4000 for i in range(lo, hi)]]


@pytest.fixture
def quad_store(quad_fs):
    """A table store on the quadrangle volume of ``quad_fs`` (b = 8 sectors, d = 4)."""
    fs, vg, lv, olv = quad_fs
    store = TableStore(fs.e)
    disks = [vg.devices[pv] for pv in lv.pvs()]
    yield store, lv, disks, olv
    store.close()


def _view(store, table, cols) -> bytes:
    reader = ViewReader(store, table, table.snapshot(), cols, "csv", "t")
    return reader.read(0, reader.size + 10)


def _read(disks) -> int:
    return sum(d.stats.read_bytes for d in disks)


def test_minipages_sit_on_their_own_track_rows(quad_store):
    store, lv, disks, olv = quad_store
    q = lv.quadrangle
    assert store.placement() == f"quadrangle (d={q.depth}, {2 * q.width} pages per track row)"
    table = store.create(b"t", SCHEMA)
    store.append(table, _columns(0, N))
    store.append(table, _columns(N, N + 5))
    rows = store.io.raw.quad_rows
    for e in table.pages:
        head = parse_header(store.io.raw.read(e.page * PAGE_SIZE, PAGE_SIZE), "t")
        assert head.dirs == [(m.offset, m.length, m.crc) for m in e.minis] and head.rows == e.rows
        starts = [e.page + m.offset // PAGE_SIZE for m in e.minis]
        assert all(m.offset % PAGE_SIZE == 0 and m.length <= rows.pages * PAGE_SIZE for m in e.minis)
        assert all(s % rows.pages == rows.phase for s in starts)  # each on a track-row boundary
        assert [b - a for a, b in zip(starts, starts[1:], strict=False)] == [rows.pages] * 3  # consecutive rows
        _, at, _ = store.io.raw.locate(starts[0] * PAGE_SIZE, PAGE_SIZE)
        lbns = [at // SECTOR + (s - starts[0]) * PAGE_SIZE // SECTOR for s in starts]
        eq = olv.equivalent(lbns[0])  # the minipages' first blocks: down one quadrangle column
        i = eq.index(lbns[0])
        assert len(eq) == q.depth and list(eq[i:]) == lbns[: q.depth - i]
    # the rows round-trip through every view
    text = _view(store, table, [0, 1, 2, 3]).decode().splitlines()
    assert len(text) == N + 6 and text[1] == "0,0.0,,1970-01-01"
    assert text[2] == '1,0.125,"note 1, ""q""",1970-01-02' and text[-1].startswith(f"{N + 4},")


def test_a_projection_reads_only_its_columns_tracks(quad_store):
    store, lv, disks, olv = quad_store
    table = store.create(b"t", SCHEMA)
    store.append(table, _columns(0, N))
    store.append(table, _columns(N, 2 * N))
    whole = sum(m.length for e in table.pages for m in e.minis)
    for cols in ([0], [3, 1], [2]):
        before = _read(disks)
        _view(store, table, cols)
        want = sum(e.minis[c].length for e in table.pages for c in cols)
        read = _read(disks) - before
        assert read == want, cols  # its minipages, nothing else
        assert read < whole * 0.6


def test_a_key_lookup_is_one_batch(quad_store):
    store, lv, disks, olv = quad_store
    table = store.create(b"t", SCHEMA)
    store.append(table, _columns(0, N))
    for k in (0, 17, N // 2, N - 1):
        entry, row = store.find(table, key_bytes(table.schema, table.rec.tid, [[k], [None], [None], [None]])[0])
        batches, requests = [d.stats.read_batches for d in disks], [d.stats.requests for d in disks]
        out = render_row(store, table, entry, row, "t").decode().splitlines()
        assert out[1].startswith(f"{k},{k / 8},")
        new_batches = [d.stats.read_batches - b for d, b in zip(disks, batches, strict=True)]
        new_requests = sum(d.stats.requests - r for d, r in zip(disks, requests, strict=True))
        assert all(n <= 1 for n in new_batches), new_batches  # one batch per disk at most
        assert new_requests >= len(table.schema.columns)  # every minipage, in that batch


def test_fsck_finds_the_quadrangle_store_clean(quad_store):
    store, lv, disks, olv = quad_store
    table = store.create(b"t", SCHEMA)
    store.append(table, _columns(0, 1000))
    store.append(table, _columns(1000, 1003))
    found = check_tables(store)
    assert found.problems == [] and found.counts["rows"] == 1003
    assert found.pages == {p for e in table.pages for p in range(e.page, e.page + e.pages)}


def test_a_flat_device_keeps_packed_minipages(tmp_path):
    dev = create_image(str(tmp_path / "fs.img"), 32 * MiB)
    FileSystem.mkfs(dev)
    fs = FileSystem.open(dev)
    store = TableStore(fs.e)
    try:
        assert store.placement() == "flat" and store.io.raw.quad_rows is None
        table = store.create(b"t", SCHEMA)
        store.append(table, _columns(0, 100))
        (e,) = table.pages
        assert [b.offset - a.offset - a.length for a, b in zip(e.minis, e.minis[1:], strict=False)] == \
            [-a.length % 8 for a in e.minis[:-1]]  # packed one after another, 8-byte aligned
        assert e.pages == -(-(e.minis[-1].offset + e.minis[-1].length) // PAGE_SIZE)
    finally:
        store.close()
        fs.close()
        dev.close()


@pytest.mark.parametrize("version, readable", [(1, True), (2, True), (3, False)])
def test_pax_versions_read(version, readable):
    """Version 2 (minipages may leave gaps) is written; version 1 pages (packed) still read; an
    unknown version is refused by name."""
    schema = parse_schema(SCHEMA)
    data, _ = encode(schema, _columns(0, 3), 1, 0)
    ncols = len(schema.columns)
    end = HEADER.size + ncols * DIRENT.size
    fields = list(HEADER.unpack_from(data))
    fields[1], fields[-1] = version, 0
    fields[-1] = crc32c.crc32c(HEADER.pack(*fields) + data[HEADER.size : end])
    patched = HEADER.pack(*fields) + data[HEADER.size :]
    if readable:
        assert parse_header(patched, "t").rows == 3
    else:
        with pytest.raises(PaxDamaged, match="version 3; this traxfs reads versions 1, 2"):
            parse_header(patched, "t")


def test_a_value_wider_than_a_track_row_is_refused_whole(quad_store):
    """A row that cannot fit a minipage in one track row: EFBIG, and nothing is appended (the
    rows before it in the batch neither)."""
    store, lv, disks, olv = quad_store
    table = store.create(b"t", SCHEMA)
    store.append(table, _columns(0, 10))
    free = store.io.free_pages()
    cols = _columns(10, 13)
    cols[2][1] = "x" * (store.io.raw.quad_rows.pages * PAGE_SIZE)
    with pytest.raises(FsError) as ex:
        store.append(table, cols)
    assert ex.value.errno == errno.EFBIG and ex.value.row == 1  # (ingest rejects the file, naming the row)
    assert table.rec.rows == 10 and len(table.pages) == 1
    assert store.io.free_pages() == free
    assert _view(store, table, [0]).decode().splitlines()[1:] == [str(i) for i in range(10)]

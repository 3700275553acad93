"""fsck and scrub of a filesystem holding tables (fs/tables/check.py): the PAX pages are owned
(a repair never frees them as leaked data), a sound store checks clean, damage is named."""

from __future__ import annotations

import pytest

from traxfs.fs.engine.page import PAGE_SIZE
from traxfs.fs.filesystem import FileSystem
from traxfs.fs.fsck import EXIT_CLEAN, EXIT_CORRECTED, EXIT_UNCORRECTED, check_device
from traxfs.fs.tables.render import ViewReader
from traxfs.fs.tables.store import TableStore
from traxfs.volume.device import ImageFileDevice, create_image

MiB = 1 << 20
ROWS = 30000


def _fs_with_a_table(path: str, files: int = 0) -> FileSystem:
    dev = create_image(path, 64 * MiB)
    FileSystem.mkfs(dev)
    fs = FileSystem.open(dev)
    for i in range(files):
        fs.create(1, f"f{i}".encode(), 0o100644, 0, 0)
    store = fs._root_names[b"tables"].store
    t = store.create(b"t", "a int64 not null, b string, c float64")
    for k in range(3):
        n = ROWS // 3
        store.append(t, [list(range(k * n, (k + 1) * n)), [f"s{i}" for i in range(n)], [i / 3 for i in range(n)]],
                     source=(f"part-{k}.csv".encode(), n, k))
    return fs


def _all_rows(fs: FileSystem) -> bytes:
    store = fs._root_names[b"tables"].store
    t = store.get(b"t")
    reader = ViewReader(store, t, t.snapshot(), [0, 1, 2], "csv", "t")
    return reader.read(0, reader.size)


def test_fsck_repair_keeps_every_row(tmp_path):
    """fsck counts the PAX pages as owned: before, it called them leaked and --repair freed
    them (the table's rows lost, their pages handed to the next file)."""
    path = str(tmp_path / "fs.img")
    fs = _fs_with_a_table(path)
    before = _all_rows(fs)
    fs.close()
    rep = check_device(ImageFileDevice(path), repair=False, where=path)
    assert rep.exit_code == EXIT_CLEAN, rep.as_dict()
    assert (rep.counts["table_rows"], rep.counts["table_tables"], rep.counts["data_pages"]) == (ROWS, 1, 0)
    assert check_device(ImageFileDevice(path), repair=True, where=path).exit_code == EXIT_CLEAN
    fs = FileSystem.open(ImageFileDevice(path))
    assert _all_rows(fs) == before and before.count(b"\n") == ROWS + 1
    fs.close()


@pytest.mark.parametrize("what", ["tree", "map"])
def test_fsck_repairing_a_damaged_filesystem_keeps_the_tables(tmp_path, what):
    """The damage pass rebuilds a damaged map from what is owned and frees what no structure
    owns: the table store's trees, PAX pages and rejected files are owned."""
    from test_fs_repair import _pages_offset, damage, flip

    path = tmp_path / "fs.img"
    fs = _fs_with_a_table(str(path), files=200)
    before = _all_rows(fs)
    store = fs._root_names[b"tables"].store
    rejected = b"a,b,c\n" + b"x,y,z\n" * 3000
    store.reject(store.get(b"t"), b"bad.csv", rejected, "line 2, column 1 (a): invalid literal")
    fs.close()
    if what == "tree":
        damage(path, "dirents", "leaf")
    else:
        flip(path, _pages_offset(path) + 1 * PAGE_SIZE + 100)  # allocation map page 1
        assert check_device(ImageFileDevice(str(path)), repair=False, where=str(path)).exit_code == EXIT_UNCORRECTED
    assert check_device(ImageFileDevice(str(path)), repair=True, where=str(path)).exit_code == EXIT_CORRECTED
    rep = check_device(ImageFileDevice(str(path)), repair=False, where=str(path))
    assert rep.exit_code == EXIT_CLEAN and rep.counts["table_rows"] == ROWS, rep.as_dict()
    fs = FileSystem.open(ImageFileDevice(str(path)))
    assert _all_rows(fs) == before
    store = fs._root_names[b"tables"].store
    assert [store.rejected_bytes(r, "t") for _, r in store.rejected(store.get(b"t"))] == [rejected]
    fs.close()


def test_fsck_names_a_damaged_pax_page_and_a_wrong_record(tmp_path):
    path = str(tmp_path / "fs.img")
    fs = _fs_with_a_table(path)
    store = fs._root_names[b"tables"].store
    e = store.get(b"t").pages[1]
    fs.e.raw.write(e.page * PAGE_SIZE + e.minis[1].offset + 3, b"\xff")
    fs.e.raw.flush()
    fs.close()
    rep = check_device(ImageFileDevice(path), repair=False, where=path)
    assert rep.exit_code == EXIT_UNCORRECTED
    assert [p for p in rep.problems if "PAX" in p] == [
        f"tables: table t: PAX page 1 (device page {e.page}): minipage of column 2 fails its checksum"], rep.problems


def test_a_wrong_table_record_is_reported(tmp_path):
    path = str(tmp_path / "fs.img")
    fs = _fs_with_a_table(path)
    store = fs._root_names[b"tables"].store
    t = store.get(b"t")
    tx = store.io.begin()
    store.t["tables"].put(tx, b"t", t.rec._replace(rows=t.rec.rows + 1).pack())
    store.io.commit(tx, durable=True)
    fs.close()
    rep = check_device(ImageFileDevice(path), repair=False, where=path)
    assert rep.exit_code == EXIT_UNCORRECTED and any("disagrees with its pages" in p for p in rep.problems)


def test_scrub_verifies_pax_pages(tmp_path):
    from traxfs.fs.scrub import scrub

    fs = _fs_with_a_table(str(tmp_path / "fs.img"))
    store: TableStore = fs._root_names[b"tables"].store
    pages = store.get(b"t").pages
    rep = scrub(fs, repair=False)
    assert rep.exit_code == 0 and rep.pax_pages == len(pages), rep.as_dict()
    e = pages[0]
    fs.e.raw.write(e.page * PAGE_SIZE + 20, b"\xff\xfe")
    rep = scrub(fs, repair=False)
    assert rep.unrepairable == [f"table id {store.get(b't').rec.tid}: PAX page 0 (device page {e.page}): "
                                "no good copy"], rep.as_dict()
    fs.close()


def test_fsck_checks_the_key_index(tmp_path):
    from traxfs.fs.tables.index import table_range

    path = str(tmp_path / "fs.img")
    dev = create_image(path, 64 * MiB)
    FileSystem.mkfs(dev)
    fs = FileSystem.open(dev)
    store = fs._root_names[b"tables"].store
    t = store.create(b"k", "a int64 not null, b string, key(a)")
    store.append(t, [list(range(5000)), ["x"] * 5000])
    fs.close()
    rep = check_device(ImageFileDevice(path), repair=False, where=path)
    assert rep.exit_code == EXIT_CLEAN, rep.as_dict()
    fs = FileSystem.open(ImageFileDevice(path))
    store = fs._root_names[b"tables"].store
    key = next(iter(store.t["keys"].keys(*table_range(store.get(b"k").rec.tid))))
    tx = store.io.begin()
    store.t["keys"].delete(tx, key)
    store.io.commit(tx, durable=True)
    fs.close()
    rep = check_device(ImageFileDevice(path), repair=False, where=path)
    assert rep.exit_code == EXIT_UNCORRECTED and rep.problems == [
        "tables: table k: the key index disagrees with the rows (1 key(s) missing, 0 extra, 0 naming the wrong row)"]


def test_rejected_files_are_owned_checked_and_scrubbed(tmp_path):
    """A rejected file's raw pages: owned (fsck --repair keeps them), verified by fsck and scrub
    against its crc32c, and given back with its table."""
    from traxfs.fs.scrub import scrub

    path = str(tmp_path / "fs.img")
    fs = _fs_with_a_table(path)
    store: TableStore = fs._root_names[b"tables"].store
    t = store.get(b"t")
    data = b"a,b,c\n" + b"1,x,oops\n" * 2000
    rec = store.reject(t, b"bad.csv", data, "line 2, column 3 (c): could not convert")
    assert rec.pages == -(-len(data) // PAGE_SIZE) and store.rejected_bytes(rec, "t") == data
    rep = scrub(fs, repair=False)
    assert rep.exit_code == 0 and rep.rejected_files == 1, rep.as_dict()
    fs.close()
    assert check_device(ImageFileDevice(path), repair=True, where=path).exit_code == EXIT_CLEAN
    fs = FileSystem.open(ImageFileDevice(path))
    store = fs._root_names[b"tables"].store
    assert [(n, store.rejected_bytes(r, "t")) for n, r in store.rejected(store.get(b"t"))] == [(b"bad.csv", data)]
    fs.e.raw.write(rec.page * PAGE_SIZE + 100, b"\xff")
    assert scrub(fs, repair=False).unrepairable == [f"table id {t.rec.tid}: rejected file 'bad.csv' (device "
                                                    f"page {rec.page}): no good copy"]
    fs.close()
    rep = check_device(ImageFileDevice(path), repair=False, where=path)
    assert any("rejected file 'bad.csv'" in p and "checksum" in p for p in rep.problems), rep.as_dict()
    fs = FileSystem.open(ImageFileDevice(path))
    free = fs.e.free_pages()
    fs._root_names[b"tables"].store.remove(b"t")
    fs.e.make_durable()
    assert fs.e.free_pages() >= free + rec.pages
    fs.close()

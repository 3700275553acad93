"""fsck's queue pass (``traxfs.fs.queues.check``) on a store whose trees and blocks are damaged
on purpose: each damage found, the repairable ones repaired, a damaged block reported and left."""

from __future__ import annotations

import pytest
from queue_model import close_store, new_image, open_store

from traxfs.fs.engine.page import PAGE_SIZE
from traxfs.fs.queues.check import check_queues
from traxfs.fs.queues.config import QueueConfig
from traxfs.fs.queues.index import (
    KEY_NEXT_ID,
    BlockEntry,
    QueueRecord,
    SegmentRecord,
    ViewRecord,
    key_seq,
    queue_range,
    seq_key,
    time_key,
    view_key,
)
from traxfs.fs.queues.reader import Reader

pytestmark = pytest.mark.timeout(120)


def lines(first: int, n: int) -> bytes:
    return b"".join(f"record {i}".ljust(99, ".").encode() + b"\n" for i in range(first, first + n))


@pytest.fixture
def image(tmp_path):
    path = str(tmp_path / "q.img")
    new_image(path)
    eng, store = open_store(path)
    q = store.create(b"c", QueueConfig(block_size=16384, retain_age_seconds=None, seal_bytes=60_000))
    q.create_view(b"v")
    for at in range(0, 3000, 300):
        q.append(lines(at, 300))
    q.commit(b"v", 100)
    store.create(b"empty")
    close_store(eng, store)
    return path


def _blocks(store, q) -> list[tuple[int, BlockEntry]]:
    return [(key_seq(k), BlockEntry.unpack(v)) for k, v in store.t["blocks"].items(*queue_range(q.qid))]


def _in_tx(store, body) -> None:
    tx = store.io.begin()
    body(tx)
    store.io.commit(tx, durable=True)


def test_a_sound_store_checks_clean(image):
    eng, store = open_store(image)
    try:
        rep = check_queues(store)
        assert rep.problems == [] and rep.repaired == []
        q = store.get(b"c")
        assert rep.counts == {"queues": 2, "blocks": q.blocks, "records": 3000, "pages": q.blocks * 4}
        entries = [BlockEntry.unpack(v) for _, v in store.t["blocks"].items()]
        assert rep.pages == {p for e in entries for p in range(e.page, e.page + e.pages)}
    finally:
        close_store(eng, store)


def test_damage_is_found_repaired_where_nothing_is_lost_and_a_bad_block_is_reported(image):
    eng, store = open_store(image)
    q = store.get(b"c")
    blocks = _blocks(store, q)
    assert len(blocks) >= 4 and q.segments()
    first2, e2 = blocks[2]
    end = q.live_end

    def damage(tx) -> None:
        first1, e1 = blocks[1]
        store.t["times"].delete(tx, time_key(q.qid, e1.first_ts, first1))  # a block missing from the time index
        store.t["times"].put(tx, time_key(q.qid, 5, 77), b"")  # an entry naming no block
        store.t["views"].put(tx, view_key(q.qid, b"v"), ViewRecord(end + 50, 0).pack())  # a head past the end
        store.t["queues"].put(tx, b"c", QueueRecord(q.qid, q.created_ms, 10, q.config).pack())  # reservation low
        store.t["segments"].put(tx, seq_key(q.qid, 5), SegmentRecord(end, end - 5, 1, 0).pack())  # overlapping
        page = store.io.allocate(tx, 4)
        store.t["blocks"].put(tx, seq_key(99, 0), BlockEntry(0, page, 4, 1, 100, 50, 0, 0, 0).pack())  # orphan
        store.t["queues"].delete(tx, KEY_NEXT_ID)

    _in_tx(store, damage)
    store.io.write(e2.page, 2000, b"\xffdamaged\xff")  # a frame's payload: its checksum fails
    close_store(eng, store, crash=True)  # (a clean close would rewrite the reservation)

    eng, store = open_store(image)
    rep = check_queues(store)
    text = "\n".join(rep.problems)
    for expected in ("is missing from the time index", "(5 ms, sequence 77) names no block",
                     f"view 'v' has its head at {end + 50}, beyond the live end", "reserved only below 10",
                     "segment 5..", "1 blocks entry of queue id 99", "no next queue id record",
                     f"records {first2}..{first2 + e2.count - 1} cannot be read"):
        assert expected in text, f"{expected!r} not in:\n{text}"
    assert rep.repaired == []
    rep = check_queues(store, repair=True)
    assert len(rep.repaired) == 7 and rep.problems == [p for p in rep.problems if "cannot be read" in p] != []
    close_store(eng, store)

    eng, store = open_store(image)
    try:
        rep = check_queues(store)
        assert [p for p in rep.problems if "cannot be read" not in p] == [] and len(rep.problems) == 1
        q = store.get(b"c")
        assert q.live_end >= end and q.views[b"v"].head == end
        r = Reader(q, 0)
        assert r.read(300 * 100) == lines(0, 300)  # the records before the damaged block still read
        r.close()
        assert store.create(b"new").qid > q.qid  # the next id record is back: no id reused
    finally:
        close_store(eng, store)


def test_a_broken_chain_and_a_page_owned_twice_are_reported_and_left(image):
    eng, store = open_store(image)
    q = store.get(b"c")
    blocks = _blocks(store, q)
    (f2, e2), (f3, e3) = blocks[2], blocks[3]
    _in_tx(store, lambda tx: (store.t["blocks"].put(tx, seq_key(q.qid, f3), e3._replace(prev_end=e3.prev_end + 7)
                                                   .pack()),
                              store.t["blocks"].put(tx, seq_key(q.qid, f2), e2._replace(page=e3.page).pack())))
    close_store(eng, store, crash=True)
    eng, store = open_store(image)
    try:
        for repair in (False, True):
            rep = check_queues(store, repair=repair)
            text = "\n".join(rep.problems)
            assert f"says the queue ended at {e3.prev_end + 7} before it" in text and "chain of blocks is broken" in text
            assert f"engine page {e3.page} is also owned by" in text and "disagrees with the index" in text
            assert rep.repaired == []
    finally:
        close_store(eng, store)


def _fs_with_a_queue(path: str, files: int = 0):
    """A filesystem on a new image holding ``files`` empty files and a queue store with queue
    ``c`` of 2000 records in 16 KiB blocks; returns the open filesystem, queue id and blocks
    (the store closed)."""
    from traxfs.fs.filesystem import ROOT_INO, FileSystem
    from traxfs.fs.queues.store import QueueStore
    from traxfs.volume.device import create_image

    dev = create_image(path, 64 << 20)
    FileSystem.mkfs(dev)
    fs = FileSystem.open(dev)
    for i in range(files):
        fs.create(ROOT_INO, f"f{i}".encode(), 0o644, 0, 0)
    store = QueueStore(fs.e, background=False)
    q = store.create(b"c", QueueConfig(block_size=16384))
    q.append(lines(0, 2000))
    blocks = _blocks(store, q)
    store.close()
    return fs, q.qid, blocks


def test_fsck_of_a_filesystem_holding_queues(tmp_path):
    """fsck runs the queue pass when the filesystem has a queue store, and counts the blocks'
    pages as owned: before, it called them leaked data and --repair would have freed them."""
    from traxfs.fs.filesystem import FileSystem
    from traxfs.fs.fsck import EXIT_CLEAN, EXIT_CORRECTED, EXIT_UNCORRECTED, check_device
    from traxfs.fs.queues.store import QueueStore
    from traxfs.volume.device import ImageFileDevice

    path = str(tmp_path / "fs.img")
    fs, qid, blocks = _fs_with_a_queue(path)
    fs.close()
    rep = check_device(ImageFileDevice(path), repair=False, where=path)
    assert rep.exit_code == EXIT_CLEAN, rep.as_dict()
    assert (rep.counts["queue_records"], rep.counts["queue_blocks"], rep.counts["data_pages"]) == (2000, len(blocks), 0)

    fs = FileSystem.open(ImageFileDevice(path))
    store = QueueStore(fs.e, background=False)
    first, e = blocks[1]
    _in_tx(store, lambda tx: store.t["times"].delete(tx, time_key(qid, e.first_ts, first)))
    store.close()
    fs.close()
    rep = check_device(ImageFileDevice(path), repair=False, where=path)
    assert rep.exit_code == EXIT_UNCORRECTED and rep.problems == [
        f"queues: queue 'c': block at sequence {first} is missing from the time index ({e.first_ts} ms)"]
    assert check_device(ImageFileDevice(path), repair=True, where=path).exit_code == EXIT_CORRECTED
    assert check_device(ImageFileDevice(path), repair=False, where=path).exit_code == EXIT_CLEAN


@pytest.mark.parametrize("what", ["tree", "map"])
def test_fsck_repairing_a_damaged_filesystem_keeps_the_queues(tmp_path, what):
    """The damage pass rebuilds a damaged allocation map from what is owned and frees pages no
    structure owns after rebuilding a tree: the queue store's trees and blocks are owned
    (before, --repair freed them all)."""
    from test_fs_repair import _pages_offset, damage, flip

    from traxfs.fs.engine.page import PAGE_SIZE
    from traxfs.fs.filesystem import FileSystem
    from traxfs.fs.fsck import EXIT_CLEAN, EXIT_CORRECTED, EXIT_UNCORRECTED, check_device
    from traxfs.fs.queues.store import QueueStore
    from traxfs.volume.device import ImageFileDevice

    path = tmp_path / "fs.img"
    fs, _, _ = _fs_with_a_queue(str(path), files=200)
    fs.close()
    if what == "tree":
        damage(path, "dirents", "leaf")
    else:
        flip(path, _pages_offset(path) + 1 * PAGE_SIZE + 100)  # allocation map page 1
        assert check_device(ImageFileDevice(str(path)), repair=False, where=str(path)).exit_code == EXIT_UNCORRECTED
    assert check_device(ImageFileDevice(str(path)), repair=True, where=str(path)).exit_code == EXIT_CORRECTED
    rep = check_device(ImageFileDevice(str(path)), repair=False, where=str(path))
    assert rep.exit_code == EXIT_CLEAN and rep.counts["queue_records"] == 2000, rep.as_dict()
    fs = FileSystem.open(ImageFileDevice(str(path)))
    store = QueueStore(fs.e, background=False)
    try:
        r = Reader(store.get(b"c"), 0)
        assert r.read(1 << 20) == lines(0, 2000)
        r.close()
    finally:
        store.close()
        fs.close()


def test_scrub_verifies_queue_blocks_by_their_own_checksums(tmp_path):
    """A queue block is raw bytes, not an engine page: scrub checks it as a block (before, it
    called every queue page a damaged engine page), and names a damaged one."""
    from traxfs.fs.scrub import scrub

    fs, qid, blocks = _fs_with_a_queue(str(tmp_path / "fs.img"))
    rep = scrub(fs, repair=False)
    assert rep.exit_code == 0 and rep.queue_blocks == len(blocks), rep.as_dict()
    first, e = blocks[3]
    fs.e.raw.write(e.page * PAGE_SIZE + 5000, b"\xff\xfe")
    rep = scrub(fs, repair=False)
    assert rep.unrepairable == [f"queue id {qid}: block {e.ordinal} (sequence {first}.., device page {e.page}): "
                                "no good copy"], rep.as_dict()
    fs.close()

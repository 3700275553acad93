"""Checksums of file data (fs/datasums.py), on a filesystem opened in this process (no FUSE):

* a hypothesis state machine of writes — appends, aligned and unaligned overwrites, writes past
  the end leaving holes, truncates — where every read equals a model, and after every close and
  reopen, and every fsync and crash, every copy of every written page matches its checksum
  (the scrub walk) and fsck is clean;
* overwrites interrupted by power loss: the pending checksum is settled at the next open to the
  bytes found — old, new, or (torn) recomputed — and no read fails;
* damage: a flipped data byte is EIO on a plain image, served from the good leg (and the bad
  leg rewritten) on a mirror; the same for an engine page;
* a filesystem of format version 1 is upgraded on open.
"""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import crc32c
import pytest
from conftest import IO_PHASES, MiB, leg_offset, leg_page
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from traxfs.ext.datasum import check_pages, pack_settled, read_slots
from traxfs.fs.datasums import GROUP, Sum, page_sums
from traxfs.fs.engine.page import PAGE_SIZE
from traxfs.fs.engine.superblock import COPIES, read_superblock
from traxfs.fs.errors import FsError
from traxfs.fs.filesystem import ROOT_INO, FileSystem
from traxfs.fs.fsck import fsck
from traxfs.fs.keys import U64, ino_key
from traxfs.fs.scrub import scrub, stale_sums
from traxfs.fs.struct.btree import BTree
from traxfs.fs.trees import ADDED_IN_2, ADDED_IN_3, ADDED_IN_5, KEY_EPOCH, KEY_SUPER, VERSION, FsSuper
from traxfs.volume.device import ImageFileDevice
from traxfs.volume.powerloss import PowerLossDevice

pytestmark = pytest.mark.timeout(300)
SOAK = int(os.environ.get("TRAX_SOAK", "1"))
MAX_FILE = 600_000


def check_sums(fs: FileSystem) -> None:
    """Every copy of every written data page matches its checksum; none is kept for a page no
    file owns; no data inside a size lacks one; fsck agrees."""
    rep = scrub(fs, repair=False, data_only=True)
    assert not rep.damaged and not rep.unrepairable, (rep.damaged, rep.unrepairable)
    assert rep.unverified_pages == 0
    assert stale_sums(fs) == []
    problems = fsck(fs).problems
    assert not problems, problems


class SumsMachine(RuleBasedStateMachine):
    image: Path

    def __init__(self) -> None:
        super().__init__()
        self.dev = ImageFileDevice(str(self.image), 64 * MiB, create=True)
        FileSystem.mkfs(self.dev, log_size=16 * MiB)
        self.fs = FileSystem.open(self.dev, buffer_pages=256)
        self.inos = [self.fs.create(ROOT_INO, f"f{i}".encode(), 0o644, 0, 0).ino for i in range(2)]
        self.model = [bytearray(), bytearray()]
        self.fsynced = False

    def _write(self, which: int, off: int, data: bytes) -> None:
        self.fs.write(self.inos[which], off, data)
        m = self.model[which]
        if off > len(m):
            m.extend(bytes(off - len(m)))
        m[off : off + len(data)] = data

    @rule(which=st.integers(0, 1), n=st.integers(1, 20_000), seed=st.integers(0, 2**32))
    def append(self, which, n, seed):
        self._write(which, len(self.model[which]), random.Random(seed).randbytes(n))

    @precondition(lambda self: any(self.model))
    @rule(which=st.integers(0, 1), where=st.floats(0, 1), n=st.integers(1, 3 * PAGE_SIZE),
          aligned=st.booleans(), seed=st.integers(0, 2**32))
    def overwrite(self, which, where, n, aligned, seed):
        size = len(self.model[which])
        off = int(where * max(0, size - 1))
        if aligned:
            off, n = off // PAGE_SIZE * PAGE_SIZE, max(1, n // PAGE_SIZE) * PAGE_SIZE
        self._write(which, off, random.Random(seed).randbytes(n))

    @rule(which=st.integers(0, 1), gap=st.integers(1, 1_200_000), n=st.integers(1, 9000), seed=st.integers(0, 2**32))
    def write_past_end(self, which, gap, n, seed):
        off = min(len(self.model[which]) + gap, MAX_FILE)
        self._write(which, off, random.Random(seed).randbytes(n))

    @rule(which=st.integers(0, 1), where=st.floats(0, 1.3))
    def truncate(self, which, where):
        size = int(where * len(self.model[which]))
        self.fs.truncate(self.inos[which], size)
        m = self.model[which]
        del m[size:]
        m.extend(bytes(size - len(m)))

    @rule()
    def close_and_reopen(self):
        self.fs.close()
        self.fs = FileSystem.open(self.dev, buffer_pages=256)
        check_sums(self.fs)

    @rule()
    def fsync_then_crash(self):
        """Everything was fsynced, so a crash loses nothing; recovery leaves every sum true."""
        self.fs.fsync()
        self.fs.crash()
        self.fs = FileSystem.open(self.dev, buffer_pages=256)
        check_sums(self.fs)

    @invariant()
    def reads_equal_model(self):
        for ino, m in zip(self.inos, self.model, strict=True):
            assert self.fs.read(ino, 0, len(m) + 100) == bytes(m)
            if len(m) > 5000:  # an unaligned piece from the middle too
                assert self.fs.read(ino, 1234, 3000) == bytes(m[1234:4234])

    def teardown(self):
        self.fs.close()
        self.fs = FileSystem.open(self.dev, buffer_pages=256)
        try:
            check_sums(self.fs)
        finally:
            self.fs.close()
            self.dev.close()
            os.unlink(self.image)


def test_every_read_equals_the_model_and_every_sum_its_page(tmp_path):
    SumsMachine.image = tmp_path / "sums.img"
    run_state_machine_as_test(SumsMachine, settings=settings(max_examples=30 * SOAK, stateful_step_count=50,
                                                             phases=IO_PHASES))


# ----- overwrites and power loss ---------------------------------------------------------------


def _file(fs: FileSystem, name: bytes, data: bytes) -> int:
    ino = fs.create(ROOT_INO, name, 0o644, 0, 0).ino
    fs.write(ino, 0, data)
    return ino


@pytest.mark.parametrize("keep", [0.0, 1.0, 0.5])
def test_overwrites_cut_by_power_loss_settle_to_what_is_on_disk(tmp_path, keep):
    """Overwrites (whole pages, partial pages, across pages) after the file was fsynced, then
    power loss dropping (0), keeping (1) or randomly keeping (0.5) the unflushed writes, landing
    in any order, one of them torn: the next open settles every pending checksum, each byte
    reads as one of the values written to it since the fsync (or the fsynced one), no read
    fails, and the checksums match the pages."""
    rng = random.Random(int(keep * 10))
    inner = ImageFileDevice(str(tmp_path / "pl.img"), 64 * MiB, create=True)
    FileSystem.mkfs(inner, log_size=16 * MiB)
    for rnd in range(4 * SOAK):
        dev = PowerLossDevice(inner, seed=rnd)
        fs = FileSystem.open(dev, buffer_pages=64)
        old = rng.randbytes(200_000)
        ino = _file(fs, f"f{rnd}".encode(), old)
        fs.fsync()
        written = []
        for _ in range(12):
            off = rng.randrange(len(old) - 3 * PAGE_SIZE)
            n = rng.choice([PAGE_SIZE, 100, 5000, 3 * PAGE_SIZE])
            if n % PAGE_SIZE == 0:
                off -= off % PAGE_SIZE
            chunk = rng.randbytes(n)
            fs.write(ino, off, chunk)
            written.append((off, chunk))
        assert fs.status()["data"]["overwrite_intents"] > 0
        dev.crash(keep=keep, tear=True, sector=512)
        fs.crash()
        fs = FileSystem.open(inner, buffer_pages=64)
        try:
            assert fs.status()["data"]["pending_resolved"] > 0
            if keep == 0.0:  # nothing unflushed landed, so nothing was torn (a page of a group marked
                # for overwrites may match no sum: an overwrite's bytes lost with its record)
                assert fs.status()["data"]["torn_recomputed"] == 0
            got = fs.read(ino, 0, len(old))
            assert len(got) == len(old)
            allowed = [{b} for b in old]
            for off, chunk in written:
                for i, b in enumerate(chunk):
                    allowed[off + i].add(b)
            wrong = [i for i in range(len(got)) if got[i] not in allowed[i]]
            assert not wrong, f"round {rnd}: {len(wrong)} bytes were never written there, first at {wrong[0]}"
            check_sums(fs)
        finally:
            fs.close()


# ----- damage ----------------------------------------------------------------------------------


def flip(path: str, offset: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        b = os.pread(fd, 1, offset)
        os.pwrite(fd, bytes([b[0] ^ 0x10]), offset)
    finally:
        os.close(fd)


def test_a_flipped_data_byte_is_eio_naming_the_file_and_offset(tmp_path, caplog):
    path = str(tmp_path / "fs.img")
    dev = ImageFileDevice(path, 64 * MiB, create=True)
    FileSystem.mkfs(dev, log_size=16 * MiB)
    fs = FileSystem.open(dev)
    data = random.Random(1).randbytes(50_000)
    ino = _file(fs, b"f", data)
    _, phys, _ = fs.data.all_extents(ino)[0]
    base = fs.e.sb.pages_offset
    fs.close()
    flip(path, base + (phys + 2) * PAGE_SIZE + 7)  # file page 2
    fs = FileSystem.open(dev)
    try:
        assert fs.read(ino, 0, 2 * PAGE_SIZE) == data[: 2 * PAGE_SIZE]  # pages 0 and 1 are intact
        with pytest.raises(FsError) as e:
            fs.read(ino, 0, len(data))
        assert e.value.errno == 5 and f"inode {ino}" in str(e.value) and f"byte offset {2 * PAGE_SIZE}" in str(e.value)
        assert any(r.levelname == "ERROR" and f"inode {ino}" in r.getMessage() for r in caplog.records)
        with pytest.raises(FsError):  # a partial overwrite must not bake the damage into a new sum
            fs.write(ino, 2 * PAGE_SIZE + 100, b"x")
        fs.write(ino, 2 * PAGE_SIZE, bytes(PAGE_SIZE))  # a whole-page overwrite replaces it
        assert fs.read(ino, 0, len(data)) == data[: 2 * PAGE_SIZE] + bytes(PAGE_SIZE) + data[3 * PAGE_SIZE :]
        assert fs.status()["data"]["unrepairable"] >= 2
    finally:
        fs.close()


def test_mirror_serves_the_good_leg_and_rewrites_the_bad_one(mirror_fs):
    vg, lv = mirror_fs
    fs = FileSystem.open(lv)
    data = random.Random(2).randbytes(40_000)
    ino = _file(fs, b"f", data)
    _, phys, _ = fs.data.all_extents(ino)[0]
    base = fs.e.sb.pages_offset
    dir_page = fs.t["dirents"].header  # an engine page every lookup needs
    fs.close()
    bad_data, bad_meta = base + (phys + 1) * PAGE_SIZE, base + dir_page * PAGE_SIZE
    for off in (bad_data + 99, bad_meta + 40):
        flip(*leg_offset(vg, lv, 0, off))
    assert leg_page(vg, lv, 0, bad_data) != leg_page(vg, lv, 1, bad_data)
    fs = FileSystem.open(lv)
    try:
        for _ in range(20):  # reads alternate between legs: each one must be right
            assert fs.read(ino, 0, len(data)) == data
            assert fs.lookup(ROOT_INO, b"f").ino == ino
            fs.e.buffer.drop_all()
            if fs.status()["buffer"]["repaired_pages"] and fs.status()["data"]["repaired_from_mirror"]:
                break
        assert leg_page(vg, lv, 0, bad_data) == leg_page(vg, lv, 1, bad_data)
        assert leg_page(vg, lv, 0, bad_meta) == leg_page(vg, lv, 1, bad_meta)
        assert fs.status()["data"]["repaired_from_mirror"] == 1
        assert fs.status()["buffer"]["repaired_pages"] == 1
        check_sums(fs)
    finally:
        fs.close()


# ----- format version 1 ------------------------------------------------------------------------


def test_a_version_1_filesystem_is_upgraded_on_open(tmp_path):
    dev = ImageFileDevice(str(tmp_path / "v1.img"), 64 * MiB, create=True)
    FileSystem.mkfs(dev, log_size=16 * MiB)
    fs = FileSystem.open(dev)
    data = random.Random(3).randbytes(30_000)
    ino = _file(fs, b"old", data)
    fs.close()
    # what format 1 looked like: no checksum trees, version 1 in the superblock record
    fs = FileSystem.open(dev)
    with fs.repair.transaction() as ftx:
        for name in ADDED_IN_2 + ADDED_IN_3 + ADDED_IN_5:
            fs.t[name].drop(ftx.tx, f"fs.{name}")
        sb = fs.sb
        fs.t["meta"].put(ftx.tx, KEY_SUPER, FsSuper(sb.uuid, sb.created_ns, sb.label, 1).pack())
    fs.close()
    assert fs.t["inodes"].get(ino_key(ino)) is not None
    fs = FileSystem.open(dev)
    try:
        assert fs.sb.version == VERSION and isinstance(fs.t["datasums"], BTree)
        assert fs.read(ino, 0, len(data)) == data
        assert fs.status()["data"]["unverified_pages"] == 8
        fs.write(ino, 100, b"new bytes")  # a page without a sum: read, patched, summed
        data = data[:100] + b"new bytes" + data[109:]
        assert fs.read(ino, 0, len(data)) == data
        report = fsck(fs)
        assert not report.problems and report.counts["unverified_data_pages"] == 7
    finally:
        fs.close()


def test_a_version_3_filesystem_is_upgraded_keeping_its_epoch(tmp_path):
    """Format 4 changed only the B+tree headers (no entry count): the upgrade rewrites the
    record and nothing else — the snapshot epoch in particular stays as it was."""
    dev = ImageFileDevice(str(tmp_path / "v3.img"), 64 * MiB, create=True)
    FileSystem.mkfs(dev, log_size=16 * MiB)
    fs = FileSystem.open(dev)
    data = random.Random(4).randbytes(10_000)
    ino = _file(fs, b"old", data)
    with fs.repair.transaction() as ftx:
        sb = fs.sb
        for name in ADDED_IN_5:
            fs.t[name].drop(ftx.tx, f"fs.{name}")
        fs.t["meta"].put(ftx.tx, KEY_SUPER, FsSuper(sb.uuid, sb.created_ns, sb.label, 3).pack())
        fs.t["meta"].put(ftx.tx, KEY_EPOCH, U64.pack(7))
    fs.close()
    fs = FileSystem.open(dev)
    try:
        assert fs.sb.version == VERSION == 5 and isinstance(fs.t["datamarked"], BTree)
        assert U64.unpack(fs.t["meta"].get(KEY_EPOCH))[0] == 7
        assert fs.read(ino, 0, len(data)) == data
        assert not fsck(fs).problems
    finally:
        fs.close()


def test_mirror_serves_log_records_from_the_good_leg(mirror_fs):
    """Recovery reads the log: a record damaged on one leg is taken from the other, so no
    committed work is lost (each leg here is damaged at a different record: without the other
    copy, recovery would stop at whichever it met first)."""
    vg, lv = mirror_fs
    fs = FileSystem.open(lv)
    data = {name: random.Random(name).randbytes(9000) for name in (b"a", b"b", b"c")}
    commits = []
    for name, content in data.items():
        _file(fs, name, content)
        fs.fsync()
        commits.append(fs.e.log.durable_lsn)  # the end of the file's last commit record (fsync forced it)
    store = fs.e.store
    fs.crash()  # recovery must replay these records
    for leg, end in ((0, commits[0]), (1, commits[1])):
        flip(*leg_offset(vg, lv, leg, store.offset + (end - 40) % store.size))
    fs = FileSystem.open(lv)
    try:
        for name, content in data.items():
            assert fs.read(fs.lookup(ROOT_INO, name).ino, 0, 10**6) == content
        for off in (store.offset + (commits[0] - 40) % store.size, store.offset + (commits[1] - 40) % store.size):
            assert leg_page(vg, lv, 0, off - off % 512)[:512] == leg_page(vg, lv, 1, off - off % 512)[:512]
    finally:
        fs.close()


def test_mirror_serves_the_newest_engine_superblock_from_the_good_leg(mirror_fs):
    vg, lv = mirror_fs
    FileSystem.open(lv).close()
    seqs = {off: int.from_bytes(leg_page(vg, lv, 1, off)[68:76], "little") for off in COPIES}
    newest = max(seqs, key=seqs.get)
    leg = COPIES.index(newest)  # a fresh volume reads copy 0 from leg 0, then copy 1 from leg 1
    flip(*leg_offset(vg, lv, leg, newest + 30))
    assert read_superblock(vg.open_lv("m"), "m").seq == seqs[newest]
    assert leg_page(vg, lv, 0, newest)[:512] == leg_page(vg, lv, 1, newest)[:512]


@pytest.fixture(scope="module")
def sums_fs(tmp_path_factory):
    dev = ImageFileDevice(str(tmp_path_factory.mktemp("sums") / "fs.img"), 64 * MiB, create=True)
    FileSystem.mkfs(dev, log_size=16 * MiB)
    fs = FileSystem.open(dev)
    yield fs
    fs.close()


@settings(max_examples=150)
@given(seed=st.integers(0, 2**32), slot=st.integers(0, GROUP - 1), data=st.data())
def test_check_pages_in_c_agrees_with_the_python_rule(sums_fs, seed, slot, data):
    """ext/datasum.pyx passes exactly the pages Python's rule passes (valid, not pending, long
    enough for the bytes read, prefix crc32c equal), on records the datasums tree really holds."""
    rng = random.Random(seed)
    count = data.draw(st.integers(1, GROUP - slot))
    last_hi = data.draw(st.integers(1, PAGE_SIZE))
    first = rng.randrange(2)
    blob = rng.randbytes((first + count) * PAGE_SIZE)
    sums: dict[int, Sum | None] = {}
    for k in range(GROUP):
        if rng.random() < 0.15:
            sums[k] = None
            continue
        length = rng.choice([PAGE_SIZE, PAGE_SIZE, rng.randrange(PAGE_SIZE + 1)])
        at = (first + k - slot) * PAGE_SIZE
        crc = crc32c.crc32c(blob[at : at + length]) if 0 <= k - slot < count else 0
        if rng.random() < 0.1:
            crc ^= 1 << rng.randrange(32)
        sums[k] = Sum(crc, length, rng.randrange(2**32), rng.randrange(PAGE_SIZE), rng.random() < 0.1)
    fs = sums_fs
    with fs.repair.transaction() as ftx:
        fs.data.sums.forget(ftx.tx, 0, GROUP)
        fs.data.sums.record(ftx, {k: v for k, v in sums.items() if v is not None})
    raw = fs.t["datasums"].get(U64.pack(0))
    got = check_pages(raw, memoryview(blob), first, slot, count, last_hi)
    want = []
    for k in range(count):
        s = sums[slot + k]
        end = last_hi if k == count - 1 else PAGE_SIZE
        page = blob[(first + k) * PAGE_SIZE : (first + k + 1) * PAGE_SIZE]
        if s is None or s.pending or not (s.length >= end and crc32c.crc32c(page[: s.length]) == s.crc):
            want.append(k)
    assert got == want


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_forgetting_runs_at_once_equals_forgetting_them_one_by_one(sums_fs, seed):
    """``DataSums.forget_runs`` (the reaper's batches: each group's record changed once) leaves
    the sums and pending trees as ``forget`` run by run does, and exactly the pages outside the
    runs keep their sums — runs overlapping, out of order, covering whole groups or spanning two."""
    rng = random.Random(seed)
    groups = 3
    sums = {p: Sum(rng.randrange(2**32), rng.randrange(1, PAGE_SIZE + 1), rng.randrange(2**32),
                   rng.randrange(PAGE_SIZE), rng.random() < 0.1)
            for p in range(groups * GROUP) if rng.random() < 0.7}
    runs = []
    for _ in range(rng.randrange(1, 12)):
        first = rng.randrange(groups * GROUP)
        runs.append((first, min(groups * GROUP - first, rng.choice((1, 2, 5, GROUP, GROUP + 7)))))
    if rng.random() < 0.3:
        runs.append((GROUP, GROUP))  # a whole group
    fs = sums_fs

    def state_after(forget) -> list:
        with fs.repair.transaction() as ftx:
            fs.data.sums.forget(ftx.tx, 0, groups * GROUP)
            fs.data.sums.record(ftx, sums)
        with fs.repair.transaction() as ftx:
            forget(ftx.tx)
        return [(fs.t["datasums"].get(U64.pack(g)), fs.t["datapending"].get(U64.pack(g))) for g in range(groups)]

    def one_by_one(tx) -> None:
        for first, count in runs:
            fs.data.sums.forget(tx, first, count)

    at_once = state_after(lambda tx: fs.data.sums.forget_runs(tx, runs))
    assert at_once == state_after(one_by_one)
    gone = {p for first, count in runs for p in range(first, first + count)}
    for g, (raw, _) in enumerate(at_once):
        valid = int.from_bytes(raw[:GROUP // 8], "big") if raw is not None else 0
        for k in range(GROUP):
            assert bool(valid >> k & 1) == (g * GROUP + k in sums and g * GROUP + k not in gone)


@given(seed=st.integers(0, 2**32), size=st.integers(0, 9 * PAGE_SIZE), start=st.integers(0, 7))
def test_the_sums_of_written_pages_in_c_are_each_pages_crc32c(seed, size, start):
    """``page_sums`` (ext/datasum.pyx): one settled sum per page of the bytes (of any buffer,
    from any start), the last page's length what it holds."""
    blob = memoryview(random.Random(seed).randbytes(size + start))[start:]
    got = page_sums(blob)
    want = [Sum(crc32c.crc32c(blob[at : at + PAGE_SIZE]), min(PAGE_SIZE, size - at)) for at in range(0, size, PAGE_SIZE)]
    assert got == want
    assert all(type(s) is Sum for s in got)


@given(seed=st.integers(0, 2**32), slot=st.integers(0, GROUP - 1), data=st.data())
def test_settled_sums_packed_in_c_land_in_their_slots_or_nowhere(seed, slot, data):
    """``pack_settled`` (ext/datasum.pyx) writes a run of settled sums into their slots of a
    record, as ``(crc u32, length u16)`` big-endian, and nothing else; a run with a page without
    a sum or a pending one is declined with the record untouched."""
    rng = random.Random(seed)
    count = data.draw(st.integers(0, GROUP - slot))
    run = [Sum(rng.randrange(2**32), rng.randrange(PAGE_SIZE + 1)) for _ in range(count)]
    if count and data.draw(st.booleans()):
        run[rng.randrange(count)] = None if rng.random() < 0.5 else Sum(1, 2, 3, 4, True)
    start = rng.randbytes(2 * GROUP // 8 + 6 * GROUP)
    value = bytearray(start)
    done = pack_settled(value, slot, run)
    settled = all(s is not None and not s.pending for s in run)
    assert done == settled
    want = bytearray(start)
    if settled:
        at = 2 * GROUP // 8 + 6 * slot
        want[at : at + 6 * count] = b"".join(struct.pack(">IH", s.crc, s.length) for s in run)
    assert value == want


def test_a_sum_that_is_no_page_s_is_refused_before_anything_is_written():
    value = bytearray(2 * GROUP // 8 + 6 * GROUP)
    for bad in ([Sum(1, 4096), Sum(1, PAGE_SIZE + 1)], [Sum(2**32, 1)]):
        with pytest.raises(ValueError, match="not a sum of a page"):
            pack_settled(value, 0, bad)
        assert not any(value)
    with pytest.raises(ValueError, match="outside a group"):
        pack_settled(value, GROUP - 1, [Sum(1, 1), Sum(1, 1)])


@given(seed=st.integers(0, 2**32), slot=st.integers(0, GROUP), data=st.data())
def test_sums_read_from_a_record_in_c_follow_its_bitmaps(seed, slot, data):
    """``read_slots`` (ext/datasum.pyx) decodes a record as its layout says: valid bit clear ->
    None; pending bit set -> the slot's sum with the alternative given (or (0, 0)), pending;
    otherwise the slot's sum, settled."""
    rng = random.Random(seed)
    count = data.draw(st.integers(0, GROUP - slot))
    raw = rng.randbytes(2 * GROUP // 8 + 6 * GROUP)
    valid, pending = int.from_bytes(raw[: GROUP // 8], "big"), int.from_bytes(raw[GROUP // 8 : GROUP // 4], "big")
    alts = {k: (rng.randrange(2**32), rng.randrange(PAGE_SIZE + 1)) for k in range(GROUP) if rng.random() < 0.5}
    want = []
    for k in range(slot, slot + count):
        crc, length = struct.unpack_from(">IH", raw, GROUP // 4 + 6 * k)
        if not valid >> k & 1:
            want.append(None)
        elif pending >> k & 1:
            want.append(Sum(crc, length, *alts.get(k, (0, 0)), True))
        else:
            want.append(Sum(crc, length))
    got = read_slots(raw, slot, count, Sum, alts)
    assert got == want
    assert all(s is None or type(s) is Sum for s in got)
    with pytest.raises(ValueError, match="outside a group"):
        read_slots(raw, slot, GROUP - slot + 1, Sum, alts)

"""Snapshots at the filesystem's API (``fs/history.py``, ``fs/snapshot_store.py``,
``fs/snapshot_view.py``): a hypothesis state machine of writes, truncates, renames, unlinks,
snapshot creates and deletes and reopens against a model that keeps a copy per snapshot; the
space a delete gives back; a delete interrupted by a crash; a create waiting for the write in
flight; a leaked dead-list entry; power loss under snapshot work; the upgrade of a format-2
filesystem. The FUSE side is ``tests/test_snapshots_mount.py``."""

from __future__ import annotations

import errno
import os
import random
import stat
import threading
import time

import pytest
from conftest import IO_PHASES, MiB
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from traxfs.fs.datamap import dead_runs
from traxfs.fs.errors import FsError
from traxfs.fs.filesystem import FileSystem
from traxfs.fs.fsck import fsck
from traxfs.fs.keys import EXTENT, U64, extent_key, unpack_extent
from traxfs.fs.limits import ROOT_INO
from traxfs.fs.subtrees.protocol import subtree_ino
from traxfs.fs.trees import ADDED_IN_3, ADDED_IN_5, KEY_EPOCH, KEY_SUPER, VERSION, FsSuper
from traxfs.volume.device import ImageFileDevice

TOP = subtree_ino(2, 1)  # /.snapshots
NAMES = [b"a", b"b", b"c", b"d"]
SNAPS = [b"s1", b"s2", b"s3"]


def new_fs(path: str, size: int = 96 * MiB) -> FileSystem:
    dev = ImageFileDevice(path, size, create=True)
    FileSystem.mkfs(dev, log_size=16 * MiB)
    return FileSystem.open(dev)


def reopen(fs: FileSystem, crash: bool = False) -> FileSystem:
    fs.crash() if crash else fs.close()
    return FileSystem.open(fs.e.dev)


def read_all(fs: FileSystem, ino: int) -> bytes:
    h = fs.open_file(ino, os.O_RDONLY)
    try:
        return h.read(0, fs.getattr(ino).size + 10)
    finally:
        h.release()


def tree_files(fs: FileSystem, root: int) -> dict[bytes, bytes]:
    """Name -> contents of the regular files in directory ``root`` (the live root or a snapshot's)."""
    out = {}
    for name, node, _ in fs.readdir(root, 0, 1000):
        if root == ROOT_INO and name in (b".trax", b".snapshots", b"queues", b"tables"):
            continue
        if stat.S_ISREG(node.mode):
            out[name] = read_all(fs, node.ino)
    return out


def dead_entries(fs: FileSystem) -> int:
    return len(fs.t["dead"])


class SnapshotMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        import tempfile
        self.dir = tempfile.mkdtemp(prefix="snapfs-")
        self.fs = new_fs(os.path.join(self.dir, "fs.img"))
        self.live: dict[bytes, bytes] = {}
        self.snaps: dict[bytes, dict[bytes, bytes]] = {}

    def ino(self, name: bytes) -> int:
        return self.fs.lookup(ROOT_INO, name).ino

    @rule(name=st.sampled_from(NAMES), off=st.integers(0, 40_000), n=st.integers(1, 20_000), seed=st.integers(0, 255))
    def write(self, name, off, n, seed):
        if name not in self.live:
            self.fs.create(ROOT_INO, name, stat.S_IFREG | 0o644, 0, 0)
            self.live[name] = b""
        data = bytes((seed + i) % 251 for i in range(n))
        self.fs.write(self.ino(name), off, data)
        old = self.live[name]
        old = old + bytes(max(0, off - len(old)))
        self.live[name] = old[:off] + data + old[off + n:]

    @precondition(lambda self: self.live)
    @rule(data=st.data(), size=st.integers(0, 50_000))
    def truncate(self, data, size):
        name = data.draw(st.sampled_from(sorted(self.live)))
        self.fs.truncate(self.ino(name), size)
        old = self.live[name]
        self.live[name] = old[:size] + bytes(max(0, size - len(old)))

    @precondition(lambda self: self.live)
    @rule(data=st.data(), to=st.sampled_from(NAMES))
    def rename(self, data, to):
        name = data.draw(st.sampled_from(sorted(self.live)))
        self.fs.rename(ROOT_INO, name, ROOT_INO, to)
        self.live[to] = self.live.pop(name)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def unlink(self, data):
        name = data.draw(st.sampled_from(sorted(self.live)))
        self.fs.unlink(ROOT_INO, name)
        del self.live[name]

    @rule(name=st.sampled_from(SNAPS))
    def snapshot(self, name):
        if name in self.snaps:
            with pytest.raises(FsError) as e:
                self.fs.mkdir(TOP, name, 0o755, 0, 0)
            assert e.value.errno == errno.EEXIST
            return
        self.fs.mkdir(TOP, name, 0o755, 0, 0)
        self.snaps[name] = dict(self.live)

    @rule(name=st.sampled_from(SNAPS))
    def delete(self, name):
        if name not in self.snaps:
            with pytest.raises(FsError) as e:
                self.fs.rmdir(TOP, name)
            assert e.value.errno == errno.ENOENT
            return
        self.fs.rmdir(TOP, name)
        del self.snaps[name]

    @rule(crash=st.booleans())
    def reopen(self, crash):
        if crash:
            self.fs.sync()  # what a crash keeps: everything made durable
        self.fs = reopen(self.fs, crash)

    @invariant()
    def views_match(self):
        assert tree_files(self.fs, ROOT_INO) == self.live
        listed = sorted(name for name, _, _ in self.fs.readdir(TOP, 0, 100))
        assert listed == sorted(self.snaps)
        for name, files in self.snaps.items():
            root = self.fs.lookup(TOP, name).ino
            assert tree_files(self.fs, root) == files, name
        if not self.snaps:
            assert dead_entries(self.fs) == 0 and len(self.fs.t["hist"]) == 0
        chain = self.fs.chain  # nothing kept that no snapshot needs (no space leaks)
        for first, count, birth, death in dead_runs(self.fs.t["dead"]):
            assert chain.needed(birth, death), (first, count, birth, death, chain.epochs)
        for k in self.fs.t["hist_epochs"].keys():
            assert U64.unpack(k[:8])[0] in chain.epochs

    def teardown(self):
        try:
            for name in list(self.snaps):  # every snapshot and file gone: all space back
                self.fs.rmdir(TOP, name)
            for name in list(self.live):
                self.fs.unlink(ROOT_INO, name)
            self.fs = reopen(self.fs)
            assert dead_entries(self.fs) == 0 and len(self.fs.t["hist"]) == 0
            rep = fsck(self.fs)
            assert rep.problems == [], rep.problems
        finally:
            self.fs.close()
            import shutil
            shutil.rmtree(self.dir, ignore_errors=True)


TestSnapshotMachine = SnapshotMachine.TestCase
TestSnapshotMachine.settings = settings(max_examples=40, stateful_step_count=25, phases=IO_PHASES)


# ----- fixed cases -------------------------------------------------------------------------------
def _file(fs: FileSystem, name: bytes, data: bytes) -> int:
    node = fs.create(ROOT_INO, name, stat.S_IFREG | 0o644, 0, 0)
    fs.write(node.ino, 0, data)
    return node.ino


def test_delete_gives_the_space_back_and_fsck_sees_shared_pages_once(tmp_path):
    fs = new_fs(str(tmp_path / "fs.img"))
    try:
        data = os.urandom(4 * MiB)
        ino = _file(fs, b"big", data)
        fs = reopen(fs)
        free0 = fs.statfs().blocks_free
        fs.mkdir(TOP, b"s", 0o755, 0, 0)
        assert fs.statfs().blocks_free >= free0 - 8  # O(1): a few tree pages, no data copied
        fs.write(ino, 0, b"z" * MiB)  # copy-on-write of 256 pages
        fs.unlink(ROOT_INO, b"big")  # the copies are freed; the old pages go to the dead list
        fs = reopen(fs)
        assert fs.statfs().blocks_free <= free0 + 8  # the snapshot still holds the file's 1024 pages
        snap = fs.lookup(TOP, b"s").ino
        assert read_all(fs, fs.lookup(snap, b"big").ino) == data
        rep = fsck(fs)
        assert rep.problems == [] and rep.counts["data_pages"] == 1024  # shared pages counted once
        fs.rmdir(TOP, b"s")
        fs = reopen(fs)
        assert fs.statfs().blocks_free >= free0 + 1024 - 8  # the file's pages are all back
        assert dead_entries(fs) == 0 and fsck(fs).problems == []
    finally:
        fs.close()


def test_a_delete_interrupted_by_a_crash_is_finished_at_mount(tmp_path):
    fs = new_fs(str(tmp_path / "fs.img"))
    try:
        ino = _file(fs, b"f", os.urandom(MiB))
        fs.mkdir(TOP, b"keep", 0o755, 0, 0)
        fs.write(ino, 0, b"1" * 300_000)
        fs.mkdir(TOP, b"gone", 0o755, 0, 0)
        fs.write(ino, 0, b"2" * 600_000)
        fs.unlink(ROOT_INO, b"f")
        fs = reopen(fs)
        free0 = fs.statfs().blocks_free
        store = fs.snapshots
        # the first step of a delete (marked deleting, durable), then the process dies
        snap = store.by_name(b"gone")
        from traxfs.fs.snapshot_store import _REC, DELETING
        with fs.repair.transaction() as ftx:
            fs.t["snapshots"].put(ftx.tx, U64.pack(snap.epoch), _REC.pack(DELETING, snap.created_ns) + b"gone")
        fs.sync()
        fs = reopen(fs, crash=True)
        assert [s.name for s in fs.snapshots.live()] == [b"keep"]
        keep = fs.lookup(TOP, b"keep").ino
        assert read_all(fs, fs.lookup(keep, b"f").ino)[:300_000] != b"1" * 300_000
        fs = reopen(fs)
        assert fs.statfs().blocks_free > free0  # what only "gone" held is free
        assert fsck(fs).problems == []
    finally:
        fs.close()


def test_bad_input_changes_nothing(tmp_path):
    fs = new_fs(str(tmp_path / "fs.img"))
    try:
        ino = _file(fs, b"f", b"data")
        fs.mkdir(TOP, b"s", 0o755, 0, 0)
        snap = fs.lookup(TOP, b"s").ino
        before = (len(fs.t["snapshots"]), fs.t["meta"].get(KEY_EPOCH))
        cases = [
            (lambda: fs.mkdir(TOP, b"x" * 256, 0o755, 0, 0), errno.ENAMETOOLONG),
            (lambda: fs.mkdir(TOP, b"s", 0o755, 0, 0), errno.EEXIST),
            (lambda: fs.create(TOP, b"file", stat.S_IFREG | 0o644, 0, 0), errno.EROFS),
            (lambda: fs.rmdir(TOP, b"nope"), errno.ENOENT),
            (lambda: fs.unlink(TOP, b"s"), errno.EISDIR),
            (lambda: fs.create(snap, b"new", stat.S_IFREG | 0o644, 0, 0), errno.EROFS),
            (lambda: fs.unlink(snap, b"f"), errno.EROFS),
            (lambda: fs.setattr(fs.lookup(snap, b"f").ino, mode=0o600), errno.EROFS),
            (lambda: fs.setxattr(fs.lookup(snap, b"f").ino, b"user.x", b"1"), errno.EROFS),
            (lambda: fs.open_file(fs.lookup(snap, b"f").ino, os.O_WRONLY), errno.EROFS),
            (lambda: fs.rename(snap, b"f", snap, b"g"), errno.EROFS),
            (lambda: fs.rename(ROOT_INO, b"f", snap, b"g"), errno.EXDEV),
            (lambda: fs.rename(snap, b"f", ROOT_INO, b"g"), errno.EXDEV),
            (lambda: fs.rename(TOP, b"s", TOP, b"t"), errno.EROFS),
        ]
        for call, want in cases:
            with pytest.raises(FsError) as e:
                call()
            assert e.value.errno == want, (e.value, want)
        assert (len(fs.t["snapshots"]), fs.t["meta"].get(KEY_EPOCH)) == before
        assert read_all(fs, ino) == b"data" and read_all(fs, fs.lookup(snap, b"f").ino) == b"data"
        assert [s.name for s in fs.snapshots.live()] == [b"s"]
    finally:
        fs.close()


def test_a_format_2_filesystem_is_upgraded_on_open(tmp_path):
    fs = new_fs(str(tmp_path / "fs.img"))
    data = os.urandom(200_000)
    ino = _file(fs, b"old", data)
    fs = reopen(fs)
    # what format 2 looked like: no snapshot trees, no epoch, 12-byte extent values
    with fs.repair.transaction() as ftx:
        for k, v in list(fs.t["extents"].items()):
            phys, count, _ = unpack_extent(v)
            fs.t["extents"].tree.put(ftx.tx, k, EXTENT.pack(phys, count))
        for name in ADDED_IN_3 + ADDED_IN_5:
            fs.t[name].drop(ftx.tx, f"fs.{name}")
        fs.t["meta"].delete(ftx.tx, KEY_EPOCH)
        sb = fs.sb
        fs.t["meta"].put(ftx.tx, KEY_SUPER, FsSuper(sb.uuid, sb.created_ns, sb.label, 2).pack())
    fs.close()
    fs = FileSystem.open(fs.e.dev)
    try:
        assert fs.sb.version == VERSION == 5
        assert len(fs.t["extents"].get(extent_key(ino, 0))) == EXTENT.size  # old values read as birth 0
        assert read_all(fs, ino) == data
        fs.mkdir(TOP, b"s", 0o755, 0, 0)
        fs.write(ino, 10, b"new")  # birth 0 pages are shared: copied first
        snap = fs.lookup(TOP, b"s").ino
        assert read_all(fs, fs.lookup(snap, b"old").ino) == data
        assert read_all(fs, ino) == data[:10] + b"new" + data[13:]
        assert fsck(fs).problems == []
    finally:
        fs.close()


class GateWrites(ImageFileDevice):
    """An image whose writes of bytes starting with ``GATE`` wait while :attr:`gate` is closed
    (``stuck`` set once one waits): a data write held in flight."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.gate = threading.Event()
        self.gate.set()
        self.stuck = threading.Event()

    def write(self, off, data):
        if bytes(data[:4]) == b"GATE" and not self.gate.is_set():
            self.stuck.set()
            assert self.gate.wait(60), "gate never opened"
        return super().write(off, data)


def test_a_create_waits_for_the_write_in_flight(tmp_path):
    """A write that decided to write in place (no snapshot yet) is in flight when a snapshot is
    asked for: the create waits for it (the snapshot barrier), so the snapshot never changes
    afterwards under a write that landed in pages it shares."""
    dev = GateWrites(str(tmp_path / "fs.img"), 96 * MiB, create=True)
    FileSystem.mkfs(dev, log_size=16 * MiB)
    fs = FileSystem.open(dev)
    try:
        ino = _file(fs, b"f", b"A" * 65536)
        fs.sync()
        dev.gate.clear()
        w = threading.Thread(target=fs.write, args=(ino, 0, b"GATE" + b"B" * 65532))
        w.start()
        assert dev.stuck.wait(30)
        c = threading.Thread(target=fs.mkdir, args=(TOP, b"s", 0o755, 0, 0))
        c.start()
        c.join(2)
        early = None
        if not c.is_alive():  # created while the write is in flight: what it shows must stay
            early = read_all(fs, fs.lookup(fs.lookup(TOP, b"s").ino, b"f").ino)
        dev.gate.set()
        w.join(30)
        c.join(30)
        later = read_all(fs, fs.lookup(fs.lookup(TOP, b"s").ino, b"f").ino)
        assert early is None or early == later
        assert later in (b"A" * 65536, b"GATE" + b"B" * 65532)
        assert fsck(fs).problems == []
    finally:
        dev.gate.set()
        fs.close()


def test_fsck_finds_and_frees_a_leaked_dead_list_entry(tmp_path):
    """A dead-list entry no snapshot's history maps is a leak: fsck says so, --repair frees it
    (with its checksums); pages the history does map are in use, not leaked."""
    from traxfs.fs.datamap import DEAD
    from traxfs.fs.keys import U64X2

    fs = new_fs(str(tmp_path / "fs.img"))
    try:
        ino = _file(fs, b"f", os.urandom(64 * 1024))
        fs.mkdir(TOP, b"s", 0o755, 0, 0)
        fs.unlink(ROOT_INO, b"f")  # 16 pages onto the dead list, mapped by the snapshot's history
        assert fsck(fs).problems == []
        with fs.repair.transaction() as ftx:  # 4 pages nobody sees, listed as dead
            first = fs.e.alloc_region(ftx.tx, 4)
            fs.t["dead"].put(ftx.tx, U64X2.pack(fs.chain.current, first), DEAD.pack(4, 1))
        free = fs.statfs().blocks_free
        rep = fsck(fs)
        assert len(rep.problems) == 1 and f"dead-list pages {first}+4" in rep.problems[0], rep.problems
        rep = fsck(fs, repair=True)
        assert any(f"dead-list pages {first}+4" in r for r in rep.repaired) and rep.problems == []
        assert fs.statfs().blocks_free == free + 4 and len(fs.t["dead"]) == 1
        assert fsck(fs).problems == []
        snap = fs.lookup(TOP, b"s").ino
        assert len(read_all(fs, fs.lookup(snap, b"f").ino)) == 64 * 1024 and ino
    finally:
        fs.close()


# ----- power loss ------------------------------------------------------------------------------
def _power_loss_round(inner: ImageFileDevice, seed: int, snaps: dict[bytes, dict[bytes, bytes]]) -> None:
    """Writes (overwrites of shared pages: copy-on-write), truncates, unlinks, snapshot creates
    and deletes, then the power goes (unflushed writes dropped, reordered, torn). After
    recovery: fsck clean, and every snapshot whose create returned (and no delete returned)
    holds exactly the files it was taken with; every acknowledged delete is gone."""
    from traxfs.volume.powerloss import PowerLossDevice

    rng = random.Random(seed)
    dev = PowerLossDevice(inner, seed=seed)
    fs = FileSystem.open(dev, buffer_pages=64, commit_interval=rng.choice([1.0, 0.002]))
    for _ in range(rng.randint(5, 20)):
        names = [n for n, _, _ in fs.readdir(ROOT_INO, 0, 100) if n.startswith(b"f")]
        kind = rng.random()
        if kind < 0.12 and len(snaps) < 4:
            name = f"s{seed}-{rng.randrange(1000)}".encode()
            if name not in snaps:
                fs.mkdir(TOP, name, 0o755, 0, 0)
                snaps[name] = tree_files(fs, ROOT_INO)
        elif kind < 0.2 and snaps:
            name = rng.choice(sorted(snaps))
            fs.rmdir(TOP, name)
            del snaps[name]
        elif kind < 0.3 and names:
            fs.unlink(ROOT_INO, rng.choice(names))
        elif kind < 0.4 and names:
            fs.truncate(fs.lookup(ROOT_INO, rng.choice(names)).ino, rng.randrange(30_000))
        else:
            name = f"f{rng.randrange(8)}".encode()
            if name not in names:
                fs.create(ROOT_INO, name, stat.S_IFREG | 0o644, 0, 0)
            ino = fs.lookup(ROOT_INO, name).ino
            fs.write(ino, rng.randrange(30_000), rng.randbytes(rng.choice([1, 100, 4096, 5000, 20000])))
        if rng.random() < 0.2:
            fs.fsync()
    time.sleep(rng.choice([0, 0.001, 0.01]))
    dev.crash(keep=rng.random(), tear=True, sector=rng.choice([512, 4096]))
    fs.crash()
    fs2 = FileSystem.open(inner, buffer_pages=64)
    try:
        rep = fsck(fs2)
        assert not rep.problems, f"seed {seed}: fsck after power loss: {rep.problems}; {dev.stats}"
        assert sorted(s.name for s in fs2.snapshots.live()) == sorted(snaps), seed
        for name, files in snaps.items():
            assert tree_files(fs2, fs2.lookup(TOP, name).ino) == files, (seed, name)
    finally:
        fs2.close()


@pytest.mark.timeout(600)
def test_power_loss_during_snapshot_work(tmp_path):
    inner = ImageFileDevice(str(tmp_path / "pl.img"), 96 * MiB, create=True)
    FileSystem.mkfs(inner, log_size=16 * MiB)
    snaps: dict[bytes, dict[bytes, bytes]] = {}
    for seed in range(20):
        _power_loss_round(inner, seed, snaps)


def test_a_tree_inode_past_31_bits_has_no_number_in_a_snapshot(tmp_path):
    """Snapshot inode numbers are ``id << 32 | tree inode``, bit 31 numbering the frozen tables:
    a tree inode of 2^31 or more is refused there with EOVERFLOW (the live tree serves it as
    ever)."""
    from traxfs.fs.trees import KEY_NEXT_INO

    fs = new_fs(str(tmp_path / "fs.img"))
    try:
        with fs.repair.transaction() as ftx:
            fs.t["meta"].put(ftx.tx, KEY_NEXT_INO, U64.pack(1 << 31))
        fs = reopen(fs)
        big = _file(fs, b"big", b"x")
        assert big >= 1 << 31
        fs.mkdir(TOP, b"s", 0o755, 0, 0)
        snap = fs.lookup(TOP, b"s").ino
        with pytest.raises(FsError) as e:
            fs.lookup(snap, b"big")
        assert e.value.errno == errno.EOVERFLOW
        assert [name for name, _, _ in fs.readdir(snap, 0)] == [b"queues", b"tables"]  # (left out of listings)
        assert read_all(fs, big) == b"x"
    finally:
        fs.close()


def test_a_snapshot_read_is_verified_and_scrub_checks_dead_list_pages(tmp_path):
    """A page only a snapshot still holds (on the dead list) keeps its checksum: damage there
    fails the snapshot's read with EIO (never wrong bytes), and scrub and fsck report it."""
    from traxfs.fs.engine.page import PAGE_SIZE
    from traxfs.fs.scrub import scrub

    fs = new_fs(str(tmp_path / "fs.img"))
    try:
        _file(fs, b"f", os.urandom(8 * PAGE_SIZE))
        fs.mkdir(TOP, b"s", 0o755, 0, 0)
        fs.unlink(ROOT_INO, b"f")
        (first, count, _, _), = dead_runs(fs.t["dead"])
        assert scrub(fs, repair=False).damaged == [] and fsck(fs).problems == []
        fs.e.raw.write((first + 3) * PAGE_SIZE, b"\xee" * 100)  # damage one page of it
        fs.e.raw.flush()
        snap_f = fs.lookup(fs.lookup(TOP, b"s").ino, b"f").ino
        with pytest.raises(FsError) as e:
            read_all(fs, snap_f)
        assert e.value.errno == errno.EIO
        h = fs.open_file(snap_f, os.O_RDONLY)
        assert len(h.read(0, 3 * PAGE_SIZE)) == 3 * PAGE_SIZE  # the pages around it still read
        h.release()
        rep = scrub(fs, repair=False)
        assert len(rep.damaged + rep.unrepairable) == 1, rep.as_dict()
        assert any("checksum" in p for p in fsck(fs).problems)
    finally:
        fs.close()


def test_an_interrupted_delete_releases_the_frozen_queues_and_tables(tmp_path):
    """A delete a crash interrupted is finished at mount: the tables' frozen records go in its
    last transaction; the queue store, opened after it, drops the gone snapshot's records and
    pins (``QueueStore.keep_frozen``); fsck is clean."""
    from traxfs.fs.queues.index import FROZEN as QFROZEN
    from traxfs.fs.snapshot_store import _REC, DELETING
    from traxfs.fs.tables.index import FROZEN as TFROZEN

    fs = new_fs(str(tmp_path / "fs.img"))
    try:
        q = fs.queues._made_store().create(b"q")
        q.append(b"one\ntwo\n")
        tables = fs._root_names[b"tables"]
        table = tables.store.create(b"t", "id int64")
        tables.store.append(table, [[1, 2]])
        fs.mkdir(TOP, b"keep", 0o755, 0, 0)
        fs.mkdir(TOP, b"gone", 0o755, 0, 0)
        gone = fs.snapshots.by_name(b"gone")
        with fs.repair.transaction() as ftx:
            fs.t["snapshots"].put(ftx.tx, U64.pack(gone.epoch), _REC.pack(DELETING, gone.created_ns) + b"gone")
        fs.sync()
        fs = reopen(fs, crash=True)
        keep = fs.snapshots.by_name(b"keep").epoch
        qs, ts = fs.queues.store, fs._root_names[b"tables"].store
        assert sorted(qs.frozen) == sorted(ts.frozen) == [keep]
        assert [k[len(QFROZEN):len(QFROZEN) + 8] for k in qs.t["queues"].keys(QFROZEN, QFROZEN + b"\xff")] == \
            [U64.pack(keep)]
        assert [k[len(TFROZEN):len(TFROZEN) + 8] for k in ts.t["tables"].keys(TFROZEN, TFROZEN + b"\xff")] == \
            [U64.pack(keep)]
        assert set(qs.get(b"q").pins) == {-keep}
        assert fsck(fs).problems == []
    finally:
        fs.close()

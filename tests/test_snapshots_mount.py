"""Snapshots through a real FUSE mount (``/.snapshots``): browsing a snapshot (files, directories
with ``.`` and ``..``, symbolic links, xattrs, stable inode numbers across a remount), EROFS for
every change inside one, the errno of bad input with nothing changed, a writer hammering files
while snapshots are taken (each snapshot sees a consistent state), SIGKILL of the daemon during
a create, a delete and copy-on-write writes (then: acknowledged snapshots whole, fsck clean),
and the space a delete gives back (statfs); `trax snapshot`; Spark reading a snapshot while a
writer rewrites its files; a hypothesis state machine through the mount."""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from conftest import IO_PHASES
from fsmount import trax, traxfs_mount
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from waiting import wait_for

MiB = 1 << 20


@pytest.fixture
def m(tmp_path):
    with traxfs_mount(tmp_path, size=256 * MiB) as mount:
        yield mount


def snap(mp: Path, name: str) -> Path:
    (mp / ".snapshots" / name).mkdir()
    return mp / ".snapshots" / name


def tree_of(root: Path) -> dict[str, object]:
    """Every entry below ``root``: file contents, link targets, directories (as None)."""
    out: dict[str, object] = {}
    for dirpath, dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirs:
            p = os.path.join(dirpath, d)
            out[os.path.normpath(os.path.join(rel, d))] = os.readlink(p) if os.path.islink(p) else None
        for f in files:
            p = os.path.join(dirpath, f)
            out[os.path.normpath(os.path.join(rel, f))] = ("link", os.readlink(p)) if os.path.islink(p) else Path(p).read_bytes()
    return out


def live_tree(mp: Path) -> dict[str, object]:
    return {k: v for k, v in tree_of(mp).items()
            if k.split(os.sep)[0] not in (".trax", ".snapshots", "queues", "tables")}


def snap_tree(root: Path) -> dict[str, object]:
    """A snapshot's tree without its frozen queues and tables (test_snapshots_tables.py)."""
    return {k: v for k, v in tree_of(root).items() if k.split(os.sep)[0] not in ("queues", "tables")}


def test_browse_a_snapshot(m):
    mp = m.mp
    (mp / "d" / "e").mkdir(parents=True)
    (mp / "d" / "f.txt").write_bytes(b"first version")
    (mp / "big").write_bytes(os.urandom(3 * MiB))
    os.symlink("d/f.txt", mp / "ln")
    os.setxattr(mp / "d" / "f.txt", "user.color", b"blue")
    before = live_tree(mp)
    s = snap(mp, "one")
    (mp / "d" / "f.txt").write_bytes(b"second")
    os.setxattr(mp / "d" / "f.txt", "user.color", b"red")
    with open(mp / "big", "r+b") as f:
        f.seek(MiB)
        f.write(b"x" * 5000)
    os.unlink(mp / "ln")
    (mp / "d" / "e").rmdir()
    (mp / "new").write_text("after")
    assert snap_tree(s) == before
    assert os.getxattr(s / "d" / "f.txt", "user.color") == b"blue"
    assert os.listxattr(s / "d" / "f.txt") == ["user.color"]
    assert os.readlink(s / "ln") == "d/f.txt" and (s / "ln").read_bytes() == b"first version"
    assert os.stat(s / "d" / "..").st_ino == os.stat(s).st_ino
    assert os.stat(s / "..").st_ino == os.stat(mp / ".snapshots").st_ino
    names = sorted(e.name for e in os.scandir(s))
    assert names == ["big", "d", "ln", "queues", "tables"]  # (the frozen queues and tables too)
    assert os.stat(s / "big").st_blocks == 3 * MiB // 512
    inos = {p: os.stat(s / p).st_ino for p in ("d", "d/f.txt", "big")}
    m.stop()
    m.start()
    assert {p: os.stat(s / p).st_ino for p in inos} == inos  # stable across remounts
    assert snap_tree(s) == before
    assert os.listdir(mp / ".snapshots") == ["one"]


def test_changes_inside_a_snapshot_are_refused_and_bad_input_changes_nothing(m):
    mp = m.mp
    (mp / "f").write_bytes(b"data")
    (mp / "dir").mkdir()
    s = snap(mp, "s")
    before = (sorted(os.listdir(mp / ".snapshots")), snap_tree(s), live_tree(mp))
    refused = [
        (lambda: (s / "f").write_bytes(b"no"), errno.EROFS),
        (lambda: open(s / "new", "w"), errno.EROFS),
        (lambda: (s / "newdir").mkdir(), errno.EROFS),
        (lambda: (s / "f").unlink(), errno.EROFS),
        (lambda: (s / "dir").rmdir(), errno.EROFS),
        (lambda: os.chmod(s / "f", 0o600), errno.EROFS),
        (lambda: os.truncate(s / "f", 0), errno.EROFS),
        (lambda: os.setxattr(s / "f", "user.x", b"1"), errno.EROFS),
        (lambda: os.symlink("x", s / "l"), errno.EROFS),
        (lambda: os.rename(s / "f", s / "g"), errno.EROFS),
        (lambda: os.rename(mp / "f", s / "g"), errno.EXDEV),
        (lambda: os.rename(s / "f", mp / "g"), errno.EXDEV),
        (lambda: os.rename(mp / "dir", mp / ".snapshots" / "dir"), errno.EXDEV),
        (lambda: os.link(mp / "f", s / "g"), errno.EXDEV),
        (lambda: (mp / ".snapshots" / ("x" * 256)).mkdir(), errno.ENAMETOOLONG),
        (lambda: (mp / ".snapshots" / "s").mkdir(), errno.EEXIST),
        (lambda: (mp / ".snapshots" / "nope").rmdir(), errno.ENOENT),
        (lambda: (mp / ".snapshots" / "s").unlink(), errno.EISDIR),
        (lambda: (mp / ".snapshots" / "file").write_text("x"), errno.EROFS),
        (lambda: os.rename(mp / ".snapshots" / "s", mp / ".snapshots" / "t"), errno.EROFS),
        (lambda: (mp / ".snapshots").rmdir(), errno.EPERM),
    ]
    for call, want in refused:
        with pytest.raises(OSError) as e:
            call()
        assert e.value.errno == want, (e.value, want)
    assert (sorted(os.listdir(mp / ".snapshots")), snap_tree(s), live_tree(mp)) == before


def test_a_writer_hammering_files_during_creates_sees_consistent_snapshots(m):
    """The writer rewrites files a, b, c in that order, each whole with round number i: a
    snapshot sees each file uniform (no write half in), and a ≥ b ≥ c (nothing later without
    everything earlier)."""
    mp = m.mp
    names = ["a", "b", "c"]
    size = 64 * 1024
    for n in names:
        (mp / n).write_bytes(bytes(size))
    stop = threading.Event()
    rounds = [0]

    def writer():
        fds = [os.open(mp / n, os.O_WRONLY) for n in names]
        try:
            i = 0
            while not stop.is_set():
                i = i % 250 + 1
                for fd in fds:
                    os.pwrite(fd, bytes([i]) * size, 0)
                rounds[0] += 1
        finally:
            for fd in fds:
                os.close(fd)

    t = threading.Thread(target=writer)
    t.start()
    try:
        made = []
        for k in range(8):
            time.sleep(0.05)
            made.append(snap(mp, f"s{k}"))
    finally:
        stop.set()
        t.join()
    assert rounds[0] > 8
    for s in made:
        seen = []
        for n in names:
            data = (s / n).read_bytes()
            assert len(data) == size and data == bytes([data[0]]) * size, (s, n)
            seen.append(data[0])
        a, b, c = seen
        # rounds wrap at 250: compare by distance
        assert (a - b) % 250 in (0, 1) and (b - c) % 250 in (0, 1) and (a - c) % 250 in (0, 1), (s, seen)


def _free(mp: Path) -> int:
    st = os.statvfs(mp)
    return st.f_bfree


def test_statfs_space_returns_after_delete(m):
    mp = m.mp
    (mp / "f").write_bytes(os.urandom(8 * MiB))
    os.sync()
    s = snap(mp, "s")
    free0 = _free(mp)
    with open(mp / "f", "r+b") as f:  # copy-on-write: the snapshot keeps the old 8 MiB
        f.write(os.urandom(8 * MiB))
    (mp / "f").unlink()
    os.sync()
    time.sleep(1.5)  # frees count once durable (the periodic commit)
    assert _free(mp) <= free0 + 64  # the snapshot holds the old pages
    held = (s / "f").stat().st_size
    assert held == 8 * MiB
    (mp / ".snapshots" / "s").rmdir()

    def freed() -> bool:  # frees count once durable: the periodic commit, late under load
        os.sync()
        return _free(mp) >= free0 + 2048 - 64  # 8 MiB back

    wait_for(freed, lambda: f"{_free(mp)} pages free, {free0 + 2048 - 64} expected")
    assert os.listdir(mp / ".snapshots") == []


# ----- SIGKILL ------------------------------------------------------------------------------------
def _fsck_clean(m) -> None:
    m.stop()
    r = m.fsck()
    assert r.returncode == 0, r.stdout + r.stderr
    m.start()


def test_sigkill_during_create_delete_and_copy_on_write(m):
    mp = m.mp
    (mp / "d").mkdir()
    for k in range(20):
        (mp / "d" / f"f{k}").write_bytes(bytes([k]) * 100_000)
    want = live_tree(mp)
    snap(mp, "acked")  # acknowledged: must survive
    # copy-on-write writes killed mid-way
    stop = threading.Event()

    def rewrite():
        k = 0
        try:
            while not stop.is_set():
                with open(mp / "d" / f"f{k % 20}", "r+b") as f:
                    f.seek((k * 7919) % 90_000)
                    f.write(os.urandom(10_000))
                k += 1
        except OSError:
            return  # the daemon died

    t = threading.Thread(target=rewrite)
    t.start()
    time.sleep(0.5)
    m.kill()
    stop.set()
    t.join()
    m.start()
    assert snap_tree(mp / ".snapshots" / "acked") == want
    _fsck_clean(m)

    # a create killed: the snapshot is whole or absent
    def make(name):
        try:
            (mp / ".snapshots" / name).mkdir()
        except OSError:
            pass

    live_now = live_tree(mp)
    t = threading.Thread(target=make, args=("maybe",))
    t.start()
    time.sleep(0.002)
    m.kill()
    t.join()
    m.start()
    if (mp / ".snapshots" / "maybe").exists():
        assert snap_tree(mp / ".snapshots" / "maybe") == live_now
    assert snap_tree(mp / ".snapshots" / "acked") == want
    _fsck_clean(m)

    # a delete killed: finished at the next mount, or never begun; the space comes back
    for k in range(20):  # give "acked" much to hold alone
        (mp / "d" / f"f{k}").unlink()
    os.sync()
    def remove():
        try:
            (mp / ".snapshots" / "acked").rmdir()
        except OSError:
            pass  # the daemon died under it

    t = threading.Thread(target=remove)
    t.start()
    time.sleep(0.01)
    m.kill()
    t.join()
    m.start()
    names = os.listdir(mp / ".snapshots")
    if "acked" in names:
        assert snap_tree(mp / ".snapshots" / "acked") == want
        (mp / ".snapshots" / "acked").rmdir()
    if "maybe" in names:
        (mp / ".snapshots" / "maybe").rmdir()
    os.sync()
    _fsck_clean(m)
    assert os.listdir(mp / ".snapshots") == []


def test_trax_snapshot_create_list_delete(m):
    mp = m.mp
    (mp / "f").write_bytes(os.urandom(2 * MiB))
    r = trax("snapshot", "create", str(mp), "s1", home=m.home)
    assert "created" in r.stdout and (mp / ".snapshots" / "s1").is_dir()
    with open(mp / "f", "r+b") as f:  # 1 MiB copied: the snapshot alone holds its old 1 MiB
        f.write(os.urandom(MiB))
    listed = json.loads(trax("--json", "snapshot", "list", str(mp), home=m.home).stdout)
    assert [(d["name"], d["unique_bytes"]) for d in listed] == [("s1", MiB)]
    assert listed[0]["created_ns"] <= time.time_ns() and listed[0]["id"] >= 1
    text = trax("snapshot", "list", str(mp), home=m.home).stdout
    assert text.splitlines()[0].split() == ["SNAPSHOT", "ID", "CREATED", "UNIQUE"] and "s1" in text
    r = trax("snapshot", "create", str(mp), "s1", home=m.home, check=False)
    assert r.returncode == 1 and "File exists" in r.stderr
    r = trax("snapshot", "create", str(mp), "x" * 256, home=m.home, check=False)
    assert r.returncode == 1 and "too long" in r.stderr
    done = json.loads(trax("snapshot", "delete", "--json", str(mp), "s1", home=m.home).stdout)
    assert done["freed_bytes"] == MiB
    r = trax("snapshot", "delete", str(mp), "s1", home=m.home, check=False)
    assert r.returncode == 1 and "No such file" in r.stderr
    assert "no snapshots" in trax("snapshot", "list", str(mp), home=m.home).stdout


@pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH (Spark needs Java 17+)")
@pytest.mark.timeout(600)
def test_spark_reads_a_snapshot_while_a_writer_rewrites_the_files(m, spark):
    """Spark writes a data set, a snapshot is taken, then a writer keeps rewriting (in place,
    truncating, unlinking and recreating) the data set's files while Spark reads the snapshot's
    copy: Spark gets exactly the snapshot's rows."""
    from traxfs.tools.spark_job import _generate, checksums, expected

    rows = 20_000
    data = m.mp / "data"
    _generate(spark, rows, 1).write.parquet(data.as_uri())
    s = snap(m.mp, "before")
    parts = sorted(p for p in data.iterdir() if p.name.startswith("part-"))
    stop = threading.Event()
    rewrites = [0]

    def writer():
        k = 0
        while not stop.is_set():
            p = parts[k % len(parts)]
            size = p.stat().st_size
            if k % 3 == 0:
                with open(p, "r+b") as f:
                    f.write(os.urandom(size))
            elif k % 3 == 1:
                os.truncate(p, size // 2)
                with open(p, "ab") as f:
                    f.write(os.urandom(size - size // 2))
            else:
                p.unlink()
                p.write_bytes(os.urandom(size))
            k += 1
            rewrites[0] = k

    t = threading.Thread(target=writer)
    t.start()
    try:
        got = checksums(spark.read.parquet((s / "data").as_uri()))
    finally:
        stop.set()
        t.join()
    assert rewrites[0] > len(parts)
    assert got == expected(rows, 1)


# ----- a state machine through the mount -----------------------------------------------------------
class MountedSnapshotMachine(RuleBasedStateMachine):
    """Writes, truncates, renames, unlinks, snapshot creates and deletes and remounts through the
    real mount, against a model that keeps a copy of the files per snapshot."""

    mount = None  # set by the test: one mount for every example (each starts by emptying it)

    def __init__(self) -> None:
        super().__init__()
        mp = self.mount.mp
        for name in os.listdir(mp / ".snapshots"):
            os.rmdir(mp / ".snapshots" / name)
        shutil.rmtree(mp / "w", ignore_errors=True)
        (mp / "w").mkdir()
        self.live: dict[str, bytes] = {}
        self.snaps: dict[str, dict[str, bytes]] = {}

    @property
    def w(self) -> Path:
        return self.mount.mp / "w"

    @rule(name=st.sampled_from(["a", "b", "c"]), off=st.integers(0, 30_000), n=st.integers(1, 12_000),
          seed=st.integers(0, 255))
    def write(self, name, off, n, seed):
        data = bytes((seed + i) % 251 for i in range(n))
        fd = os.open(self.w / name, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, off)
        finally:
            os.close(fd)
        old = self.live.get(name, b"")
        old = old + bytes(max(0, off - len(old)))
        self.live[name] = old[:off] + data + old[off + n:]

    @precondition(lambda self: self.live)
    @rule(data=st.data(), size=st.integers(0, 40_000))
    def truncate(self, data, size):
        name = data.draw(st.sampled_from(sorted(self.live)))
        os.truncate(self.w / name, size)
        old = self.live[name]
        self.live[name] = old[:size] + bytes(max(0, size - len(old)))

    @precondition(lambda self: self.live)
    @rule(data=st.data(), to=st.sampled_from(["a", "b", "c"]))
    def rename(self, data, to):
        name = data.draw(st.sampled_from(sorted(self.live)))
        os.rename(self.w / name, self.w / to)
        self.live[to] = self.live.pop(name)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def unlink(self, data):
        name = data.draw(st.sampled_from(sorted(self.live)))
        os.unlink(self.w / name)
        del self.live[name]

    @rule(name=st.sampled_from(["s1", "s2", "s3"]))
    def snapshot(self, name):
        path = self.mount.mp / ".snapshots" / name
        if name in self.snaps:
            with pytest.raises(FileExistsError):
                path.mkdir()
            return
        path.mkdir()
        self.snaps[name] = dict(self.live)

    @rule(name=st.sampled_from(["s1", "s2", "s3"]))
    def delete(self, name):
        path = self.mount.mp / ".snapshots" / name
        if name not in self.snaps:
            with pytest.raises(FileNotFoundError):
                path.rmdir()
            return
        path.rmdir()
        del self.snaps[name]

    @rule()
    def remount(self):
        self.mount.stop()
        self.mount.start()

    @invariant()
    def views_match(self):
        def files(d: Path) -> dict[str, bytes]:
            return {p.name: p.read_bytes() for p in d.iterdir()}

        assert files(self.w) == self.live
        assert sorted(os.listdir(self.mount.mp / ".snapshots")) == sorted(self.snaps)
        for name, want in self.snaps.items():
            assert files(self.mount.mp / ".snapshots" / name / "w") == want, name


def test_state_machine_through_the_mount(m):
    MountedSnapshotMachine.mount = m
    run_state_machine_as_test(MountedSnapshotMachine,
                              settings=settings(max_examples=5, stateful_step_count=15, phases=IO_PHASES))

"""No-wait reads (``traxfs.fs.engine.nowait``): an operation run inside ``no_wait()`` finishes
when everything it touches is in memory and raises ``WouldBlock`` — having changed nothing —
the moment it would wait: a page not resident, a page or structure latch held by another
thread, the filesystem lock taken. Outside ``no_wait()`` the same calls wait as before."""

from __future__ import annotations

import threading

import pytest
from conftest import new_engine

from traxfs.fs.engine.nowait import WouldBlock, acquire, active, no_wait
from traxfs.fs.filesystem import ROOT_INO, FileSystem
from traxfs.fs.struct.btree import BTree
from traxfs.volume.device import create_image


def _tree(tmp_path, n=3000):
    eng = new_engine(str(tmp_path / "e.img"))
    tx = eng.begin()
    tree = BTree.create(eng, tx, "t")
    for i in range(n):
        tree.put(tx, i.to_bytes(8, "big"), b"v%d" % i)
    eng.commit(tx)
    return eng, tree


def _holding(lock):
    """Start a thread that holds ``lock`` until the returned event is set."""
    taken, release = threading.Event(), threading.Event()

    def hold():
        with lock:
            taken.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    assert taken.wait(10)
    return release, t


def test_no_wait_nests_and_acquire_refuses_a_held_lock():
    lock = threading.Lock()
    assert not active()
    with no_wait():
        with no_wait():
            assert active()
        assert active()
        acquire(lock)  # free: taken
        with pytest.raises(WouldBlock):
            acquire(lock)  # held (by us, not re-entrant): refused, not waited for
        lock.release()
    assert not active()


@pytest.mark.timeout(60)
def test_resident_reads_finish_cold_pages_would_block(tmp_path):
    eng, tree = _tree(tmp_path)
    with no_wait():
        assert tree.get((17).to_bytes(8, "big")) == b"v17"
        assert len(list(tree.items((100).to_bytes(8, "big"), (200).to_bytes(8, "big")))) == 100
    eng.checkpoint()  # everything written back; then forget every frame: all pages cold
    eng.buffer.drop_all()
    resident = eng.buffer.resident()
    with no_wait(), pytest.raises(WouldBlock, match="not resident"):
        tree.get((17).to_bytes(8, "big"))
    assert eng.buffer.resident() == resident  # nothing was loaded or pinned by the attempt
    assert tree.get((17).to_bytes(8, "big")) == b"v17"  # outside no_wait: read from the device
    with no_wait():
        assert tree.get((17).to_bytes(8, "big")) == b"v17"  # its path is resident now
    eng.close()


@pytest.mark.timeout(60)
def test_latches_held_elsewhere_would_block(tmp_path):
    eng, tree = _tree(tmp_path, n=10)
    key = (3).to_bytes(8, "big")
    release, t = _holding(tree.latch.lock)  # a writer inside the structure
    try:
        with no_wait(), pytest.raises(WouldBlock):
            tree.get(key)
    finally:
        release.set()
        t.join()
    root = tree._root()
    with eng.page(root) as f:
        frame_latch = f.latch
    release, t = _holding(frame_latch)  # e.g. a checkpoint sealing the page
    try:
        with no_wait(), pytest.raises(WouldBlock):
            tree.get(key)
        pins = eng.buffer._frames[root].pins
        assert pins == 0  # the refused latch left no pin behind
    finally:
        release.set()
        t.join()
    with no_wait():
        assert tree.get(key) == b"v3"
    eng.close()


@pytest.mark.timeout(60)
def test_filesystem_try_now(tmp_path):
    dev = create_image(str(tmp_path / "fs.img"), 256 << 20)
    FileSystem.mkfs(dev)
    fs = FileSystem.open(dev)
    try:
        node = fs.create(ROOT_INO, b"f", 0o100644, 0, 0)
        fs.write(node.ino, 0, b"x")  # a lookup also reads the file's extent map (st_blocks): resident now
        assert fs.try_now(fs.lookup, ROOT_INO, b"f").ino == node.ino
        assert fs.try_now(fs.getattr, node.ino).mode == 0o100644
        from traxfs.fs.errors import FsError

        with pytest.raises(FsError):  # errors of the call itself come through as they are
            fs.try_now(fs.lookup, ROOT_INO, b"missing")
        release, t = _holding(fs.inodes.lock)  # an operation in progress in a worker
        try:
            with pytest.raises(WouldBlock, match="filesystem lock"):
                fs.try_now(fs.getattr, node.ino)
        finally:
            release.set()
            t.join()
        assert not active()
    finally:
        fs.close()
        dev.close()

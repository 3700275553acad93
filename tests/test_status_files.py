"""The snapshot rules of the /.trax status files (traxfs.fs.subtrees.status_files), one by one, on a
clock the test moves; the FUSE mount test (test_mount_cli) checks the sizes through the kernel.

Each rule keeps "st_size == bytes read" for one way of reading; the contents here differ in
length from one snapshot to the next, so a rule that hands out the wrong snapshot shows."""

from __future__ import annotations

import itertools

from traxfs.fs.subtrees.status_files import FRESH, HOLD, StatusSnapshots

R1, R2 = 101, 202


class Rig:
    def __init__(self) -> None:
        self.now = 1000.0
        self.snaps = StatusSnapshots(clock=lambda: self.now)
        self.counter = itertools.count(1)
        self.fhs = itertools.count(1)

    def stat(self, reader: int, name: str = "f") -> int:
        """What lookup/getattr does: the known snapshot, else a new one (longer each time)."""
        data = self.snaps.known(name, reader)
        if data is None:
            data = self.snaps.made(name, reader, b"x" * next(self.counter))
        return len(data)

    def open(self, reader: int, name: str = "f") -> int:
        self.stat(reader, name)  # the kernel's permission check before the open
        fh = next(self.fhs)
        assert self.snaps.opened(fh, name, reader)
        return fh

    def read(self, fh: int) -> int:
        return len(self.snaps.read(fh))


def test_stat_then_open_reads_what_stat_said_even_after_fresh() -> None:
    r = Rig()
    size = r.stat(R1)
    r.now += FRESH * 5  # well past the sharing window, within the reader's hold
    assert r.read(r.open(R1)) == size


def test_open_then_fstat_reports_the_open_snapshot() -> None:
    r = Rig()
    fh = r.open(R1)
    r.now += FRESH * 5
    assert r.stat(R1) == r.read(fh)


def test_stat_in_one_process_cat_in_another_share_the_unopened_snapshot() -> None:
    r = Rig()
    size = r.stat(R1)
    assert r.read(r.open(R2)) == size


def test_two_readers_interleaved_each_read_their_own() -> None:
    r = Rig()
    s1 = r.stat(R1)
    fh2 = r.open(R2)  # takes the shared snapshot and opens it: the next asker gets a new one
    r.now += FRESH * 2
    s2 = r.stat(R2)  # R2 holds it open: still its size
    assert s2 == r.read(fh2) == s1
    assert r.read(r.open(R1)) == s1


def test_a_reader_in_a_loop_sees_new_contents_and_holds_end() -> None:
    r = Rig()
    sizes = []
    for _ in range(3):
        fh = r.open(R1)
        sizes.append(r.read(fh))
        assert r.snaps.released(fh)
    assert sizes[0] < sizes[1] < sizes[2], sizes
    told = r.stat(R2)
    r.now += HOLD + 1
    assert r.stat(R2) != told  # a hold ends: a stat long after gets current contents

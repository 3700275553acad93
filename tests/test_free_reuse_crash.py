"""A page freed by a commit that is not yet durable must not take bytes written outside the log.

A B+tree shrinking frees leaves; a queue block or a file extent allocated right after may get
those pages and writes its bytes straight to the device, before any log record. If the crash
comes before the freeing commit is on disk, recovery undoes nothing (the free never happened)
and the tree points at the raw bytes: CI met it as ``bad magic`` on a queue's index leaf holding
a queue block. Every free is now reusable only once its commit is durable.
"""

from __future__ import annotations

import pytest

from traxfs.fs.engine.alloc import NoSpace
from traxfs.fs.engine.engine import Engine
from traxfs.fs.engine.logmanager import GroupCommitPolicy
from traxfs.fs.engine.page import PAGE_SIZE
from traxfs.fs.struct.btree import BTree

pytestmark = pytest.mark.timeout(120)

KEYS = [b"k%06d" % i for i in range(1500)]
QUIET = GroupCommitPolicy(max_commits=1 << 30, max_bytes=1 << 30, max_delay=60)  # nobody flushes


def _take_all_free_space(eng: Engine, tx) -> None:
    n = eng.free_pages()
    while n:
        try:
            eng.alloc_region(tx, n)
        except NoSpace:
            n //= 2
        else:
            n = eng.free_pages()


def _raw_fill(eng: Engine, tx) -> list[int]:
    """Take every page the allocator hands out and write raw bytes to it, as a queue block or a
    file extent does (claimed, written, flushed to the device: no log record describes them)."""
    got = []
    while True:
        try:
            first = eng.alloc_region(tx, 1)
        except NoSpace:
            return got
        eng.raw.claim(first, 1)
        eng.raw.write(first * PAGE_SIZE, b"RAWBYTES" * (PAGE_SIZE // 8))
        got.append(first)


def test_raw_bytes_never_land_on_pages_a_crash_gives_back(engine_dev):
    eng = Engine.open(engine_dev, policy=QUIET)
    tx = eng.begin()
    t = BTree.create(eng, tx, "t")
    for k in KEYS:
        t.put(tx, k, b"v" * 40)
    _take_all_free_space(eng, tx)  # the leaves the deletes free are the only room left
    eng.commit(tx)  # durable
    eng.checkpoint()  # the leaves' history before this is on the device only: redo cannot rebuild them
    in_use_before = eng.pages_in_use()
    tx = eng.begin()
    for k in KEYS[100:]:
        t.delete(tx, k)
    eng.soft_commit(tx)  # its leaves are freed, the commit is not on disk
    tx = eng.begin()
    taken = _raw_fill(eng, tx)
    assert taken, "the raw fill got no page at all"
    eng.dev.flush()
    eng.unclean_shutdown()

    eng = Engine.open(engine_dev)
    t = BTree.open_named(eng, "t")
    got = dict(t.items())  # the deletes may survive or not, but no leaf may hold raw bytes
    assert set(got) in (set(KEYS), set(KEYS[:100])), len(got)
    assert all(v == b"v" * 40 for v in got.values())
    assert set(eng.pages_in_use()) <= set(in_use_before)
    eng.close()


def test_a_free_is_reusable_once_its_commit_is_durable(engine_dev):
    """The quarantine costs no space: once the freeing commit is durable the pages are free again,
    and an allocation that finds no other room forces the log to get them."""
    eng = Engine.open(engine_dev, policy=QUIET)
    tx = eng.begin()
    first = eng.alloc_region(tx, 8)
    eng.commit(tx)
    tx = eng.begin()
    eng.free_region(tx, first, 8)
    handle = eng.soft_commit(tx)
    tx = eng.begin()
    assert not eng.alloc_at(tx, first, 8)  # its free is not on disk yet
    handle.wait()
    assert eng.alloc_at(tx, first, 8)
    eng.abort(tx)
    eng.close()

"""An engine formatted over an earlier one: the pages the earlier format left on the device are
not this engine's, whatever LSN they carry.

LSNs start anew at every format, so a left-over page (its own number, a valid checksum, a higher
LSN) used to pass for current: redo skipped every record of it, and the first crash after a
re-format handed back the old tree's contents for the new one. Every page's checksum is now
seeded with a value drawn at format (``Superblock.page_seed``); a version 2 engine (seed 0)
still opens and keeps its unseeded pages.
"""

from __future__ import annotations

import os

import crc32c
import pytest

from traxfs.fs.engine import engine as engine_module
from traxfs.fs.engine.check import check_engine
from traxfs.fs.engine.engine import Engine
from traxfs.fs.engine.page import PAGE_SIZE, PageCorrupt, seal, verify
from traxfs.fs.engine.superblock import _V2, COPIES, read_superblock
from traxfs.fs.struct.btree import BTree
from traxfs.volume.device import ImageFileDevice, create_image

pytestmark = pytest.mark.timeout(120)


def _old_engine(path: str) -> int:
    """An engine whose tree pages carry LSNs far past where a new format's log starts; returns
    the page seed it was formatted with."""
    dev = create_image(path, 16 << 20)
    Engine.format(dev, log_size=2 << 20)
    e = Engine.open(dev)
    tx = e.begin()
    t = BTree.create(e, tx, "old")
    e.commit(tx)
    for r in range(300):
        tx = e.begin()
        for i in range(20):
            t.put(tx, b"k%05d" % i, b"old-%d" % r)
        e.commit(tx)
    seed = e.page_seed
    e.close()
    dev.close()
    return seed


def test_a_crash_after_a_reformat_keeps_the_new_engines_committed_work(tmp_path):
    path = str(tmp_path / "e.img")
    old_seed = _old_engine(path)
    dev = ImageFileDevice(path)
    Engine.format(dev, log_size=2 << 20)
    e = Engine.open(dev)
    assert e.page_seed not in (0, old_seed)
    tx = e.begin()
    t = BTree.create(e, tx, "new")  # the same page numbers the old tree had
    for i in range(5):
        t.put(tx, b"n%05d" % i, b"new")
    e.commit(tx)
    e.unclean_shutdown()  # nothing written back: the device still holds the old tree's pages
    dev.close()
    dev = ImageFileDevice(path)
    try:
        e = Engine.open(dev)
        assert BTree.open_named(e, "old") is None
        t = BTree.open_named(e, "new")
        assert list(t.items()) == [(b"n%05d" % i, b"new") for i in range(5)]
        assert check_engine(e) == []
        e.close()
    finally:
        dev.close()


def test_a_page_of_an_earlier_format_is_named_as_such(tmp_path):
    path = str(tmp_path / "e.img")
    old_seed = _old_engine(path)
    dev = ImageFileDevice(path)
    try:
        sb = read_superblock(dev, "engine")
        pid = next(p for p in range(1 + sb.map_pages, sb.page_count)  # a page the old tree wrote
                   if any(dev.read(sb.pages_offset + p * PAGE_SIZE, 32)))
        old_page = dev.read(sb.pages_offset + pid * PAGE_SIZE, PAGE_SIZE)
        verify(old_page, pid, old_seed)
        Engine.format(dev, log_size=2 << 20)
        new = read_superblock(dev, "engine").page_seed
        with pytest.raises(PageCorrupt, match="left by an earlier format"):
            verify(old_page, pid, new)
    finally:
        dev.close()


def test_a_new_format_never_reuses_the_seed_of_the_engine_it_replaces(tmp_path, monkeypatch):
    path = str(tmp_path / "e.img")
    dev = create_image(path, 8 << 20)
    try:
        Engine.format(dev, log_size=1 << 20)
        old = read_superblock(dev, "engine").page_seed
        draws = iter([old.to_bytes(4, "little"), bytes(4), old.to_bytes(4, "little"), b"\x01\x02\x03\x04"])
        real = os.urandom
        monkeypatch.setattr(engine_module.os, "urandom", lambda n: next(draws, None) or real(n))
        Engine.format(dev, log_size=1 << 20)
        assert read_superblock(dev, "engine").page_seed == 0x04030201
    finally:
        dev.close()


def _as_version_2(dev) -> None:
    """What a version 2 format left: its pages sealed without a seed, its superblock version 2."""
    sb = read_superblock(dev, "engine")
    for pid in range(1 + sb.map_pages):  # the catalog and the maps
        page = bytearray(dev.read(sb.pages_offset + pid * PAGE_SIZE, PAGE_SIZE))
        seal(page, pid, 0)
        dev.write(sb.pages_offset + pid * PAGE_SIZE, page)
    fields = [b"TRAXENG1", 2, sb.page_size, sb.log_offset, sb.log_size, sb.pages_offset, sb.page_count,
              sb.checkpoint_lsn, sb.trunc_lsn, sb.epoch, sb.seq, sb.log_id, sb.map_pages, sb.errors,
              sb.error_page, sb.in_use]
    body = _V2.pack(*fields)
    for off in COPIES:
        dev.write(off, (body + crc32c.crc32c(body).to_bytes(4, "little")).ljust(512, b"\0"))
    dev.flush()


def test_a_version_2_engine_opens_and_keeps_its_unseeded_pages(tmp_path):
    path = str(tmp_path / "e.img")
    dev = create_image(path, 8 << 20)
    try:
        Engine.format(dev, log_size=1 << 20)
        _as_version_2(dev)
        for round_ in range(2):
            e = Engine.open(dev)
            assert e.page_seed == 0
            tx = e.begin()
            t = BTree.open_named(e, "t") or BTree.create(e, tx, "t")
            t.put(tx, b"r%d" % round_, b"v")
            e.commit(tx)
            if round_ == 0:
                e.close()
            else:
                e.unclean_shutdown()
        sb = read_superblock(dev, "engine")
        assert sb.page_seed == 0
        e = Engine.open(dev)
        assert list(BTree.open_named(e, "t").items()) == [(b"r0", b"v"), (b"r1", b"v")]
        assert check_engine(e) == []
        e.close()
    finally:
        dev.close()

"""The per-file extent maps kept in memory (``DataMap._maps``): bounded, and when full the
oldest go, not all — clearing the whole cache made a walk over more files than it holds (stat,
unlink of a big directory) reload every map from the extent tree."""

from __future__ import annotations

import os
import stat

import pytest

from traxfs.fs import datamap
from traxfs.fs.filesystem import ROOT_INO

pytestmark = pytest.mark.timeout(120)


def test_a_full_cache_drops_its_oldest_maps_and_keeps_the_rest(image_fs, monkeypatch):
    fs = image_fs
    monkeypatch.setattr(datamap, "MAPS_CACHED", 16)
    dm = fs.files.data
    inos = []
    for i in range(40):
        ino = fs.create(ROOT_INO, f"f{i}".encode(), stat.S_IFREG | 0o644, 0, 0).ino
        fs.write(ino, 0, bytes([i]) * 5000)
        inos.append(ino)
    loads = []
    real = dm.all_extents
    monkeypatch.setattr(dm, "all_extents", lambda ino: loads.append(ino) or real(ino))
    sizes = []
    for ino in inos:  # one pass over more files than the cache holds
        dm.extents(ino, 0, 2)
        sizes.append(len(dm._maps))
    assert max(sizes) == 16
    full = sizes[sizes.index(16):]  # once full, a load drops two (an eighth), never the lot
    assert min(full) >= 16 - 16 // 8, sizes
    assert inos[-1] in dm._maps and inos[0] not in dm._maps
    loads.clear()
    for ino in inos[-8:]:  # the files used last are still cached
        dm.extents(ino, 0, 2)
    assert loads == []
    for i, ino in enumerate(inos):  # and every file reads back whole, cached or reloaded
        assert fs.read(ino, 0, 5000) == bytes([i]) * 5000


def test_a_new_file_is_made_with_its_map_and_flags_known(image_fs, monkeypatch):
    """A file just made holds no extents and no flags: neither is looked up in its tree, by the
    create's answer (st_blocks) nor by the first write — yet both are right, and stay right
    once the write changed the map."""
    fs = image_fs
    dm = fs.files.data
    loads, flag_reads = [], []
    real = dm.all_extents
    monkeypatch.setattr(dm, "all_extents", lambda ino: loads.append(ino) or real(ino))
    xattrs = fs.flags.t["xattrs"]
    real_get = xattrs.get
    monkeypatch.setattr(xattrs, "get", lambda key, *a: flag_reads.append(key) or real_get(key, *a))
    node, handle = fs.create_file(ROOT_INO, b"new", 0o644, os.O_WRONLY)  # as open(O_CREAT) and write
    assert node.blocks == 0
    handle.write(0, b"n" * 5000)
    handle.release()
    assert loads == []
    assert [k for k in flag_reads if k[:8] == node.ino.to_bytes(8, "big")] == []  # (the parent's are read)
    assert fs.getattr(node.ino).blocks == 16  # two pages (the map reloaded after the write's change)
    assert fs.read(node.ino, 0, 5000) == b"n" * 5000
    assert fs.flags.get(node.ino) == 0

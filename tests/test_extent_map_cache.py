"""The per-file extent maps kept in memory (``DataMap._maps``): bounded, and when full the
oldest go, not all — clearing the whole cache made a walk over more files than it holds (stat,
unlink of a big directory) reload every map from the extent tree."""

from __future__ import annotations

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

"""Salvaging a damaged B+tree (fsck's read around damaged pages), on a real engine and image:
a three-level tree, a page damaged on the device, and what :func:`salvage` still reads."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

from traxfs.fs.engine.engine import Engine
from traxfs.fs.engine.page import PAGE_SIZE
from traxfs.fs.struct.btree import BTree
from traxfs.fs.struct.btree_node import inner_child
from traxfs.fs.struct.btree_salvage import leaf_chains, salvage
from traxfs.fs.struct.common import aux_of, nslots
from traxfs.volume.device import ImageFileDevice

MiB = 1 << 20
N = 60_000


def key(i: int) -> bytes:
    return b"k%09d" % i


def value(i: int) -> bytes:
    return bytes([i % 251]) * 100


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> tuple[Path, int]:
    """An engine holding one tree of N entries, three levels deep; (image, header page)."""
    path = tmp_path_factory.mktemp("salvage") / "tree.img"
    dev = ImageFileDevice(str(path), 64 * MiB, create=True)
    Engine.format(dev, log_size=8 * MiB)
    eng = Engine.open(dev)
    tx = eng.begin()
    tree = BTree.bulk_create(eng, tx, [(key(i), value(i)) for i in range(N)], name="t")
    eng.commit(tx)
    header = tree.header
    eng.close()
    dev.close()
    return path, header


@contextmanager
def opened(path: Path, damaged: tuple[int, ...] = ()):
    """The engine of ``path`` — of a copy of it with a byte flipped in each page of ``damaged``."""
    if damaged:
        copy = path.with_name(f"copy-{'-'.join(map(str, damaged))}.img")
        copy.write_bytes(path.read_bytes())
        path = copy
    dev = ImageFileDevice(str(path))
    eng = Engine.open(dev)
    try:
        for pid in damaged:
            off = eng.sb.pages_offset + pid * PAGE_SIZE + 500
            raw = bytearray(dev.read(off, 1))
            dev.write(off, bytes([raw[0] ^ 0xFF]))
        eng.buffer.drop_all()
        yield eng
    finally:
        eng.close()
        dev.close()


def _shape(path: Path, header: int) -> tuple[int, list[int], list[list[int]]]:
    """(root, level-1 nodes, the leaves under each of them)."""
    with opened(path) as eng:
        root = BTree(eng, header)._root()  # noqa: SLF001 - the test picks pages to damage
        with eng.page(root) as f:
            mids = [inner_child(f.data, i) for i in range(nslots(f.data))]
        leaves = []
        for m in mids:
            with eng.page(m) as f:
                assert aux_of(f.data) == 1, "the tree is three levels deep"
                leaves.append([inner_child(f.data, i) for i in range(nslots(f.data))])
        return root, mids, leaves


def test_a_damaged_inner_node_loses_nothing(image) -> None:
    """The leaves under a damaged inner node are reached along the leaf chain."""
    path, header = image
    _, mids, _ = _shape(path, header)
    with opened(path, (mids[len(mids) // 2],)) as eng:
        s = salvage(eng, header)
    assert [p for p, _ in s.damaged] == [mids[len(mids) // 2]]
    assert s.lost == []
    assert s.entries == [(key(i), value(i)) for i in range(N)]


def test_a_damaged_leaf_loses_its_entries_and_says_which(image) -> None:
    path, header = image
    _, _, leaves = _shape(path, header)
    victim = leaves[1][3]
    with opened(path, (victim,)) as eng:
        s = salvage(eng, header)
    assert [p for p, _ in s.damaged] == [victim] and len(s.lost) == 1
    got = dict(s.entries)
    missing = [i for i in range(N) if key(i) not in got]
    assert 0 < len(missing) < 100 and missing == list(range(missing[0], missing[-1] + 1))
    assert s.lost == [(key(missing[0] - 1), key(missing[-1] + 1))]
    assert all(got[key(i)] == value(i) for i in range(N) if key(i) in got)


def test_an_inner_node_and_the_leaf_left_of_it(image) -> None:
    """The chain into the subtree starts at the leaf on its left: with that leaf damaged too,
    the subtree's leaves are out of reach (and reported lost) — until leaf_chains finds them."""
    path, header = image
    _, mids, leaves = _shape(path, header)
    k = len(mids) // 2
    with opened(path, (mids[k], leaves[k - 1][-1])) as eng:
        s = salvage(eng, header)
        owned = s.pages | {p for p, _ in s.damaged}
        chains = leaf_chains(eng, [p for group in leaves for p in group if p not in owned])
    assert len(s.damaged) == 2 and len(s.lost) == 1
    assert len(chains) == 1 and chains[0].pages == leaves[k] and chains[0].link == leaves[k + 1][0]

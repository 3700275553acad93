"""The B+tree (fs/struct/btree.py) against a dict: splits, free-at-empty deletes and merges,
range scans and floor, iterators under change, crashes in the middle of a split or of an abort's
logical undo (device snapshots), a failure inside a split, bulk builds, and ``check()``. What
every structure must do (the state machine, abort / reopen / unclean shutdown, concurrent
transactions) is in test_structures_contract.py.
"""

from __future__ import annotations

import random
import threading

import pytest
from conftest import bulk_build_all_or_nothing, device_snapshot, new_engine
from structure_kinds import BTREE

from traxfs.fs.engine import opcodes, slotted
from traxfs.fs.engine.alloc import NoSpace
from traxfs.fs.engine.check import check_engine
from traxfs.fs.engine.engine import Engine
from traxfs.fs.engine.logrecord import RecType
from traxfs.fs.engine.page import PAGE_SIZE
from traxfs.fs.struct.btree import BTree
from traxfs.fs.struct.btree_node import (
    COUNT_OFF,
    MAX_ENTRY,
    MAX_KEY,
    VERSION,
    VERSION_FIELD,
    VERSION_OFF,
    leaf_record,
)
from traxfs.fs.struct.common import U64, write_bytes
from traxfs.volume.device import ImageFileDevice

pytestmark = pytest.mark.timeout(240)


# ----- basics ----------------------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_put_get_overwrite_delete_and_bounds(eng):
    tree = BTREE.make(eng, "t")
    tx = eng.begin()
    assert tree.put(tx, b"b", b"2") is None
    assert tree.put(tx, b"a", b"1") is None
    assert tree.put(tx, b"", b"empty key") is None
    assert tree.put(tx, b"b", b"two") == b"2"
    assert tree.get(b"b") == b"two" and tree.get(b"zz") is None and tree.get(b"zz", 7) == 7
    assert b"a" in tree and b"c" not in tree
    assert tree.delete(tx, b"zz") is None
    assert tree.delete(tx, b"a") == b"1"
    eng.commit(tx)
    assert list(tree.items()) == [(b"", b"empty key"), (b"b", b"two")]
    assert len(tree) == 2
    with pytest.raises(ValueError, match="key of 1025 bytes"):
        tree.put(eng.begin(), b"k" * (MAX_KEY + 1), b"")
    with pytest.raises(ValueError, match="1301 bytes"):
        tree.put(eng.begin(), b"k" * 300, b"v" * (MAX_ENTRY - 299))
    tx = eng.begin()
    tree.put(tx, b"k" * MAX_KEY, b"v" * (MAX_ENTRY - MAX_KEY))  # exactly at the limits
    eng.commit(tx)
    assert tree.get(b"k" * MAX_KEY) == b"v" * (MAX_ENTRY - MAX_KEY)
    assert BTree.open_named(eng, "t").header == tree.header and BTree.open_named(eng, "nope") is None


class _Declining:
    """In place of a tree's C leaf changes (``traxfs.ext.treeleaf``): declines every get, put
    and delete, so the general path does them all."""

    def get(self, key, declined):
        return declined

    def range(self, start, stop, declined):
        return declined

    def put(self, *args):
        return False, None

    delete = put


class _Counting:
    """Around a tree's C leaf changes: counts the lookups, puts and deletes they did."""

    def __init__(self, real):
        self.real, self.done, self.looked, self.ranged = real, 0, 0, 0

    def get(self, key, declined):
        v = self.real.get(key, declined)
        self.looked += v is not declined
        return v

    def range(self, start, stop, declined):
        got = self.real.range(start, stop, declined)
        self.ranged += got is not declined
        return got

    def put(self, *args):
        done, old = self.real.put(*args)
        self.done += done
        return done, old

    def delete(self, *args):
        done, old = self.real.delete(*args)
        self.done += done
        return done, old


def _logged_changes(eng, general_only: bool) -> tuple[list, dict, int]:
    """Mixed puts (new keys, same-length and other-length overwrites, unchanged values) and
    deletes, then most keys deleted, in one transaction: the records the transaction logged
    (the nested actions' start LSNs masked, as page images of another engine's seed may shift
    LSNs), the tree, and how many changes the C path did."""
    tx = eng.begin()
    tree = BTree.create(eng, tx, "t")
    tree._in_leaf = _Declining() if general_only else _Counting(tree._leaf_change())
    rng, keys = random.Random(7), []
    for _ in range(4000):
        r = rng.random()
        if keys and r < 0.25:
            k = rng.choice(keys)
            old = tree.get(k)
            tree.put(tx, k, bytes((b + rng.randrange(1, 3)) % 256 for b in old[:3]) + old[3:])
        elif keys and r < 0.35:
            tree.put(tx, rng.choice(keys), bytes([rng.randrange(256)]) * rng.randrange(1, 400))
        elif keys and r < 0.4:
            k = rng.choice(keys)
            tree.put(tx, k, tree.get(k))
        elif keys and r < 0.45:
            tree.delete(tx, keys.pop(rng.randrange(len(keys))))
        else:
            k = rng.randbytes(rng.randrange(1, 40))
            keys.append(k)
            tree.put(tx, k, rng.randbytes(rng.randrange(3, 200)))
    rng.shuffle(keys)
    for k in keys[: len(keys) * 9 // 10]:  # leaves empty out and merge: the general path's
        tree.delete(tx, k)
        tree.delete(tx, k + b"?")  # absent: nothing changes
    last = tx.last_lsn
    eng.commit(tx)
    records = []
    while last:
        rec = eng.log_record(last)
        payload = rec.payload[:8] + bytes(8) + rec.payload[16:] if rec.type == RecType.LOGICAL else rec.payload
        records.append((rec.type, rec.page, rec.opcode, payload))
        last = rec.prev_lsn
    return records, dict(tree.items()), 0 if general_only else tree._in_leaf.done


@pytest.mark.timeout(120)
def test_the_c_leaf_changes_log_what_the_general_path_logs(tmp_path):
    """The common case of a put and a delete is C (``traxfs.ext.treeleaf``): it must log, record
    for record, what ``LoggedMap`` logs for the same changes, and decline everything else
    unchanged."""
    fast_eng, slow_eng = new_engine(str(tmp_path / "fast.img")), new_engine(str(tmp_path / "slow.img"))
    try:
        fast, fast_items, done = _logged_changes(fast_eng, False)
        slow, slow_items, _ = _logged_changes(slow_eng, True)
        assert done > 2000  # the C path did most of the changes
        assert fast_items == slow_items
        assert len(fast) == len(slow) and fast == slow
        assert check_engine(fast_eng) == []
    finally:
        fast_eng.close()
        slow_eng.close()


@pytest.mark.timeout(60)
def test_a_lookup_in_c_finds_what_the_general_path_finds(eng):
    """``BTree.get`` is C (``LeafChange.get``) unless it declines: over a tree of three levels,
    every key present, absent between and around them, and of other lengths, the C answer must
    be the general path's; with the tree's latch held by another thread the C path declines
    and the lookup waits for the latch."""
    tx = eng.begin()
    tree = BTree.create(eng, tx, "t")
    rng = random.Random(11)
    keys = sorted({rng.randbytes(rng.randrange(1, 60)) for _ in range(30_000)})
    for k in keys:
        tree.put(tx, k, k[::-1] + b"=" * rng.randrange(0, 300))
    eng.commit(tx)
    probes = keys + [k + b"\0" for k in keys[::7]] + [k[:-1] for k in keys[::5]] + [b"", b"\xff" * 80]
    counting = tree._in_leaf = _Counting(tree._leaf_change())
    fast = [tree.get(k) for k in probes]
    tree._in_leaf = _Declining()
    slow = [tree.get(k) for k in probes]
    assert counting.looked == len(probes)  # every lookup was C's
    present = set(keys)
    assert fast == slow and [v is not None for v in fast] == [k in present for k in probes]
    tree._in_leaf = counting
    got, holding, go = [], threading.Event(), threading.Event()

    def hold() -> None:
        with tree.latch:
            holding.set()
            go.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(10)
    reader = threading.Thread(target=lambda: got.append(tree.get(keys[0])))
    reader.start()
    reader.join(0.3)
    assert reader.is_alive() and got == []  # declined by C, waiting for the latch
    go.set()
    reader.join(10)
    holder.join(10)
    assert got == [slow[0]] and counting.looked == len(probes)


@pytest.mark.timeout(60)
def test_a_version_1_header_is_read_and_becomes_version_2_at_its_first_change(eng):
    """Format 1 kept the entry count in the header; format 2 keeps none (a logged header update
    per put cost ~15% of it). A format-1 tree reads as it is, its count still checked, and its
    header changes to format 2 (count 0) in the first change's transaction."""
    tree = BTREE.make(eng, "t")
    tx = eng.begin()
    for i in range(500):
        tree.put(tx, b"k%05d" % i, b"v" * 40)
    eng.commit(tx)

    def header(version: int, count: int) -> None:
        tx = eng.begin()
        write_bytes(eng, tx, tree.header, VERSION_OFF, VERSION_FIELD.pack(version))
        write_bytes(eng, tx, tree.header, COUNT_OFF, U64.pack(count))
        eng.commit(tx)

    def read_header() -> tuple[int, int]:
        with eng.page(tree.header) as f:
            return VERSION_FIELD.unpack_from(f.data, VERSION_OFF)[0], U64.unpack_from(f.data, COUNT_OFF)[0]

    assert read_header() == (VERSION, 0) and len(tree) == 500 and tree.check() == []
    header(1, 499)  # an old tree whose count is wrong: the check still reads format 1 counts
    assert any("header counts 499 entries, leaves hold 500" in p for p in tree.check())
    header(1, 500)
    assert tree.check() == [] and tree.get(b"k00007") == b"v" * 40 and len(tree) == 500
    tx = eng.begin()
    tree.put(tx, b"new", b"1")
    assert read_header() == (2, 0)
    eng.abort(tx)  # the logical undo deletes the key; the header stays format 2 (valid either way)
    assert read_header() == (2, 0) and tree.get(b"new") is None and len(tree) == 500
    assert tree.check() == [] and check_engine(eng) == []
    header(3, 0)  # a newer format than this traxfs reads
    with pytest.raises(ValueError, match="format version 3, this traxfs reads 1, 2"):
        BTree.open(eng, tree.header)


@pytest.mark.timeout(60)
def test_a_range_in_c_finds_what_the_general_path_finds(eng):
    """``BTree.items`` answers from C (``LeafChange.range``) when one leaf holds the whole
    range, else leaf by leaf: over a tree of many leaves, ranges empty, inside one leaf, across
    leaves, unbounded above, before and past every key — each must be the general path's and
    the model's, and C must have answered the ones that fit in a leaf (and only those)."""
    tx = eng.begin()
    tree = BTree.create(eng, tx, "t")
    rng = random.Random(12)
    keys = sorted({rng.randbytes(rng.randrange(1, 12)) for _ in range(5_000)})
    model = {k: k[::-1] * rng.randrange(1, 5) for k in keys}
    for k, v in model.items():
        tree.put(tx, k, v)
    eng.commit(tx)
    probes = [(b"", b"\0"), (b"\xff" * 20, None), (b"\xff" * 20, b"\xff" * 21), (keys[-1], None), (keys[0], keys[0])]
    for _ in range(600):
        i = rng.randrange(len(keys))
        j = min(len(keys) - 1, i + rng.choice((0, 1, 3, 40, 400)))
        start = keys[i] if rng.random() < 0.5 else keys[i] + b"\0"
        probes.append((start, None if rng.random() < 0.1 else keys[j]))
    counting = tree._in_leaf = _Counting(tree._leaf_change())
    fast = [list(tree.items(a, b)) for a, b in probes]
    tree._in_leaf = _Declining()
    slow = [list(tree.items(a, b)) for a, b in probes]
    want = [[(k, model[k]) for k in keys if a <= k and (b is None or k < b)] for a, b in probes]
    assert fast == slow == want
    leaves = len({tree._descend(k) for k in keys})
    assert leaves > 20
    assert 100 < counting.ranged < len(probes)  # the short ranges were C's, the long ones not


@pytest.mark.timeout(60)
def test_range_scans_and_floor(eng):
    tree = BTREE.make(eng, "t")
    model = {b"%05d" % i: b"v%d" % i for i in range(0, 3000, 3)}
    tx = eng.begin()
    for k, v in model.items():
        tree.put(tx, k, v)
    eng.commit(tx)
    keys = sorted(model)
    assert list(tree.keys()) == keys
    assert list(tree.keys(b"00100", b"00200")) == [k for k in keys if b"00100" <= k < b"00200"]
    assert list(tree.keys(b"00101")) == [k for k in keys if k >= b"00101"]
    assert list(tree.keys(None, b"00010")) == [b"00000", b"00003", b"00006", b"00009"]
    assert list(tree.keys(b"9")) == [] and list(tree.keys(b"00500", b"00500")) == []
    assert tree.floor(b"00100") == (b"00099", b"v99")
    assert tree.floor(b"00099") == (b"00099", b"v99")
    assert tree.floor(b"0") is None and tree.floor(b"") is None
    assert tree.floor(b"\xff") == (keys[-1], model[keys[-1]])
    # every floor across leaf boundaries
    for i in range(0, 3000, 37):
        probe = b"%05d" % i
        want = max((k for k in keys if k <= probe), default=None)
        assert tree.floor(probe) == ((want, model[want]) if want else None)


@pytest.mark.timeout(60)
def test_iterator_survives_changes_between_batches(eng):
    """Keys present throughout are returned exactly once, in order, while the tree splits and
    frees leaves under the iterator."""
    tree = BTREE.make(eng, "t")
    tx = eng.begin()
    for i in range(0, 4000, 2):
        tree.put(tx, b"%06d" % i, b"x" * 20)
    eng.commit(tx)
    stable = {b"%06d" % i for i in range(0, 4000, 4)}
    seen = []
    rnd = random.Random(5)
    tx = eng.begin()
    for k in tree.keys():
        seen.append(k)
        for _ in range(3):
            i = rnd.randrange(4000)
            if i % 4 == 2:  # churn only keys outside the stable set
                tree.delete(tx, b"%06d" % i)
            elif i % 2:
                tree.put(tx, b"%06d" % i, b"y" * rnd.randrange(100))
    eng.commit(tx)
    assert seen == sorted(set(seen))
    assert stable <= set(seen)
    assert tree.check() == []


@pytest.mark.timeout(60)
def test_iterator_does_not_follow_links_out_of_merged_leaves(eng):
    """Leaves of four entries: [00..03] [04] [08..11] ... The iterator has just read leaf
    [04]; the underfull left leaf then absorbs it (the absorbed page itself is not otherwise
    touched), the next leaf is merged away too and its last entry deleted: the iterator must
    re-seek, not follow links through freed pages and return their stale entries."""
    tree = BTREE.make(eng, "t")
    tx = eng.begin()
    for i in range(40):
        tree.put(tx, b"%02d" % i, b"v" * 900)
    for i in (5, 6, 7):
        tree.delete(tx, b"%02d" % i)
    eng.commit(tx)
    it = tree.keys()
    assert [next(it) for _ in range(5)] == [b"00", b"01", b"02", b"03", b"04"]
    tx = eng.begin()
    for i in (0, 1, 2, 9, 10, 11, 8):
        tree.delete(tx, b"%02d" % i)
    eng.commit(tx)
    assert tree.check() == []
    assert list(it) == [b"%02d" % i for i in range(12, 40)]


# ----- big deterministic runs ------------------------------------------------------------------------
@pytest.mark.timeout(180)
def test_20000_random_keys_split_then_delete(eng):
    tree = BTREE.make(eng, "t")
    rnd = random.Random(1)
    ids = list(range(20000))
    rnd.shuffle(ids)
    model = {}
    tx = eng.begin()
    for n, i in enumerate(ids):
        k, v = b"key-%08d" % i, bytes([i % 251]) * (i % 60)
        tree.put(tx, k, v)
        model[k] = v
        if n % 2000 == 1999:
            eng.commit(tx)
            tx = eng.begin()
    eng.commit(tx)
    BTREE.assert_holds(tree, model)
    for k in rnd.sample(sorted(model), 500):
        assert tree.get(k) == model[k]
    leaves_before = _leaf_count(tree)
    assert leaves_before > 100
    rnd.shuffle(ids)
    tx = eng.begin()
    for n, i in enumerate(ids[:15000]):
        k = b"key-%08d" % i
        assert tree.delete(tx, k) == model.pop(k)
        if n % 2000 == 1999:
            eng.commit(tx)
            tx = eng.begin()
    eng.commit(tx)
    BTREE.assert_holds(tree, model)
    assert _leaf_count(tree) < leaves_before * 0.6  # emptied leaves were freed
    tx = eng.begin()
    for k in list(model):
        tree.delete(tx, k)
    eng.commit(tx)
    BTREE.assert_holds(tree, {})
    assert _leaf_count(tree) == 1
    assert check_engine(eng, leaks=True) == []


def _leaf_count(tree: BTree) -> int:
    pages: set = set()
    assert tree.check(pages) == []
    return len(pages) - 1 - sum(1 for p in pages if _is_inner(tree, p))


def _is_inner(tree: BTree, pid: int) -> bool:
    with tree.e.page(pid) as f:
        return f.data[3] == 5


@pytest.mark.timeout(120)
def test_sequential_load_fills_pages_and_long_keys_split_inner_nodes(eng):
    tree = BTREE.make(eng, "t")
    tx = eng.begin()
    for i in range(6000):  # ascending: the rightmost split keeps the old leaf full
        tree.put(tx, b"%08d" % i, b"v" * 40)
    eng.commit(tx)
    per_leaf = 4060 // (4 + 2 + 8 + 40)
    assert _leaf_count(tree) <= 6000 // per_leaf + 2
    tx = eng.begin()
    for i in range(5999, -1, -1):  # descending (prefix d, left of nothing): the leftmost split
        tree.put(tx, b"d%08d" % i, b"w" * 40)
    eng.commit(tx)
    assert tree.check() == []
    big = BTREE.make(eng, "big")
    rnd = random.Random(3)
    model = {}
    tx = eng.begin()
    for _ in range(400):  # 1000-byte keys: three per inner node, inner splits at every level
        k = bytes(rnd.randrange(256) for _ in range(8)) * 125
        model[k] = b"%d" % len(model)
        big.put(tx, k, model[k])
    eng.commit(tx)
    BTREE.assert_holds(big, model)
    tx = eng.begin()
    for k in list(model)[:300]:
        big.delete(tx, k)
        del model[k]
    eng.commit(tx)
    BTREE.assert_holds(big, model)
    assert check_engine(eng, leaks=True) == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("site", ["_split", "_remove_entry", "_insert_parent"])
def test_crash_inside_a_structure_change(tmp_path, monkeypatch, site):
    """Snapshots of the device taken in the middle of splits / leaf removals and merges —
    during the forward work and during the abort's logical undos — all recover to the
    committed tree."""
    eng = new_engine(str(tmp_path / "e.img"))
    tree = BTREE.make(eng, "t")
    model = {b"%05d" % i: b"c" * 40 for i in range(0, 1200, 2)}
    tx = eng.begin()
    for k, v in model.items():
        tree.put(tx, k, v)
    eng.commit(tx)
    eng.checkpoint()
    calls, shots = {"forward": 0, "abort": 0}, []
    phase = ["forward"]
    original = getattr(BTree, site)

    def spy(self, *a, **kw):
        calls[phase[0]] += 1
        if calls[phase[0]] in ((3,) if phase[0] == "forward" else (2, 5)):
            if len(shots) % 2:
                eng.buffer.write_back()  # half of them with the half-done change on disk
            dst = str(tmp_path / f"snap{len(shots)}-{phase[0]}.img")
            device_snapshot(eng, dst)
            shots.append(dst)
        return original(self, *a, **kw)

    monkeypatch.setattr(BTree, site, spy)
    tx = eng.begin()
    for i in range(1, 1200, 2):  # splits (and, in the abort, deletes and merges)
        tree.put(tx, b"%05d" % i, b"n" * 60)
    for i in range(200, 800):  # leaves emptied, merged, freed (and, in the abort, re-split)
        tree.delete(tx, b"%05d" % i)
    phase[0] = "abort"
    eng.abort(tx)
    monkeypatch.undo()
    assert len(shots) == 3, calls
    BTREE.assert_holds(tree, model)
    eng.close()
    for dst in shots:
        e2 = Engine.open(ImageFileDevice(dst))
        t2 = BTree.open_named(e2, "t")
        BTREE.assert_holds(t2, model)
        assert check_engine(e2) == []
        e2.close()


@pytest.mark.timeout(60)
def test_failure_inside_a_split_rolls_the_action_back(eng, monkeypatch):
    tree = BTREE.make(eng, "t")
    model = {}
    tx = eng.begin()
    for i in range(400):
        model[b"%04d" % i] = b"v" * 50
        tree.put(tx, b"%04d" % i, b"v" * 50)
    eng.commit(tx)

    def no_space(*a, **kw):
        raise NoSpace("full")

    tx = eng.begin()
    tree.put(tx, b"zzz", b"fits")
    model[b"zzz"] = b"fits"
    # fail after the leaf was split (new page, cut, sibling link), before the parent knows
    monkeypatch.setattr(BTree, "_insert_parent", no_space)
    with pytest.raises(NoSpace):
        for i in range(400):
            tree.put(tx, b"%04d-x" % i, b"w" * 200)
            model[b"%04d-x" % i] = b"w" * 200
    monkeypatch.undo()
    assert tree.check() == []  # the half-done split was undone on the spot
    model = {k: v for k, v in model.items() if tree.get(k) is not None}
    assert list(tree.items()) == sorted(model.items())
    with pytest.raises(NoSpace):  # the allocator failing: nothing half-done either
        monkeypatch.setattr(eng.alloc, "alloc_region", no_space)
        for i in range(400):
            tree.put(tx, b"%04d-y" % i, b"w" * 200)
            model[b"%04d-y" % i] = b"w" * 200
    monkeypatch.undo()
    assert tree.check() == []
    model = {k: v for k, v in model.items() if tree.get(k) is not None}
    assert list(tree.items()) == sorted(model.items())
    tree.put(tx, b"after", b"ok")  # the transaction goes on
    eng.commit(tx)
    model[b"after"] = b"ok"
    BTREE.assert_holds(tree, model)


@pytest.mark.timeout(60)
def test_check_engine_reports_damage(tmp_path):
    path = str(tmp_path / "e.img")
    eng = new_engine(path)
    tree = BTREE.make(eng, "t")
    tx = eng.begin()
    for i in range(300):
        tree.put(tx, b"%04d" % i, b"v" * 40)
    eng.commit(tx)
    pages: set = set()
    assert tree.check(pages) == [] and check_engine(eng, leaks=True) == []
    leaves = sorted(p for p in pages if p != tree.header and not _is_inner(tree, p))
    # 1. a leaf whose keys are out of order (a logged, but wrong, change)
    tx = eng.begin()
    with eng.page(leaves[1]) as f:
        old = bytes(f.data[f.data.index(b"v" * 40) - 6 : f.data.index(b"v" * 40) + 40])
    k0 = old[2:6]
    with eng.page(leaves[1]) as f:
        i = slotted.records(f.data).index(old)
    eng.update(tx, leaves[1], opcodes.OP_SLOT_REPLACE,
               opcodes.slot_replace_payload(i, old, leaf_record(b"9999", b"v" * 40)))
    # 2. an allocated page of an unknown type
    stray = eng.alloc.alloc_page(tx, 2)
    eng.update(tx, stray, opcodes.OP_IMAGE, opcodes.image_payload(bytes(PAGE_SIZE), 77, 0, b""))
    # 3. a tree page whose allocation bit is clear
    m, bit = 1 + leaves[2] // eng.alloc.bits_per_map, leaves[2] % eng.alloc.bits_per_map
    eng.update(tx, m, opcodes.OP_CLEAR_BITS, opcodes.bits_payload(bit, 1))
    eng.commit(tx)
    probs = check_engine(eng)
    assert any(p.startswith("btree:t: ") and "9999" in p for p in probs), probs
    assert any(f"page {stray}: unknown page type 77" in p for p in probs), probs
    assert any(f"page {leaves[2]}" in p and "not allocated" in p for p in probs), probs
    assert k0 not in b"".join(p.encode() for p in probs)
    eng.close()
    # 4. a torn leaf on the device: the checksum catches it, the tree's checker reports it
    dev = ImageFileDevice(path)
    off = eng.sb.pages_offset + leaves[3] * PAGE_SIZE
    dev.write(off + 2000, b"\xff" * 8)
    eng = Engine.open(dev)
    probs = check_engine(eng)
    assert any(f"page {leaves[3]}: checksum mismatch" in p for p in probs), probs
    assert any(p.startswith("btree:t: checker failed") for p in probs), probs
    eng.unclean_shutdown()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [0, 1, 3, 500, 30000])
def test_bulk_create_equals_inserting_one_by_one(eng, n):
    rnd = random.Random(n)
    items = {rnd.randbytes(rnd.randint(1, 40)): rnd.randbytes(rnd.randint(0, 200)) for _ in range(n)}
    tx = eng.begin()
    tree = BTree.bulk_create(eng, tx, items.items(), "bulk")
    eng.commit(tx)
    assert tree.check() == [] and check_engine(eng, leaks=True) == []
    assert list(tree.items()) == sorted(items.items())
    tx = eng.begin()  # an ordinary tree afterwards: puts and deletes split and merge its pages
    for k in list(items)[: min(n // 2, 1000)]:  # one transaction must fit the log
        tree.delete(tx, k)
        del items[k]
    for _ in range(min(n, 1000)):
        k = rnd.randbytes(8)
        tree.put(tx, k, b"x")
        items[k] = b"x"
    eng.commit(tx)
    assert tree.check() == [] and list(tree.items()) == sorted(items.items())


@pytest.mark.timeout(120)
def test_bulk_create_is_all_or_nothing(tmp_path):
    items = [(b"%08d" % i, b"v" * 50) for i in range(20000)]
    eng, tree = bulk_build_all_or_nothing(str(tmp_path / "engine.img"), BTree, items)
    assert list(tree.items()) == items and tree.check() == [] and check_engine(eng, leaks=True) == []
    with pytest.raises(ValueError, match="duplicate key"):
        BTree.bulk_create(eng, eng.begin(), [(b"a", b""), (b"a", b"")])
    for tx in eng.active_transactions():
        eng.abort(tx)
    eng.close()

"""The linear hash (fs/struct/linearhash.py) against a dict: one-bucket-at-a-time growth,
overflow chains, a crash in the middle of a split (device snapshots; splits outlive the abort),
bulk builds, and ``check()``. What every structure must do (the state machine, abort / reopen /
unclean shutdown, concurrent transactions) is in test_structures_contract.py.
"""

from __future__ import annotations

import random

import pytest
from conftest import bulk_build_all_or_nothing, device_snapshot, new_engine
from structure_kinds import HASH

from traxfs.fs.engine.check import check_engine
from traxfs.fs.engine.engine import Engine
from traxfs.fs.struct.linearhash import FILL, MAX_ENTRY, LinearHash, bucket_of, key_hash
from traxfs.volume.device import ImageFileDevice

pytestmark = pytest.mark.timeout(240)


def test_addressing_grows_one_bucket_at_a_time():
    # with level N and split pointer s, buckets below s use N+1 bits
    h = 0b1011_0110
    assert bucket_of(h, 2, 0) == 0b10
    assert bucket_of(h, 2, 3) == 0b110  # 2 < 3: already split, one more bit
    assert bucket_of(h, 3, 0) == 0b110
    assert key_hash(b"abc") == key_hash(b"abc") and key_hash(b"abc") != key_hash(b"abd")


@pytest.mark.timeout(60)
def test_put_get_delete_overwrite_and_limits(eng):
    h = HASH.make(eng, "h")
    tx = eng.begin()
    assert h.put(tx, b"a", b"1") is None
    assert h.put(tx, b"", b"empty") is None
    assert h.put(tx, b"a", b"one") == b"1"
    assert h.put(tx, b"a", b"x" * 2000) == b"one"  # grows past the page's free space? still fits
    assert h.get(b"a") == b"x" * 2000 and h.get(b"") == b"empty" and h.get(b"b") is None
    assert h.delete(tx, b"b") is None and h.delete(tx, b"") == b"empty"
    eng.commit(tx)
    assert dict(h.items()) == {b"a": b"x" * 2000}
    with pytest.raises(ValueError):
        h.put(eng.begin(), b"k" * 1025, b"")
    with pytest.raises(ValueError):
        h.put(eng.begin(), b"k", b"v" * MAX_ENTRY)
    assert LinearHash.open_named(eng, "h").header == h.header


@pytest.mark.timeout(120)
def test_20000_keys_grow_the_table_then_deletes(eng):
    h = HASH.make(eng, "h")
    rnd = random.Random(7)
    model = {}
    tx = eng.begin()
    for n in range(20000):
        k = b"key-%d" % rnd.randrange(10**9)
        v = bytes([n % 256]) * rnd.randrange(40)
        h.put(tx, k, v)
        model[k] = v
        if n % 2500 == 2499:
            eng.commit(tx)
            tx = eng.begin()
    eng.commit(tx)
    HASH.assert_holds(h, model)
    nb = h.buckets()
    data = sum(len(k) + len(v) + 6 for k, v in model.items())
    assert nb >= data / (4060 * FILL) - 1  # it grew with the data, one bucket at a time
    for k in rnd.sample(sorted(model), 500):
        assert h.get(k) == model[k]
    tx = eng.begin()
    for n, k in enumerate(rnd.sample(sorted(model), 15000)):
        assert h.delete(tx, k) == model.pop(k)
        if n % 2500 == 2499:
            eng.commit(tx)
            tx = eng.begin()
    eng.commit(tx)
    HASH.assert_holds(h, model)
    assert h.buckets() == nb  # the table never shrinks
    assert check_engine(eng, leaks=True) == []


@pytest.mark.timeout(60)
def test_big_records_make_overflow_chains(eng):
    h = HASH.make(eng, "h")
    model = {b"big%03d" % i: bytes([i]) * 2900 for i in range(60)}
    tx = eng.begin()
    for k, v in model.items():
        h.put(tx, k, v)
    eng.commit(tx)
    HASH.assert_holds(h, model)
    chains = [len(h._chain(b)) for b in range(h.buckets())]
    assert max(chains) >= 2
    tx = eng.begin()
    for k in list(model)[::2]:
        h.put(tx, k, b"small")
        model[k] = b"small"
    eng.commit(tx)
    HASH.assert_holds(h, model)


@pytest.mark.timeout(90)
def test_crash_inside_a_split(tmp_path, monkeypatch):
    eng = new_engine(str(tmp_path / "e.img"))
    h = HASH.make(eng, "h")
    model = {b"c%d" % i: b"c" * 30 for i in range(800)}
    tx = eng.begin()
    for k, v in model.items():
        h.put(tx, k, v)
    eng.commit(tx)
    eng.checkpoint()
    shots, calls = [], [0]
    from traxfs.fs.struct.arraylist import ArrayList

    original = ArrayList.append

    def spy(self, tx, value):  # the split has moved its records, not yet linked the new bucket
        calls[0] += 1
        if calls[0] in (2, 9, 17):
            if len(shots) % 2:
                eng.buffer.write_back()
            dst = str(tmp_path / f"snap{len(shots)}.img")
            device_snapshot(eng, dst)
            shots.append(dst)
        return original(self, tx, value)

    monkeypatch.setattr(ArrayList, "append", spy)
    buckets = h.buckets()
    tx = eng.begin()
    for i in range(2000):
        h.put(tx, b"n%d" % i, b"n" * 40)
    eng.abort(tx)
    monkeypatch.undo()
    assert len(shots) == 3, calls
    assert h.buckets() > buckets  # splits are kept: the logical undo does not shrink the table
    HASH.assert_holds(h, model)
    eng.close()
    for dst in shots:
        e2 = Engine.open(ImageFileDevice(dst))
        h2 = LinearHash.open_named(e2, "h")
        HASH.assert_holds(h2, model)
        assert check_engine(e2) == []
        e2.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [0, 1, 5, 700, 30000])
def test_bulk_create_then_use_as_usual(eng, n):
    """A bulk-built table has the shape one-by-one inserts would grow (bytes within FILL of the
    buckets), passes its check, and behaves as any table afterwards (puts split it further)."""
    rnd = random.Random(n)
    items = {rnd.randbytes(rnd.randint(1, 30)): rnd.randbytes(rnd.randint(0, 300)) for _ in range(n)}
    items[b"big"] = b"x" * (MAX_ENTRY - 3)  # a bucket overflowing into a chain is laid out too
    tx = eng.begin()
    h = LinearHash.bulk_create(eng, tx, items.items(), "bulk")
    eng.commit(tx)
    HASH.assert_holds(h, items)
    assert check_engine(eng, leaks=True) == []
    tx = eng.begin()
    for k in list(items)[: min(n // 2, 800)]:
        assert h.delete(tx, k) == items.pop(k)
    for _ in range(min(n, 800)):
        k = rnd.randbytes(8)
        h.put(tx, k, b"y" * 40)
        items[k] = b"y" * 40
    eng.commit(tx)
    HASH.assert_holds(h, items)


@pytest.mark.timeout(120)
def test_bulk_create_is_all_or_nothing(tmp_path):
    items = [(b"%08d" % i, b"v" * 60) for i in range(20000)]
    eng, h = bulk_build_all_or_nothing(str(tmp_path / "engine.img"), LinearHash, items)
    HASH.assert_holds(h, dict(items))
    assert check_engine(eng, leaks=True) == []
    tx = eng.begin()
    with pytest.raises(ValueError, match="duplicate key"):
        LinearHash.bulk_create(eng, tx, [(b"a", b""), (b"a", b"")])
    with pytest.raises(ValueError, match="exceeds the limit"):
        LinearHash.bulk_create(eng, tx, [(b"a", b"x" * MAX_ENTRY)])
    assert tx.last_lsn == 0  # refused before anything was allocated or logged
    eng.abort(tx)
    assert check_engine(eng, leaks=True) == []
    eng.close()

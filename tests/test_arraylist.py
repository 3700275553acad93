"""The array list (fs/struct/arraylist.py): doubling page ranges, O(1) get/set, sets that
commute, appends under concurrency (aborted ones leave holes), bulk builds, and ``check()``.
What every structure must do (the state machine, abort / reopen / unclean shutdown) is in
test_structures_contract.py.
"""

from __future__ import annotations

import random
import threading

import pytest
from conftest import new_engine

from traxfs.fs.engine.check import check_engine
from traxfs.fs.engine.engine import Engine
from traxfs.fs.engine.page import PAGE_SIZE
from traxfs.fs.struct.arraylist import ArrayList
from traxfs.volume.device import ImageFileDevice

pytestmark = pytest.mark.timeout(120)


def rec(i: int, size: int = 12) -> bytes:
    return (b"%d." % i * size)[:size]


@pytest.mark.timeout(60)
def test_append_get_set_len_and_errors(eng):
    tx = eng.begin()
    al = ArrayList.create(eng, tx, 12, name="a")
    assert len(al) == 0
    for i in range(100):
        assert al.append(tx, rec(i)) == i
    al.set(tx, 5, b"x" * 12)
    eng.commit(tx)
    assert len(al) == 100 and al[5] == b"x" * 12 and al[6] == rec(6) and al.get(-1) == rec(99)
    assert list(al)[:3] == [rec(0), rec(1), rec(2)]
    with pytest.raises(IndexError):
        al.get(100)
    with pytest.raises(IndexError):
        al.set(eng.begin(), 100, b"y" * 12)
    with pytest.raises(ValueError):
        al.append(eng.begin(), b"short")
    with pytest.raises(ValueError):
        ArrayList.create(eng, eng.begin(), PAGE_SIZE)
    assert ArrayList.open_named(eng, "a").header == al.header and al.check() == []


@pytest.mark.timeout(90)
def test_ranges_double_and_records_address_in_constant_time(eng):
    tx = eng.begin()
    al = ArrayList.create(eng, tx, 100, initial_pages=2, name="big")  # 40 records per page
    eng.commit(tx)
    tx = eng.begin()
    for i in range(6000):  # 150 pages: ranges of 2, 4, 8, 16, 32, 64, 128
        al.append(tx, rec(i, 100))
        if i % 1500 == 1499:
            eng.commit(tx)
            tx = eng.begin()
    eng.commit(tx)
    pages = al.pages()
    assert len(pages) == 2 + 4 + 8 + 16 + 32 + 64 + 128
    assert al.check() == []
    rnd = random.Random(1)
    for i in rnd.sample(range(6000), 300):
        assert al.get(i) == rec(i, 100)
    tx = eng.begin()
    for i in range(0, 6000, 7):
        al.set(tx, i, rec(-i, 100))
    eng.commit(tx)
    for i in range(0, 6000, 7):
        assert al.get(i) == rec(-i, 100) and al.get(i + 1 if i + 1 < 6000 else 0) != rec(-i, 100)
    assert check_engine(eng, leaks=True) == []


@pytest.mark.timeout(60)
def test_sets_of_different_records_on_one_page_commute(eng):
    """Two transactions set records on the same page; one aborts: the other's survives
    (physical byte-range undo touches only its own record)."""
    tx = eng.begin()
    al = ArrayList.create(eng, tx, 16)
    for i in range(10):
        al.append(tx, rec(i, 16))
    eng.commit(tx)
    t1, t2 = eng.begin(), eng.begin()
    al.set(t1, 2, b"1" * 16)
    al.set(t2, 3, b"2" * 16)
    al.set(t1, 4, b"1" * 16)
    eng.abort(t1)
    eng.commit(t2)
    assert [al.get(i) for i in (2, 3, 4)] == [rec(2, 16), b"2" * 16, rec(4, 16)]


@pytest.mark.timeout(60)
def test_concurrent_appends_with_aborts(eng):
    tx = eng.begin()
    al = ArrayList.create(eng, tx, 8)
    eng.commit(tx)
    kept: list[set] = [set() for _ in range(3)]
    errors = []

    def worker(t: int) -> None:
        rnd = random.Random(t)
        try:
            for r in range(15):
                tx = eng.begin()
                vals = {b"%d-%02d-%03d" % (t, r, j) for j in range(40)}
                for v in sorted(vals):
                    al.append(tx, v)
                if rnd.random() < 0.3:
                    eng.abort(tx)
                else:
                    eng.commit(tx)
                    kept[t] |= vals
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    records = [al.get(i) for i in range(len(al))]
    live = [r for r in records if r != bytes(8)]
    assert sorted(live) == sorted(set().union(*kept))  # aborted appends: holes, never values
    assert al.check() == []


@pytest.mark.timeout(60)
def test_bulk_create_then_append_past_its_range(tmp_path):
    path = str(tmp_path / "engine.img")
    eng = new_engine(path)
    records = [rec(i) for i in range(3000)]
    tx = eng.begin()
    al = ArrayList.bulk_create(eng, tx, 12, records, "bulk")
    eng.commit(tx)
    assert len(al) == 3000 and [al.get(i) for i in range(0, 3000, 7)] == records[::7]
    tx = eng.begin()
    for i in range(3000, 4000):  # past the bulk-sized first range: a doubled range is added
        assert al.append(tx, rec(i)) == i
    eng.commit(tx)
    eng.unclean_shutdown()
    eng = Engine.open(ImageFileDevice(path))
    al = ArrayList.open_named(eng, "bulk")
    assert list(al) == [rec(i) for i in range(4000)] and al.check() == []
    assert check_engine(eng, leaks=True) == []
    with pytest.raises(ValueError, match="must be 12 bytes"):
        ArrayList.bulk_create(eng, eng.begin(), 12, [b"short"])
    for tx in eng.active_transactions():
        eng.abort(tx)
    eng.close()

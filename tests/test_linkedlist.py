"""The linked list (fs/struct/linkedlist.py) against a Python list: push/pop at both ends,
remove, iteration, page splits and frees, commit/abort, reopen, unclean shutdown, ``check()``.
"""

from __future__ import annotations

import random

import pytest
from conftest import new_engine

from traxfs.fs.engine.check import check_engine
from traxfs.fs.engine.engine import Engine
from traxfs.fs.struct.linkedlist import MAX_RECORD, LinkedList
from traxfs.volume.device import ImageFileDevice

pytestmark = pytest.mark.timeout(120)
MiB = 1 << 20


def make_list(eng: Engine, name: str = "l") -> LinkedList:
    tx = eng.begin()
    ll = LinkedList.create(eng, tx, name)
    eng.commit(tx)
    return ll


def random_ops(ll: LinkedList, tx, model: list, rnd: random.Random, n: int) -> None:
    for _ in range(n):
        c = rnd.random()
        r = bytes([rnd.randrange(256)]) * rnd.choice([1, 10, 100, 700, 1500])
        if c < 0.35:
            ll.push(tx, r)
            model.append(r)
        elif c < 0.55:
            ll.push(tx, r, front=True)
            model.insert(0, r)
        elif c < 0.72:
            assert ll.pop(tx) == (model.pop(0) if model else None)
        elif c < 0.85:
            assert ll.pop(tx, front=False) == (model.pop() if model else None)
        elif model:
            victim = rnd.choice(model)
            assert ll.remove(tx, victim)
            model.remove(victim)
        else:
            assert not ll.remove(tx, r)


def assert_healthy(ll: LinkedList, model: list) -> None:
    assert ll.check() == []
    assert list(ll) == model and len(ll) == len(model)


@pytest.mark.timeout(60)
def test_push_pop_remove_basics(eng):
    ll = make_list(eng)
    tx = eng.begin()
    assert ll.pop(tx) is None and not ll.remove(tx, b"x")
    ll.push(tx, b"b")
    ll.push(tx, b"c")
    ll.push(tx, b"a", front=True)
    ll.push(tx, b"")
    assert list(ll) == [b"a", b"b", b"c", b""]
    assert ll.remove(tx, b"c") and ll.pop(tx, front=False) == b"" and ll.pop(tx) == b"a"
    eng.commit(tx)
    assert list(ll) == [b"b"] and len(ll) == 1
    with pytest.raises(ValueError):
        ll.push(eng.begin(), b"x" * (MAX_RECORD + 1))
    assert LinkedList.open_named(eng, "l").header == ll.header


@pytest.mark.timeout(90)
def test_random_operations_against_a_list(eng):
    ll = make_list(eng)
    rnd = random.Random(11)
    model: list = []
    for _ in range(8):
        tx = eng.begin()
        before = list(model)
        random_ops(ll, tx, model, rnd, 400)
        if rnd.random() < 0.3:
            eng.abort(tx)
            model = before
        else:
            eng.commit(tx)
        assert_healthy(ll, model)
    assert check_engine(eng, leaks=True) == []


@pytest.mark.timeout(60)
def test_queue_workload_frees_pages(eng):
    ll = make_list(eng)
    tx = eng.begin()
    for i in range(3000):  # a FIFO queue: the list must not keep the drained pages
        ll.push(tx, b"%05d" % i * 20)
        if i >= 100:
            assert ll.pop(tx) == b"%05d" % (i - 100) * 20
    eng.commit(tx)
    pages: set = set()
    assert ll.check(pages) == []
    assert len(pages) <= 1 + 100 * 104 // 4000 + 2
    assert check_engine(eng, leaks=True) == []


@pytest.mark.timeout(90)
def test_abort_reopen_and_unclean_shutdown(tmp_path):
    path = str(tmp_path / "e.img")
    eng = new_engine(path)
    ll = make_list(eng)
    rnd = random.Random(3)
    model: list = []
    tx = eng.begin()
    random_ops(ll, tx, model, rnd, 600)
    eng.commit(tx)
    tx = eng.begin()
    scratch = list(model)
    random_ops(ll, tx, scratch, rnd, 600)
    eng.abort(tx)
    assert_healthy(ll, model)
    eng.close()
    eng = Engine.open(ImageFileDevice(path))
    ll = LinkedList.open_named(eng, "l")
    assert_healthy(ll, model)
    tx = eng.begin()
    scratch = list(model)
    random_ops(ll, tx, scratch, rnd, 300)
    eng.checkpoint()
    random_ops(ll, tx, scratch, rnd, 300)
    eng.unclean_shutdown()
    eng = Engine.open(ImageFileDevice(path))
    ll = LinkedList.open_named(eng, "l")
    assert_healthy(ll, model)
    assert check_engine(eng) == []
    eng.close()


@pytest.mark.timeout(60)
def test_iteration_while_the_list_changes(eng):
    ll = make_list(eng)
    tx = eng.begin()
    for i in range(500):
        ll.push(tx, b"%04d" % i * 10)
    eng.commit(tx)
    tx = eng.begin()
    seen = []
    for r in ll:  # appends at the back while iterating: the originals come out once, in order
        seen.append(r)
        if len(seen) < 300:
            ll.push(tx, b"new")
    eng.commit(tx)
    assert seen[:500] == [b"%04d" % i * 10 for i in range(500)]
    assert ll.check() == []

"""The linked list (fs/struct/linkedlist.py): push/pop at both ends, remove, a queue workload
that frees drained pages, iteration while the list changes, ``check()``. What every structure
must do (the state machine against a list, abort / reopen / unclean shutdown) is in
test_structures_contract.py.
"""

from __future__ import annotations

import pytest
from structure_kinds import LINKEDLIST

from traxfs.fs.engine.check import check_engine
from traxfs.fs.struct.linkedlist import MAX_RECORD, LinkedList

pytestmark = pytest.mark.timeout(120)


@pytest.mark.timeout(60)
def test_push_pop_remove_basics(eng):
    ll = LINKEDLIST.make(eng, "l")
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


@pytest.mark.timeout(60)
def test_queue_workload_frees_pages(eng):
    ll = LINKEDLIST.make(eng, "l")
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


@pytest.mark.timeout(60)
def test_iteration_while_the_list_changes(eng):
    ll = LINKEDLIST.make(eng, "l")
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

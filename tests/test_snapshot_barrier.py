"""The snapshot barrier (``fs/history.py``): data changes hold it shared, a snapshot's creation
exclusive. A snapshot waits for the changes in flight and goes on as soon as the last one
leaves; changes that arrive while it waits wait for it (it is not starved); shared holds nest."""

from __future__ import annotations

import threading
import time

import pytest
from waiting import wait_for

from traxfs.fs.history import Barrier

pytestmark = pytest.mark.timeout(60)


def started(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def until_waiting(b: Barrier) -> None:
    """Until the snapshot started is waiting (a slow start must not reorder the test)."""
    wait_for(lambda: b._waiting, "the snapshot never waited", timeout=10, every=0.005)


def test_a_snapshot_goes_on_as_soon_as_the_last_change_leaves():
    b = Barrier()
    order: list[str] = []
    b.__enter__()
    b.__enter__()  # nested in this thread: one hold
    snap = started(lambda: (b.exclusive().__enter__(), order.append("snapshot")))
    until_waiting(b)
    time.sleep(0.1)
    assert order == [], "the snapshot went on during a change"
    b.__exit__()
    time.sleep(0.1)
    assert order == [], "the snapshot went on while the outer hold remained"
    b.__exit__()
    snap.join(5)
    assert order == ["snapshot"], "the snapshot was not woken when the last change left"


def test_a_change_arriving_while_a_snapshot_waits_waits_for_it():
    b = Barrier()
    order: list[str] = []
    b.__enter__()
    ex = b.exclusive()

    def snapshot():
        ex.__enter__()
        order.append("snapshot")
        time.sleep(0.1)
        order.append("snapshot done")
        ex.__exit__()

    snap = started(snapshot)
    until_waiting(b)
    late = started(lambda: (b.__enter__(), order.append("late change"), b.__exit__()))
    time.sleep(0.1)
    assert order == []
    b.__exit__()
    snap.join(5)
    late.join(5)
    assert order == ["snapshot", "snapshot done", "late change"]

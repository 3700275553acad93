"""The engine's latch (``ext/pagepin.pyx: Latch``): a pthread mutex with ``threading.Lock`` /
``RLock``'s Python face, taken from C by every B+tree change. What it must keep: mutual
exclusion, re-entrancy counts, non-blocking and timed acquires, the GIL released while a
thread waits, and clear errors where a plain lock would misbehave silently or hang."""

from __future__ import annotations

import threading
import time

import pytest

from traxfs.ext.pagepin import Latch

pytestmark = pytest.mark.timeout(60)


def test_a_lock_excludes_and_refuses_a_second_taker_without_waiting() -> None:
    latch = Latch()
    assert not latch.locked()
    assert latch.acquire() is True and latch.locked()
    assert latch.acquire(False) is False  # the holder too: not re-entrant
    with pytest.raises(RuntimeError, match="deadlock"):
        latch.acquire()  # a plain lock would hang here for ever
    other: list[bool] = []
    t = threading.Thread(target=lambda: other.append(latch.acquire(blocking=False)))
    t.start()
    t.join()
    assert other == [False]
    latch.release()
    assert not latch.locked()
    with pytest.raises(RuntimeError):
        latch.release()
    with latch:
        assert latch.locked()
    assert not latch.locked()


def test_a_reentrant_latch_counts_its_holder_s_takes() -> None:
    latch = Latch(reentrant=True)
    for _ in range(3):
        assert latch.acquire()
    assert latch.acquire(False)
    for _ in range(3):
        latch.release()
        assert latch.locked()
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(latch.acquire(False)))
    t.start()
    t.join()
    assert got == [False]  # still held once
    latch.release()
    assert not latch.locked()
    t = threading.Thread(target=lambda: got.append(latch.acquire(False) and (latch.release() or True)))
    t.start()
    t.join()
    assert got == [False, True]


def test_only_the_holder_may_release() -> None:
    latch = Latch()
    latch.acquire()
    errors: list[BaseException] = []

    def foreign_release() -> None:
        try:
            latch.release()
        except RuntimeError as e:
            errors.append(e)

    t = threading.Thread(target=foreign_release)
    t.start()
    t.join()
    assert len(errors) == 1 and latch.locked()
    latch.release()


def test_a_timed_acquire_gives_up_and_a_blocking_one_gets_it_when_released() -> None:
    latch = Latch()
    latch.acquire()
    out: list[tuple[bool, float]] = []

    def timed() -> None:
        t0 = time.monotonic()
        out.append((latch.acquire(timeout=0.3), time.monotonic() - t0))

    t = threading.Thread(target=timed)
    t.start()
    t.join()
    assert out[0][0] is False and 0.25 <= out[0][1] < 5
    got = threading.Event()
    t = threading.Thread(target=lambda: (latch.acquire(), got.set(), latch.release()))
    t.start()
    assert not got.wait(0.2)
    latch.release()
    assert got.wait(10)
    t.join()
    with pytest.raises(ValueError):
        latch.acquire(False, 1.0)
    with pytest.raises(ValueError):
        latch.acquire(timeout=-2)


def test_a_waiting_thread_lets_the_others_run() -> None:
    """While one thread waits for the latch, the holder (and everyone else) keeps running Python:
    the wait happens without the GIL. With the GIL held while waiting this test hangs."""
    latch = Latch()
    latch.acquire()
    waiter = threading.Thread(target=lambda: (latch.acquire(), latch.release()))
    waiter.start()
    time.sleep(0.05)
    ticks = 0
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:  # pure Python work by the holder
        ticks += 1
    assert ticks > 1000
    latch.release()
    waiter.join(10)
    assert not waiter.is_alive()


@pytest.mark.parametrize("reentrant", [False, True])
def test_threads_incrementing_under_the_latch_lose_no_update(reentrant: bool) -> None:
    """A read, a pause that lets other threads run, a write — under the latch — from 8 threads,
    a mix of ``with``, blocking and spinning non-blocking acquires: no update is lost."""
    latch = Latch(reentrant)
    box = [0]

    def work(k: int) -> None:
        for i in range(300):
            if (k + i) % 3 == 0:
                while not latch.acquire(False):
                    time.sleep(0)
            else:
                latch.acquire()
            try:
                v = box[0]
                if i % 7 == 0:
                    time.sleep(0)
                box[0] = v + 1
            finally:
                latch.release()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert box[0] == 8 * 300 and not latch.locked()

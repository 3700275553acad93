"""The FUSE server's worker pool (fs/fuse/workers.py): results and errors come back to the
calling trio task, calls run concurrently up to the limit, and close ends the threads."""

import threading

import pytest
import trio

from traxfs.fs.fuse.workers import WorkerPool


def test_result_and_exception_come_back_to_the_task():
    pool = WorkerPool(4)

    async def main():
        assert await pool.run(lambda: threading.current_thread().name) == "traxfs-worker"
        with pytest.raises(ZeroDivisionError):
            await pool.run(lambda: 1 // 0)
        assert await pool.run(lambda: 42) == 42

    trio.run(main)
    pool.close()


def _three_meet(limit: int) -> list[bool]:
    pool = WorkerPool(limit)
    barrier = threading.Barrier(3, timeout=2)
    got = []

    def meet():
        try:
            barrier.wait()
            got.append(True)
        except threading.BrokenBarrierError:
            got.append(False)

    async def main():
        async with trio.open_nursery() as n:
            for _ in range(3):
                n.start_soon(pool.run, meet)

    trio.run(main)
    pool.close()
    return got


def test_calls_run_at_once_up_to_the_limit():
    """Three calls that each wait for the other two finish only if three threads run at once;
    with a limit of two the third waits its turn (the barrier breaks instead)."""
    assert _three_meet(3) == [True] * 3
    got = _three_meet(2)
    assert len(got) == 3 and not all(got)


def test_close_ends_the_threads():
    pool = WorkerPool(8)

    async def main():
        async with trio.open_nursery() as n:
            for _ in range(8):
                n.start_soon(pool.run, lambda: None)

    before = {t for t in threading.enumerate() if t.name == "traxfs-worker"}
    trio.run(main)
    started = {t for t in threading.enumerate() if t.name == "traxfs-worker"} - before
    assert started
    pool.close()
    for t in started:
        t.join(timeout=10)
        assert not t.is_alive()


def test_a_pool_needs_a_thread():
    with pytest.raises(ValueError, match="at least one thread"):
        WorkerPool(0)

"""Durability handles (flush pipelining) and early lock release (Aether §2, §3)."""

from __future__ import annotations

import time

import pytest
import trio
from kvpages import KV

from traxfs.fs.engine.engine import Engine
from traxfs.fs.engine.locks import S
from traxfs.fs.engine.logmanager import GroupCommitPolicy
from traxfs.volume.device import create_image

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def slow_group_engine(tmp_path):
    """Group commit that waits up to 3 s for 1000 commits: soft commits stay pending a while (long
    enough that a loaded machine's stalls cannot pass for the policy's delay or end it early)."""
    dev = create_image(str(tmp_path / "e.img"), 32 << 20)
    Engine.format(dev, log_size=4 << 20)
    eng = Engine.open(dev, policy=GroupCommitPolicy(max_commits=1000, max_bytes=1 << 30, max_delay=3.0))
    yield eng
    eng.close()


def test_a_trio_task_awaits_durability_while_others_run(slow_group_engine):
    eng = slow_group_engine
    kv = KV(eng, 10)
    ticks = []

    async def await_durable(handle) -> None:
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        handle.add_callback(lambda: token.run_sync_soon(done.set))
        await done.wait()

    async def committer() -> float:
        tx = eng.begin()
        kv.put(tx, 1, 42)
        handle = eng.soft_commit(tx)
        assert not handle.done()
        t0 = time.monotonic()
        await await_durable(handle)
        assert handle.done() and eng.log.durable_lsn >= handle.lsn
        return time.monotonic() - t0

    async def ticker() -> None:
        for _ in range(20):
            ticks.append(time.monotonic())
            await trio.sleep(0.01)

    async def main() -> float:
        async with trio.open_nursery() as n:
            n.start_soon(ticker)
            return await committer()

    waited = trio.run(main)
    assert waited > 1.0  # the daemon's T policy held the flush back...
    assert len(ticks) == 20 and ticks[-1] - ticks[0] < waited  # ...and the loop kept running meanwhile


def test_early_lock_release_and_the_dependent_readers_commit(slow_group_engine):
    eng = slow_group_engine
    kv = KV(eng, 10)
    t1 = eng.begin()
    kv.put(t1, 3, 33)
    h1 = eng.soft_commit(t1)  # commit record in the buffer, not yet durable
    assert not h1.done()
    t2 = eng.begin()
    start = time.monotonic()
    eng.lock(t2, ("kv", 3), S)  # granted at once: T1 released its lock early
    assert time.monotonic() - start < 1.0  # not the 3 s the commit takes to become durable
    assert kv.get(3) == 33 and t2.depends_lsn == h1.lsn
    h2 = eng.commit(t2)  # read-only, but it saw T1's data: it waits for T1's durability
    assert h2.lsn == h1.lsn and h1.done()


def test_dependent_writer_is_never_durable_before_what_it_read(slow_group_engine):
    eng = slow_group_engine
    kv = KV(eng, 10)
    t1 = eng.begin()
    kv.put(t1, 4, 1)
    h1 = eng.soft_commit(t1)
    t2 = eng.begin()
    kv.put(t2, 4, 2)  # overwrites T1's not-yet-durable value (T1 released the lock early)
    h2 = eng.soft_commit(t2)
    assert not h1.done() and not h2.done()
    assert h2.lsn > h1.lsn  # T2's commit record is later in the one log...
    h2.wait(30)
    assert h1.done()  # ...so T2 cannot become durable without T1 (ELR condition 2 holds by order)
    eng.unclean_shutdown()
    eng2 = Engine.open(eng.dev)
    assert KV(eng2, 10).get(4) == 2
    eng2.close()

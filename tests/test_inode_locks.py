"""Per-inode reader/writer locks (``fs/inode_locks.py``): a writer excludes everyone on its
inode and no one else; readers share; a lock whose users are gone is reused for another inode
and keeps excluding there."""

from __future__ import annotations

import random
import threading
import time

import pytest

from traxfs.fs.inode_locks import SPARE, InodeLocks

pytestmark = pytest.mark.timeout(60)


def test_writers_exclude_everyone_on_their_inode_while_locks_are_reused():
    locks = InodeLocks()
    inside: dict[int, list[str]] = {i: [] for i in range(6)}
    guard = threading.Lock()
    bad: list[str] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(400):
            ino, write = rng.randrange(6), rng.random() < 0.5
            with locks.exclusive(ino) if write else locks.shared(ino):
                with guard:
                    if write and inside[ino] or "w" in inside[ino]:
                        bad.append(f"inode {ino}: {'writer' if write else 'reader'} beside {inside[ino]}")
                    inside[ino].append("w" if write else "r")
                time.sleep(0)
                with guard:
                    inside[ino].remove("w" if write else "r")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad, bad[:3]
    assert locks._locks == {}  # none left held
    assert 0 < len(locks._spare) <= SPARE


def test_a_reused_lock_still_makes_a_writer_wait():
    locks = InodeLocks()
    with locks.exclusive(1):
        pass
    spare = locks._spare[-1]
    entered = threading.Event()
    with locks.shared(2):  # inode 2 gets the spare lock
        assert locks._locks[2] is spare

        def write() -> None:
            with locks.exclusive(2):
                entered.set()

        t = threading.Thread(target=write)
        t.start()
        assert not entered.wait(0.2)  # the reader holds it
    assert entered.wait(5)
    t.join()

"""Crash safety of queues through the mount: SIGKILL of the real ``trax mount`` daemon at random
points while a producer appends through ``/queues/NAME/append`` with fsync, and a consumer
commits a view's head.

After each crash and remount: every record whose fsync returned is there exactly once and in
order (the records are numbered by the producer; only records never acknowledged may be
missing, and only at the end of what a round wrote); the queue continues at or above every
sequence number anybody saw handed out (none is reused); the last committed head is kept; at the
end fsck is clean. ``TRAX_SOAK=N`` multiplies the rounds.
"""

from __future__ import annotations

import errno
import os
import random
import re
import threading
import time

import pytest
from fsmount import is_mounted, traxfs_mount
from queue_paths import Stream, put, status

MiB = 1 << 20
SOAK = int(os.environ.get("TRAX_SOAK", "1"))
_LINE = re.compile(rb"(\d{12}) r(\d+) x*\n")
DEAD = {errno.ENOTCONN, errno.ECONNABORTED, errno.EIO, errno.ENODEV}


def died(e: OSError, qdir) -> bool:
    """Is ``e`` what a path under the mount answers once the daemon is killed: the connection's
    errors, or ENOENT once the dead mount was dropped (the path then names a folder of the empty
    mount point) — never while the mount is still there."""
    return e.errno in DEAD or (e.errno == errno.ENOENT and not is_mounted(qdir.parent.parent))


def rec(k: int, rnd: int) -> bytes:
    return f"{k:012d} r{rnd} ".encode().ljust(99, b"x") + b"\n"


class Producer(threading.Thread):
    """Appends numbered records from ``start`` in batches, fsyncing every few batches, until the
    mount dies; ``acked`` is the last number an fsync covered, ``tried`` the last one written."""

    def __init__(self, qdir, start: int, rnd: int, seed: int):
        super().__init__(daemon=True)
        self.qdir, self.k, self.rnd, self.rng = qdir, start, rnd, random.Random(seed)
        self.acked = start - 1
        self.tried = start - 1
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            fd = os.open(self.qdir / "append", os.O_WRONLY | os.O_APPEND)
        except OSError as e:  # a kill may come before a loaded machine runs this thread at all
            if not died(e, self.qdir):
                self.error = e
            return
        try:
            while True:
                n = self.rng.choice([1, 10, 100, 1000])
                data = b"".join(rec(k, self.rnd) for k in range(self.k, self.k + n))
                self.tried = self.k + n - 1
                os.write(fd, data)
                self.k += n
                if self.rng.random() < 0.3:
                    os.fsync(fd)
                    self.acked = self.k - 1
        except OSError as e:
            if not died(e, self.qdir):
                self.error = e
        finally:
            try:
                os.close(fd)
            except OSError:
                pass


class Watcher(threading.Thread):
    """Reads status.json and commits view ``c`` forward until the mount dies: ``issued`` is
    the highest live end seen, ``head`` the last commit that returned, ``pending`` one in flight."""

    def __init__(self, qdir, rng: random.Random):
        super().__init__(daemon=True)
        self.qdir, self.rng = qdir, rng
        self.issued = 0
        self.head: int | None = None
        self.pending: int | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while True:
                st = status(self.qdir)
                self.issued = max(self.issued, st["live_end"])
                head = st["views"]["c"]["head"]
                if st["live_end"] > head and self.rng.random() < 0.5:
                    target = head + self.rng.randrange(st["live_end"] - head + 1)
                    self.pending = target
                    put(self.qdir / "views" / "c" / "commit", str(target))
                    self.head, self.pending = target, None
                time.sleep(0.01)
        except OSError as e:
            if not died(e, self.qdir):
                self.error = e
        except ValueError:  # status.json cut short by the crash
            pass


@pytest.mark.timeout(600)
def test_sigkill_of_the_daemon_keeps_every_fsynced_record_once_in_order(tmp_path):
    rng = random.Random(int(os.environ.get("TRAX_SEED", "14")))
    with traxfs_mount(tmp_path, size=256 * MiB, args=("--commit-interval", "0.2")) as m:
        qdir = m.mp / "queues" / "crash"
        os.mkdir(qdir)
        os.mkdir(qdir / "views" / "all")  # never committed: the whole history is kept for the check
        os.mkdir(qdir / "views" / "c")
        put(qdir / "config.json", '{"retain_age_seconds": null, "block_size": 16384, "seal_seconds": 0.3}')
        survived: list[int] = []
        acked_all: list[tuple[int, int]] = []  # (first, last) acknowledged per round
        head = 0
        for rnd in range(4 * SOAK):
            start = survived[-1] + 1 if survived else 0
            p = Producer(qdir, start, rnd, rng.randrange(1 << 30))
            w = Watcher(qdir, random.Random(rng.randrange(1 << 30)))
            p.start()
            w.start()
            time.sleep(rng.uniform(0.05, 1.5))
            m.kill()  # SIGKILL of the daemon, then the dead mount dropped
            p.join(30)
            w.join(30)
            assert not p.is_alive() and not w.is_alive()
            assert p.error is None and w.error is None, (p.error, w.error)
            acked_all.append((start, p.acked))
            m.start()  # recovery
            st = status(qdir)
            assert st["live_end"] >= w.issued, f"round {rnd}: continues at {st['live_end']}, {w.issued} was seen"
            allowed = {w.head if w.head is not None else head, w.pending} - {None}
            assert st["views"]["c"]["head"] in allowed, (st["views"]["c"], allowed)
            head = st["views"]["c"]["head"]
            with Stream(qdir / "views" / "all" / "records") as s:
                data = s.drained()
            ks, at = [], 0
            for match in _LINE.finditer(data):
                assert match.start() == at, f"round {rnd}: bytes {data[at:match.start()][:80]!r} are not a record"
                ks.append(int(match.group(1)))
                at = match.end()
            assert at == len(data), f"round {rnd}: a partial record at the end: {data[at:][:80]!r}"
            assert ks[: len(survived)] == survived, f"round {rnd}: earlier records changed"
            new = ks[len(survived) :]
            assert new == list(range(start, start + len(new))), f"round {rnd}: records out of order, doubled or gapped"
            assert start + len(new) - 1 >= p.acked, f"round {rnd}: fsynced records up to {p.acked} lost"
            assert start + len(new) - 1 <= p.tried
            survived = ks
        assert survived, "nothing was ever appended"
        print(f"rounds {4 * SOAK}: {len(survived)} records survived; acknowledged per round {acked_all}")

"""Crash safety of the queue store: SIGKILL of a real process, and simulated power loss.

After any crash: every fsynced batch is there, exactly once and in order; every batch is whole
or absent; no sequence number is handed out twice; every view head whose commit returned is
kept (or the one being committed when the crash came); every retained block reads back with
its checksums. ``TRAX_SOAK=N`` multiplies the iterations.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from queue_child import CONFIG, record
from queue_model import close_store, new_image, open_store, read_from

from traxfs.fs.engine.engine import Engine
from traxfs.fs.queues import queue as queue_module
from traxfs.fs.queues.store import QueueStore
from traxfs.volume.device import ImageFileDevice
from traxfs.volume.powerloss import PowerLossDevice

SOAK = int(os.environ.get("TRAX_SOAK", "1"))
CHILD = Path(__file__).with_name("queue_child.py")
_RECORD = re.compile(rb"b(\d+)-(\d+)/(\d+)\.*\n")


class Journal:
    """What the producers said they did, across every run on one image."""

    def __init__(self) -> None:
        self.batches: dict[int, tuple[int, int]] = {}  # batch -> (first seq, count), acknowledged
        self.synced = -1  # batches up to this one were fsynced
        self.heads: dict[str, int] = {}
        self.pending: dict[str, int] = {}  # a head being moved when the crash came
        self.issued = 0  # every sequence number handed out is below this

    def feed(self, line: str) -> None:
        p = line.split()
        if len(p) < 2:
            return
        if p[0] == "A" and len(p) == 4:
            b, first, n = int(p[1]), int(p[2]), int(p[3])
            assert first >= self.issued, f"batch {b}: sequence number {first} handed out again (issued below {self.issued})"
            self.batches[b] = (first, n)
            self.issued = first + n
        elif p[0] == "S":
            self.synced = max(self.synced, int(p[1]))
        elif p[0] == "c" and len(p) == 3:
            self.pending[p[1]] = int(p[2])
        elif p[0] == "C" and len(p) == 3:
            self.heads[p[1]] = int(p[2])
            self.pending.pop(p[1], None)

    def judge(self, q, next_batch: int) -> None:
        """Check the reopened queue ``q``; then adopt what survived."""
        for v in set(self.heads) | set(self.pending):
            # a head retention has passed (records reclaimed below it) is clamped to the oldest
            # retained record when the queue loads
            allowed = {max(h, q.first_seq) for h in (self.heads.get(v), self.pending.get(v)) if h is not None}
            assert q.views[v.encode()].head in allowed, f"view {v}: head {q.views[v.encode()].head}, committed {allowed}"
            self.heads[v] = q.views[v.encode()].head
        self.pending.clear()
        assert q.live_end >= self.issued, f"the queue continues at {q.live_end}, below numbers handed out ({self.issued})"
        data = read_from(q, q.first_seq)
        seen: list[tuple[int, int, int]] = []
        at = 0
        for m in _RECORD.finditer(data):
            assert m.start() == at, f"bytes {data[at:m.start()][:60]!r} are not a record"
            b, i, n = map(int, m.groups())
            seen.append((b, i, n))
            at = m.end()
        assert at == len(data), f"trailing bytes {data[at:][:60]!r}"
        # batches in order, each whole (its first record may be before the retained history)
        k = 0
        last = -1
        survivors: set[int] = set()
        while k < len(seen):
            b, i, n = seen[k]
            assert b > last, f"batch {b} after batch {last}: out of order or twice"
            assert i == 0 or k == 0, f"batch {b} starts at record {i}: cut"
            run = seen[k : k + n - i]
            assert run == [(b, j, n) for j in range(i, n)], f"batch {b} is not whole"
            survivors.add(b)
            last, k = b, k + n - i
        for b, (first, _n) in self.batches.items():
            if b <= self.synced and first >= q.first_seq:
                assert b in survivors, f"batch {b} (sequence {first}..) was fsynced but is gone"
        for b in list(self.batches):
            if b not in survivors and b >= next_batch - 10_000:
                self.batches.pop(b)


@pytest.mark.timeout(600)
def test_sigkill_during_appends_commits_and_reclaim(tmp_path):
    image = str(tmp_path / "q.img")
    new_image(image, size=64 << 20)
    rng = random.Random(20261125)
    journal = Journal()
    batch = 0
    for it in range(6 * SOAK):
        child = subprocess.Popen([sys.executable, str(CHILD), image, str(it), str(batch)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "R", child.stderr.read()
        time.sleep(rng.uniform(0.2, 1.5))
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=30)
        assert "Traceback" not in err, err
        for line in out.splitlines():
            journal.feed(line)
        batch = max(journal.batches, default=batch) + 1
        eng, store = open_store(image)
        try:
            journal.judge(store.get(b"c"), batch)
        finally:
            close_store(eng, store)
        batch += 1


def _powerloss_round(inner: ImageFileDevice, seed: int, journal: Journal, batch: int) -> int:
    rng = random.Random(seed)
    dev = PowerLossDevice(inner, seed=seed)
    eng = Engine.open(dev, buffer_pages=64)
    store = QueueStore(eng, background=False)
    q = store.queues.get(b"c") or store.create(b"c", CONFIG)
    if not q.views:
        q.create_view(b"v")
        journal.heads["v"] = q.views[b"v"].head
    journal.judge(q, batch)
    for _ in range(rng.randint(3, 30)):
        n = rng.choice([1, 5, 60])
        data = b"".join(record(batch, i, n, rng.choice([30, 200, 17000] if n == 1 else [30, 200])) for i in range(n))
        first, count = q.append(data)
        journal.feed(f"A {batch} {first} {count}")
        batch += 1
        r = rng.random()
        if r < 0.2:
            q.sync()
            journal.feed(f"S {batch - 1}")
        elif r < 0.3:
            target = q.views[b"v"].head + rng.randrange(q.live_end - q.views[b"v"].head + 1)
            journal.feed(f"c v {target}")
            q.commit(b"v", target)
            journal.feed(f"C v {target}")
        elif r < 0.4:
            q.tick(0)  # persist the tail, seal a segment, reclaim
    if rng.random() < 0.5:
        eng.log.flush_all()  # commits nobody forced reach the log: ordered mode must hold for them
    dev.crash(keep=rng.random(), tear=True, sector=rng.choice([512, 4096]))
    store.crash()
    eng.unclean_shutdown()
    return batch


@pytest.mark.timeout(600)
def test_power_loss_under_the_queue_store(tmp_path, monkeypatch):
    monkeypatch.setattr(queue_module, "RESERVE_STEP", 40)  # reservations often, so a crash meets them
    image = str(tmp_path / "pl.img")
    new_image(image, size=64 << 20)
    inner = ImageFileDevice(image)
    journal = Journal()
    batch = 0
    for seed in range(20 * SOAK):
        batch = _powerloss_round(inner, seed, journal, batch) + 1
    eng = Engine.open(inner)
    store = QueueStore(eng, background=False)
    journal.judge(store.get(b"c"), batch)
    close_store(eng, store)

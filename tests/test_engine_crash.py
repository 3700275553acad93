"""Crash safety of the engine: SIGKILL of a real process, and simulated power loss.

After any crash, recovery must show every transaction whose commit was acknowledged, none that
aborted, and each transaction all-or-nothing. ``TRAX_SOAK=N`` multiplies the iterations.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kvpages import KV, tree_key

from traxfs.fs.engine.check import check_engine
from traxfs.fs.engine.engine import Engine
from traxfs.fs.engine.logmanager import GroupCommitPolicy
from traxfs.fs.struct.btree import BTree
from traxfs.fs.struct.linearhash import LinearHash
from traxfs.volume.device import ImageFileDevice, create_image
from traxfs.volume.powerloss import PowerLossDevice

SOAK = int(os.environ.get("TRAX_SOAK", "1"))
CHILD = Path(__file__).with_name("engine_child.py")
KEYS = 40


class History:
    """What the workload said it did; checks a recovered state against it."""

    def __init__(self) -> None:
        self.intent: dict[int, list[int]] = {}
        self.committed: set[int] = set()
        self.aborted: set[int] = set()

    def feed(self, line: str) -> None:
        parts = line.split()
        if not parts or parts[0] == "R":
            return
        value = int(parts[1])
        if parts[0] == "B":
            self.intent[value] = [int(k) for k in parts[2].split(",")]
        elif parts[0] == "C":
            self.committed.add(value)
        elif parts[0] == "A":
            self.aborted.add(value)

    def check(self, state: dict[int, int]) -> None:
        last_acked = {}
        for v in sorted(self.committed):
            for k in self.intent[v]:
                last_acked[k] = v
        for k, v in state.items():
            assert v >= last_acked.get(k, 0), f"key {k}: acknowledged commit {last_acked[k]} lost (found {v})"
            assert v not in self.aborted, f"key {k}: value {v} of an aborted transaction survived"
            if v:
                assert v in self.intent or v not in self.committed, f"key {k}: unknown value {v}"
                for k2 in self.intent.get(v, []):  # all-or-nothing
                    assert state[k2] >= v, f"transaction {v} is half there: key {k} has it, key {k2} has {state[k2]}"


def recovered_state(image: str) -> tuple[dict[int, int], Engine]:
    """The recovered cells, after checking every page and structure and that the B+tree holds
    and the linear hash hold exactly the cells' values (all were changed by the same transactions)."""
    eng = Engine.open(ImageFileDevice(image))
    assert check_engine(eng) == []
    kv = KV(eng, KEYS)
    state = {k: kv.get(k) for k in range(KEYS)}
    for kind, s in (("B+tree", BTree.open_named(eng, "crash")), ("hash", LinearHash.open_named(eng, "crash"))):
        if s is not None:
            for k, v in state.items():
                got = s.get(tree_key(k))
                assert (int.from_bytes(got, "little") if got else 0) == v, f"key {k}: {kind} and cells disagree"
    return state, eng


PL_KEYS = 3000  # six pages of cells: with a 4-page buffer, pages are evicted (written) constantly


@pytest.mark.timeout(600)
def test_sigkill_at_random_points(tmp_path):
    image = str(tmp_path / "crash.img")
    dev = create_image(image, 48 << 20)
    Engine.format(dev, log_size=2 << 20)
    dev.close()
    rng = random.Random(1234)
    hist = History()
    first = 1
    for it in range(50 * SOAK):
        proc = subprocess.Popen([sys.executable, str(CHILD), image, str(it), str(first), str(KEYS),
                                 str(rng.choice([1, 2, 4]))], stdout=subprocess.PIPE, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lines.extend, args=(proc.stdout,), daemon=True)
        reader.start()
        deadline = time.monotonic() + 20
        while not lines and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        assert lines and lines[0].strip() == "R", f"child did not start (rc {proc.poll()})"
        time.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reader.join(5)
        for line in lines:
            hist.feed(line)
        state, eng = recovered_state(image)
        try:
            hist.check(state)
        except AssertionError as e:
            raise AssertionError(f"{e}; recovery: {eng.recovery}") from None
        eng.close()
        first = max([first] + list(hist.intent)) + 1000
    assert len(hist.committed) > 100 and hist.aborted


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sector", [512, 4096])
def test_power_loss_drops_reorders_and_tears(tmp_path, sector):
    image = str(tmp_path / "pl.img")
    inner = create_image(image, 48 << 20)
    Engine.format(inner, log_size=2 << 20)
    rng = random.Random(sector)
    hist = History()
    value, torn = 1, 0
    for it in range(120 * SOAK):
        dev = PowerLossDevice(inner, seed=it)
        eng = Engine.open(dev, buffer_pages=4, policy=GroupCommitPolicy(max_commits=2, max_delay=0.0005))
        kv = KV(eng, PL_KEYS)
        tree = BTree.open_named(eng, "pl")
        if tree is None:
            tx = eng.begin()
            tree = BTree.create(eng, tx, "pl")
            eng.commit(tx)
        for _ in range(rng.randint(1, 40)):
            ks = sorted(rng.sample(range(PL_KEYS), rng.randint(1, 5)))
            tx = eng.begin()
            for k in ks:
                kv.put(tx, k, value)
                tree.put(tx, tree_key(k), value.to_bytes(8, "little"))
            hist.feed(f"B {value} {','.join(map(str, ks))}")
            if rng.random() < 0.2:
                eng.abort(tx)
                hist.feed(f"A {value}")
            elif rng.random() < 0.2:
                eng.soft_commit(tx)  # not acknowledged as durable: may or may not survive
            else:
                eng.commit(tx)
                hist.feed(f"C {value}")
            value += 1
        for _ in range(rng.randint(0, 12)):  # reads evict dirty pages: unflushed page writes
            kv.get(rng.randrange(PL_KEYS))
        dev.crash(keep=rng.random(), sector=sector)
        torn += dev.stats["torn"]
        eng.unclean_shutdown()
        eng = Engine.open(inner)
        where = f"iteration {it}, {dev.stats}, recovery: {eng.recovery}"  # for a failure's message
        assert check_engine(eng) == [], where
        kv = KV(eng, PL_KEYS)
        state = {k: kv.get(k) for k in range(PL_KEYS)}
        try:
            hist.check(state)
        except AssertionError as e:
            raise AssertionError(f"{e}; {where}") from None
        tree = BTree.open_named(eng, "pl")
        if tree is not None:
            stored = {int(key[3:]): int.from_bytes(v, "little") for key, v in tree.items()}
            want = {k: v for k, v in state.items() if v}
            assert stored == want, f"B+tree and cells disagree on {sorted(set(stored.items()) ^ set(want.items()))[:6]}; {where}"
        eng.close()
    assert len(hist.committed) > 500 and torn > 20

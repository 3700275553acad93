"""Crash safety of the engine: SIGKILL of a real process, and simulated power loss.

After any crash, recovery must show every transaction whose commit was acknowledged, none that
aborted, and each transaction all-or-nothing — in the page cells and in every structure the
transactions changed (B+tree, linear hash, array list, linked list). ``TRAX_SOAK=N`` multiplies
the iterations.
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
from engine_child import (
    APPENDED,
    ARRAY_RECORD,
    COUNTER,
    array_record,
    create_structures,
    list_record,
    parse_list_record,
)
from kvpages import KV, tree_key

from traxfs.fs.engine.check import check_engine
from traxfs.fs.engine.engine import Engine
from traxfs.fs.engine.logmanager import GroupCommitPolicy
from traxfs.fs.engine.page import HEADER_SIZE
from traxfs.fs.struct.arraylist import ArrayList
from traxfs.fs.struct.btree import BTree
from traxfs.fs.struct.linearhash import LinearHash
from traxfs.fs.struct.linkedlist import LinkedList
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
        self.errors: list[str] = []

    def feed(self, line: str) -> None:
        parts = line.split()
        if not parts or parts[0] == "R":
            return
        if parts[0] == "E":
            self.errors.append(line.strip())
            return
        value = int(parts[1])
        if parts[0] == "B":
            self.intent[value] = [int(k) for k in parts[2].split(",")]
        elif parts[0] == "C":
            self.committed.add(value)
        elif parts[0] == "A":
            self.aborted.add(value)

    def check(self, state: dict[int, int]) -> None:
        assert not self.errors, self.errors[:3]
        last_acked = {}
        for v in sorted(self.committed):
            for k in self.intent[v]:
                last_acked[k] = v
        for k, v in state.items():
            assert v >= last_acked.get(k, 0), f"key {k}: acknowledged commit {last_acked[k]} lost (found {v})"
            assert v not in self.aborted, f"key {k}: value {v} of an aborted transaction survived"
            if v:
                # a transaction announces its intent before it commits: others never committed
                assert v in self.intent, f"key {k}: value {v} of a transaction that never committed"
                for k2 in self.intent[v]:  # all-or-nothing
                    assert state[k2] >= v, f"transaction {v} is half there: key {k} has it, key {k2} has {state[k2]}"

    def check_present(self, present: list[int], state: dict[int, int], what: str) -> None:
        """``present``: the transactions whose mark ``what`` holds (each transaction leaves one).
        It must hold each at most once, every acknowledged commit, no aborted or unannounced
        transaction, and exactly the transactions the (already checked) cells show — whole."""
        seen = set(present)
        assert len(seen) == len(present), f"{what}: a transaction's record is there twice"
        lost = self.committed - seen
        assert not lost, f"{what}: acknowledged commits {sorted(lost)[:6]} lost"
        assert not seen & self.aborted, f"{what}: aborted transactions {sorted(seen & self.aborted)[:6]} survived"
        unknown = seen - set(self.intent)
        assert not unknown, f"{what}: transactions {sorted(unknown)[:6]} that never committed survived"
        for v in seen:  # all-or-nothing against the cells: later transactions may overwrite a key
            for k in self.intent[v]:
                assert state[k] >= v, f"transaction {v} is half there: {what} has it, key {k} has {state[k]}"
        shown = {v for v in state.values() if v} - seen
        assert not shown, f"{what}: transactions {sorted(shown)[:6]} the cells show are missing"


def array_records(al: ArrayList, n: int) -> list[bytes]:
    """The first ``n`` records, read a page at a time (``get`` per record is slow): pages()
    lists the ranges' pages in order, each holding ``per_page`` records after the header."""
    out: list[bytes] = []
    size = al.record_size
    for pid in al.pages():
        if len(out) >= n:
            break
        with al.e.page(pid) as f:
            data = bytes(f.data)
        take = min(al.per_page, n - len(out))
        out += [data[HEADER_SIZE + j * size : HEADER_SIZE + (j + 1) * size] for j in range(take)]
    assert len(out) == n, f"array list of {n} records has pages for {len(out)}"
    return out


def check_array(al: ArrayList, keys: int, state: dict[int, int], hist: History, holes: bool) -> list[int]:
    """Records ``0..keys-1`` mirror the cells; after them each transaction's appended record,
    or (``holes``: concurrent appends) a zeroed one an aborted append left. Returns the
    appended values in list order."""
    n = len(al)
    assert n >= keys, f"array list has {n} records, fewer than its {keys} keys"
    appended = []
    for i, rec in enumerate(array_records(al, n)):
        key, v = ARRAY_RECORD.unpack(rec)
        if i < keys:
            assert (key, v) == (i, state[i]), f"array record {i} is ({key}, {v}), the cell holds {state[i]}"
        elif rec == bytes(ARRAY_RECORD.size) and holes:
            continue
        else:
            assert key == APPENDED and v, f"array record {i} is ({key}, {v}), not an appended value"
            appended.append(v)
    hist.check_present(appended, state, "array list appends")
    return appended


def check_list(ll: LinkedList, state: dict[int, int]) -> None:
    """The linked list holds one record per key: ``(k, v)`` for each key whose cell holds v != 0."""
    recs = [parse_list_record(r) for r in ll.to_list()]
    assert len(ll) == len(recs), f"linked list counts {len(ll)} records, holds {len(recs)}"
    got = dict(recs)
    assert len(got) == len(recs), f"linked list holds a key twice: {sorted(recs)[:8]}"
    want = {k: v for k, v in state.items() if v}
    assert got == want, f"linked list and cells disagree on {sorted(set(got.items()) ^ set(want.items()))[:6]}"


def recovered_state(image: str, hist: History) -> tuple[dict[int, int], Engine]:
    """The recovered cells, after checking every page and structure, that the B+tree and the
    linear hash hold exactly the cells' values, and the array list and linked list too (all were
    changed by the same transactions), and that the shared counter counts the surviving ones."""
    eng = Engine.open(ImageFileDevice(image))
    try:
        assert check_engine(eng) == []
        kv = KV(eng, KEYS)
        state = {k: kv.get(k) for k in range(KEYS)}
        hist.check(state)
        for kind, s in (("B+tree", BTree.open_named(eng, "crash")), ("hash", LinearHash.open_named(eng, "crash"))):
            assert s is not None, f"{kind} missing (it was created before the child said R)"
            for k, v in state.items():
                got = s.get(tree_key(k))
                assert (int.from_bytes(got, "little") if got else 0) == v, f"key {k}: {kind} and cells disagree"
        al, ll = ArrayList.open_named(eng, "crash"), LinkedList.open_named(eng, "crash")
        assert al is not None and ll is not None
        appended = check_array(al, KEYS, state, hist, holes=True)
        check_list(ll, state)
        assert kv.get(COUNTER) == len(appended), \
            f"the shared counter is {kv.get(COUNTER)}, but {len(appended)} transactions survived"
    except AssertionError as e:
        raise AssertionError(f"{e}; recovery: {eng.recovery}") from None
    return state, eng


PL_KEYS = 3000  # six pages of cells: with a 4-page buffer, pages are evicted (written) constantly
PL_QUEUE = 40  # the linked list is a queue of the last transactions' records (~160 bytes: 2 pages)


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
        try:
            _state, eng = recovered_state(image, hist)
        except AssertionError as e:
            raise AssertionError(f"iteration {it}: {e}") from None
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
    queue: list[int] = []  # the linked list: the values of the last PL_QUEUE transactions (as recovered)
    for it in range(120 * SOAK):
        dev = PowerLossDevice(inner, seed=it)
        eng = Engine.open(dev, buffer_pages=4, policy=GroupCommitPolicy(max_commits=2, max_delay=0.0005))
        kv = KV(eng, PL_KEYS)
        tree, al, ll = BTree.open_named(eng, "pl"), ArrayList.open_named(eng, "pl"), LinkedList.open_named(eng, "pl")
        if tree is None:
            tree, _table, al, ll = create_structures(eng, "pl", PL_KEYS)
        for _ in range(rng.randint(1, 40)):
            ks = sorted(rng.sample(range(PL_KEYS), rng.randint(1, 5)))
            tx = eng.begin()
            for k in ks:
                kv.put(tx, k, value)
                tree.put(tx, tree_key(k), value.to_bytes(8, "little"))
                al.set(tx, k, array_record(k, value))
            q = queue + [value]
            ll.push(tx, list_record(value % 1000, value))
            if len(q) > PL_QUEUE:
                got, want = ll.pop(tx), q.pop(0)
                assert got is not None and parse_list_record(got)[1] == want, f"queue popped {got!r}, not {want}"
            al.append(tx, array_record(APPENDED, value))
            hist.feed(f"B {value} {','.join(map(str, ks))}")
            if rng.random() < 0.2:
                eng.abort(tx)
                hist.feed(f"A {value}")
            else:
                if rng.random() < 0.2:
                    eng.soft_commit(tx)  # not acknowledged as durable: may or may not survive
                else:
                    eng.commit(tx)
                    hist.feed(f"C {value}")
                queue = q
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
        tree, al, ll = BTree.open_named(eng, "pl"), ArrayList.open_named(eng, "pl"), LinkedList.open_named(eng, "pl")
        try:
            hist.check(state)
            assert tree is not None and al is not None and ll is not None, "structures missing"
            stored = {int(key[3:]): int.from_bytes(v, "little") for key, v in tree.items()}
            want = {k: v for k, v in state.items() if v}
            assert stored == want, f"B+tree and cells disagree on {sorted(set(stored.items()) ^ set(want.items()))[:6]}"
            # one writer: no holes, appends in commit order; the queue holds the last PL_QUEUE of them
            appended = check_array(al, PL_KEYS, state, hist, holes=False)
            assert appended == sorted(appended), "array list appends out of commit order"
            recs = [parse_list_record(r)[1] for r in ll.to_list()]
            assert recs == appended[-PL_QUEUE:], f"linked list queue {recs}, the last transactions {appended[-PL_QUEUE:]}"
            assert len(ll) == len(recs), f"linked list counts {len(ll)} records, holds {len(recs)}"
        except AssertionError as e:
            raise AssertionError(f"{e}; {where}") from None
        queue = recs
        eng.close()
    assert len(hist.committed) > 500 and torn > 20

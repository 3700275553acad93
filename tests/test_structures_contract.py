"""The contract every page structure keeps, written once and run for all four (B+tree, linear
hash, array list, linked list; the per-structure parts are in structure_kinds.py):

* a hypothesis state machine against a model (a dict for the maps, a list for the sequences):
  the structure's own random changes — and, for the maps, puts, deletes and lookups of drawn
  keys — inside transactions that commit or abort, with checkpoints, clean reopens and crashes
  (unclean shutdown, recovery) in between; after each, ``check()`` is clean and the contents
  are the model's; at the end, nothing is leaked;
* abort, reopen and unclean shutdown at scale: a large aborted transaction (pages split,
  emptied and freed inside it) leaves the committed contents and no leaked page; a clean
  reopen keeps them; uncommitted work, partly on disk after a checkpoint, is rolled back by
  recovery;
* maps: concurrent transactions with disjoint keys sharing pages, a third of them aborting,
  so logical undos run while other transactions shift the same pages' slots.

What only one structure does (splits and merges of the B+tree, the hash's bucket growth, the
array list's ranges, the linked list as a queue, bulk loads, crashes inside a split) is tested
in its own file.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import threading

import pytest
from conftest import IO_PHASES, new_engine
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)
from structure_kinds import KINDS, MAPS, Kind

from traxfs.fs.engine.check import check_engine
from traxfs.fs.engine.engine import Engine
from traxfs.volume.device import ImageFileDevice

MiB = 1 << 20
KEYS = st.one_of(st.integers(0, 400).map(lambda i: b"k%04d" % i), st.binary(max_size=24))
VALUES = st.one_of(st.binary(max_size=40), st.integers(0, 2500).map(lambda n: b"v" * n))
RECORDS = st.binary(max_size=80)


# ----- the state machines -------------------------------------------------------------------------
class StructureMachine(RuleBasedStateMachine):
    """Transactions of random changes against the model, with commit, abort, checkpoint, clean
    reopen and crash between them."""

    def __init__(self, kind: Kind):
        super().__init__()
        self.kind = kind
        self.dir = tempfile.mkdtemp(prefix=f"{kind}-sm-")
        self.path = os.path.join(self.dir, "e.img")
        self.eng = new_engine(self.path)
        self.s = kind.make(self.eng)
        self.committed = kind.empty()
        self.current = kind.empty()
        self.tx = None
        self.work = 0
        # pages a structure unlinks in a transaction are freed when it commits, or, if it aborts,
        # by a follow-up transaction that commits without waiting: a crash while it is open, or
        # after its abort before anything later is durable, leaks them (``common.free_page``),
        # so the leak check at the end is skipped after such a crash
        self.unforced_abort = self.may_leak = False

    def _begin(self, work: int = 0):
        """The open transaction (one is begun if needed). ``work``: about the bytes of log the
        caller is going to write; past ~2 MiB the transaction is committed first — one
        transaction may not outgrow the log (the engine refuses with LogFull)."""
        if self.tx is not None and self.work + work > 2 * MiB:
            self.commit()
        if self.tx is None:
            self.tx = self.eng.begin()
            self.current = _copy(self.committed)
            self.work = 0
        self.work += work
        return self.tx

    def _state(self):
        return self.current if self.tx is not None else self.committed

    def _verify(self) -> None:
        self.kind.assert_holds(self.s, self._state())

    def _reopened(self) -> None:
        self.eng = Engine.open(ImageFileDevice(self.path))
        self.s = self.kind.open(self.eng)

    @initialize(seed=st.integers(0, 2**32), n=st.sampled_from([0, 100, 700]))
    def preload(self, seed, n):
        if n:
            self.change(seed, n)
            self.commit()

    @rule(seed=st.integers(0, 2**32), n=st.sampled_from([1, 40, 300]))
    def change(self, seed, n):
        tx = self._begin(n * self.kind.change_log)
        self.kind.changes(self.s, tx, self.current, random.Random(seed), n)

    @precondition(lambda self: self.tx is not None)
    @rule()
    def commit(self):
        self.eng.commit(self.tx)
        self.tx, self.committed = None, self.current
        self.unforced_abort = False
        self._verify()

    @precondition(lambda self: self.tx is not None)
    @rule()
    def abort(self):
        self.eng.abort(self.tx)
        self.tx = None
        self.unforced_abort = True
        self._verify()

    @rule()
    def checkpoint(self):
        self.eng.checkpoint()

    @precondition(lambda self: self.tx is None)
    @rule()
    def reopen(self):
        self.eng.close()
        self._reopened()
        self.unforced_abort = False
        self._verify()

    @rule()
    def crash(self):
        self.may_leak |= self.unforced_abort or self.tx is not None
        self.eng.unclean_shutdown()
        self._reopened()
        self.tx = None
        self.unforced_abort = False
        self._verify()
        assert check_engine(self.eng) == []

    def teardown(self):
        try:
            if not self.eng.closed:
                if self.tx is not None:
                    self.eng.abort(self.tx)
                    self.tx = None
                self._verify()
                assert check_engine(self.eng, leaks=not self.may_leak) == []
                self.eng.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class MapMachine(StructureMachine):
    """A map: also single puts, deletes and lookups of drawn keys (empty, long, binary)."""

    @rule(k=KEYS, v=VALUES)
    def put(self, k, v):
        v = self.kind.value(k, v)
        tx = self._begin(len(k) + len(v) + 300)
        assert self.s.put(tx, k, v) == self.current.get(k)
        self.current[k] = v

    @rule(k=KEYS)
    def delete(self, k):
        tx = self._begin(1500)
        assert self.s.delete(tx, k) == self.current.pop(k, None)

    @rule(lo=KEYS, n=st.sampled_from([1, 30, 400]))
    def delete_run(self, lo, n):
        """Consecutive keys from ``lo`` on: empties and merges B+tree leaves."""
        tx = self._begin(n * 1500)
        for k in [k for k in sorted(self.current) if k >= lo][:n]:
            assert self.s.delete(tx, k) == self.current.pop(k)

    @rule(k=KEYS, lo=st.one_of(st.none(), KEYS), hi=st.one_of(st.none(), KEYS))
    def lookups(self, k, lo, hi):
        self.kind.lookups(self.s, self._state(), k, lo, hi)


class SequenceMachine(StructureMachine):
    """A sequence: also single appends of drawn records."""

    @rule(data=RECORDS)
    def append(self, data):
        tx = self._begin(len(data) + 300)
        self.kind.append(self.s, tx, self.current, data)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_state_machine(kind):
    machine = MapMachine if kind.is_map else SequenceMachine
    run_state_machine_as_test(lambda: machine(kind), settings=settings(
        max_examples=kind.examples, stateful_step_count=30, deadline=None, phases=IO_PHASES))


# ----- abort, reopen, unclean shutdown ------------------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_abort_reopen_and_unclean_shutdown(tmp_path, kind):
    path = str(tmp_path / "e.img")
    eng = new_engine(path)
    s = kind.make(eng)
    rnd = random.Random(3)
    model = kind.empty()
    tx = eng.begin()
    kind.changes(s, tx, model, rnd, kind.batch)
    eng.commit(tx)
    tx = eng.begin()  # a large aborted transaction: pages split, emptied and freed inside it
    kind.changes(s, tx, _copy(model), rnd, kind.batch)
    eng.abort(tx)
    kind.assert_holds(s, model)
    assert check_engine(eng, leaks=True) == []  # pages emptied in the aborted tx were freed after it
    eng.close()
    eng = Engine.open(ImageFileDevice(path))
    s = kind.open(eng)
    kind.assert_holds(s, model)
    tx = eng.begin()  # uncommitted work, part of it on disk (checkpoint), then a crash
    scratch = _copy(model)
    kind.changes(s, tx, scratch, rnd, kind.batch // 2)
    eng.checkpoint()
    kind.changes(s, tx, scratch, rnd, kind.batch // 2)
    eng.unclean_shutdown()
    eng = Engine.open(ImageFileDevice(path))
    assert eng.recovery.losers
    s = kind.open(eng)
    kind.assert_holds(s, model)
    assert check_engine(eng) == []
    eng.close()


def _copy(model):
    return type(model)(model)


# ----- maps: concurrent transactions --------------------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", MAPS, ids=str)
def test_concurrent_transactions_share_pages(eng, kind):
    """Threads with disjoint keys interleaved in the same pages; a third of the transactions
    abort, so logical undos run while other transactions shift the same pages' slots."""
    s = kind.make(eng)
    models = [dict() for _ in range(4)]
    errors = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)

    def worker(t: int) -> None:
        rnd = random.Random(t)
        try:
            for _ in range(12):
                tx = eng.begin()
                staged = dict(models[t])
                for _ in range(60):
                    k = b"%04d-%d" % (rnd.randrange(2000), t)
                    if rnd.random() < 0.7:
                        v = b"%d" % rnd.randrange(10**6) * rnd.randrange(1, 12)
                        s.put(tx, k, v)
                        staged[k] = v
                    elif s.delete(tx, k) is not None:
                        del staged[k]
                if rnd.random() < 0.35:
                    eng.abort(tx)
                else:
                    eng.commit(tx)
                    models[t] = staged
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    try:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    want = {}
    for m in models:
        want.update(m)
    kind.assert_holds(s, want)
    assert check_engine(eng, leaks=True) == []

"""The linear hash (fs/struct/linearhash.py) against a dict: one-bucket-at-a-time growth,
overflow chains, commit/abort, reopen, unclean shutdown, a crash in the middle of a split (device
snapshots), concurrent transactions, and ``check()``.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading

import pytest
from conftest import IO_PHASES, bulk_build_all_or_nothing, new_engine
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from traxfs.fs.engine.check import check_engine
from traxfs.fs.engine.engine import Engine
from traxfs.fs.struct.linearhash import FILL, MAX_ENTRY, LinearHash, bucket_of, key_hash
from traxfs.volume.device import ImageFileDevice, create_image

pytestmark = pytest.mark.timeout(240)
MiB = 1 << 20


def snapshot(eng: Engine, dst: str) -> None:
    """The device as a crash at this instant would leave it (log forced first; sparse copy)."""
    eng.log.flush_all()
    out = create_image(dst, eng.dev.size)
    for off in range(0, eng.dev.size, MiB):
        chunk = eng.dev.read(off, MiB)
        if chunk.count(0) != len(chunk):
            out.write(off, chunk)
    out.close()


def assert_healthy(h: LinearHash, model: dict) -> None:
    assert h.check() == []
    got = list(h.items())
    assert len(got) == len(model) == len(h)
    assert dict(got) == model


def make_hash(eng: Engine, name: str = "h") -> LinearHash:
    tx = eng.begin()
    h = LinearHash.create(eng, tx, name)
    eng.commit(tx)
    return h


def test_addressing_grows_one_bucket_at_a_time():
    # with level N and split pointer s, buckets below s use N+1 bits
    h = 0b1011_0110
    assert bucket_of(h, 2, 0) == 0b10
    assert bucket_of(h, 2, 3) == 0b110  # 2 < 3: already split, one more bit
    assert bucket_of(h, 3, 0) == 0b110
    assert key_hash(b"abc") == key_hash(b"abc") and key_hash(b"abc") != key_hash(b"abd")


@pytest.mark.timeout(60)
def test_put_get_delete_overwrite_and_limits(eng):
    h = make_hash(eng)
    tx = eng.begin()
    assert h.put(tx, b"a", b"1") is None
    assert h.put(tx, b"", b"empty") is None
    assert h.put(tx, b"a", b"one") == b"1"
    assert h.put(tx, b"a", b"x" * 2000) == b"one"  # grows past the page's free space? still fits
    assert h.get(b"a") == b"x" * 2000 and h.get(b"") == b"empty" and h.get(b"b") is None
    assert h.delete(tx, b"b") is None and h.delete(tx, b"") == b"empty"
    eng.commit(tx)
    assert dict(h.items()) == {b"a": b"x" * 2000}
    with pytest.raises(ValueError):
        h.put(eng.begin(), b"k" * 1025, b"")
    with pytest.raises(ValueError):
        h.put(eng.begin(), b"k", b"v" * MAX_ENTRY)
    assert LinearHash.open_named(eng, "h").header == h.header


@pytest.mark.timeout(120)
def test_20000_keys_grow_the_table_then_deletes(eng):
    h = make_hash(eng)
    rnd = random.Random(7)
    model = {}
    tx = eng.begin()
    for n in range(20000):
        k = b"key-%d" % rnd.randrange(10**9)
        v = bytes([n % 256]) * rnd.randrange(40)
        h.put(tx, k, v)
        model[k] = v
        if n % 2500 == 2499:
            eng.commit(tx)
            tx = eng.begin()
    eng.commit(tx)
    assert_healthy(h, model)
    nb = h.buckets()
    data = sum(len(k) + len(v) + 6 for k, v in model.items())
    assert nb >= data / (4060 * FILL) - 1  # it grew with the data, one bucket at a time
    for k in rnd.sample(sorted(model), 500):
        assert h.get(k) == model[k]
    tx = eng.begin()
    for n, k in enumerate(rnd.sample(sorted(model), 15000)):
        assert h.delete(tx, k) == model.pop(k)
        if n % 2500 == 2499:
            eng.commit(tx)
            tx = eng.begin()
    eng.commit(tx)
    assert_healthy(h, model)
    assert h.buckets() == nb  # the table never shrinks
    assert check_engine(eng, leaks=True) == []


@pytest.mark.timeout(60)
def test_big_records_make_overflow_chains(eng):
    h = make_hash(eng)
    model = {b"big%03d" % i: bytes([i]) * 2900 for i in range(60)}
    tx = eng.begin()
    for k, v in model.items():
        h.put(tx, k, v)
    eng.commit(tx)
    assert_healthy(h, model)
    chains = [len(h._chain(b)) for b in range(h.buckets())]
    assert max(chains) >= 2
    tx = eng.begin()
    for k in list(model)[::2]:
        h.put(tx, k, b"small")
        model[k] = b"small"
    eng.commit(tx)
    assert_healthy(h, model)


@pytest.mark.timeout(90)
def test_abort_reopen_unclean_shutdown(tmp_path):
    path = str(tmp_path / "e.img")
    eng = new_engine(path)
    h = make_hash(eng)
    model = {b"%d" % i: b"v" * (i % 70) for i in range(2500)}
    tx = eng.begin()
    for k, v in model.items():
        h.put(tx, k, v)
    eng.commit(tx)
    buckets = h.buckets()
    tx = eng.begin()
    for i in range(2500, 5000):  # enough to split buckets inside the aborted transaction
        h.put(tx, b"%d" % i, b"n" * 60)
    for i in range(0, 2500, 3):
        h.delete(tx, b"%d" % i)
    for i in range(1, 2500, 3):
        h.put(tx, b"%d" % i, b"o" * 90)
    eng.abort(tx)
    assert h.buckets() > buckets  # splits are kept: the logical undo does not shrink the table
    assert_healthy(h, model)
    eng.close()
    eng = Engine.open(ImageFileDevice(path))
    h = LinearHash.open_named(eng, "h")
    assert_healthy(h, model)
    tx = eng.begin()
    for i in range(5000, 7000):
        h.put(tx, b"%d" % i, b"u" * 50)
    eng.checkpoint()  # uncommitted pages on disk
    for i in range(0, 1000):
        h.delete(tx, b"%d" % i)
    eng.unclean_shutdown()
    eng = Engine.open(ImageFileDevice(path))
    h = LinearHash.open_named(eng, "h")
    assert_healthy(h, model)
    assert check_engine(eng) == []
    eng.close()


@pytest.mark.timeout(90)
def test_crash_inside_a_split(tmp_path, monkeypatch):
    eng = new_engine(str(tmp_path / "e.img"))
    h = make_hash(eng)
    model = {b"c%d" % i: b"c" * 30 for i in range(800)}
    tx = eng.begin()
    for k, v in model.items():
        h.put(tx, k, v)
    eng.commit(tx)
    eng.checkpoint()
    shots, calls = [], [0]
    from traxfs.fs.struct.arraylist import ArrayList

    original = ArrayList.append

    def spy(self, tx, value):  # the split has moved its records, not yet linked the new bucket
        calls[0] += 1
        if calls[0] in (2, 9, 17):
            if len(shots) % 2:
                eng.buffer.write_back()
            dst = str(tmp_path / f"snap{len(shots)}.img")
            snapshot(eng, dst)
            shots.append(dst)
        return original(self, tx, value)

    monkeypatch.setattr(ArrayList, "append", spy)
    tx = eng.begin()
    for i in range(2000):
        h.put(tx, b"n%d" % i, b"n" * 40)
    eng.abort(tx)
    monkeypatch.undo()
    assert len(shots) == 3, calls
    assert_healthy(h, model)
    eng.close()
    for dst in shots:
        e2 = Engine.open(ImageFileDevice(dst))
        h2 = LinearHash.open_named(e2, "h")
        assert_healthy(h2, model)
        assert check_engine(e2) == []
        e2.close()


@pytest.mark.timeout(90)
def test_concurrent_transactions(eng):
    h = make_hash(eng)
    models = [dict() for _ in range(3)]
    errors = []

    def worker(t: int) -> None:
        rnd = random.Random(t)
        try:
            for _ in range(10):
                tx = eng.begin()
                staged = dict(models[t])
                for _ in range(80):
                    k = b"%d/%d" % (t, rnd.randrange(700))
                    if rnd.random() < 0.7:
                        v = b"%d" % rnd.randrange(10**6) * rnd.randrange(1, 8)
                        h.put(tx, k, v)
                        staged[k] = v
                    elif h.delete(tx, k) is not None:
                        del staged[k]
                if rnd.random() < 0.35:
                    eng.abort(tx)
                else:
                    eng.commit(tx)
                    models[t] = staged
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    want = {}
    for m in models:
        want.update(m)
    assert_healthy(h, want)
    assert check_engine(eng, leaks=True) == []


# ----- stateful --------------------------------------------------------------------------------------
KEYS = st.one_of(st.integers(0, 300).map(lambda i: b"k%d" % i), st.binary(max_size=16))
VALUES = st.one_of(st.binary(max_size=30), st.integers(0, 2500).map(lambda n: b"v" * n))


class HashMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="lhash-sm-")
        self.path = os.path.join(self.dir, "e.img")
        self.eng = new_engine(self.path)
        self.h = make_hash(self.eng)
        self.committed: dict[bytes, bytes] = {}
        self.tx = None
        self.current: dict[bytes, bytes] = {}
        self.work = 0

    def _begin(self, work: int = 0):
        """The open transaction (one is begun if needed). ``work``: about the bytes of log
        the caller is going to write; past ~2 MiB the transaction is committed first — one
        transaction may not outgrow the log (the engine refuses with LogFull)."""
        if self.tx is not None and self.work + work > 2 * MiB:
            self.commit()
        if self.tx is None:
            self.tx = self.eng.begin()
            self.current = dict(self.committed)
            self.work = 0
        self.work += work
        return self.tx

    def _state(self) -> dict:
        return self.current if self.tx is not None else self.committed

    @rule(k=KEYS, v=VALUES)
    def put(self, k, v):
        tx = self._begin(len(k) + len(v) + 300)
        assert self.h.put(tx, k, v) == self.current.get(k)
        self.current[k] = v

    @initialize(seed=st.integers(0, 2**32), n=st.sampled_from([0, 100, 700]))
    def preload(self, seed, n):
        if n:
            self.put_many(seed, n, 60)
            self.commit()

    @rule(seed=st.integers(0, 2**32), n=st.sampled_from([40, 300]), size=st.sampled_from([4, 60, 900]))
    def put_many(self, seed, n, size):
        """Enough entries at once to split buckets (and, with big values, to chain pages)."""
        rnd = random.Random(seed)
        tx = self._begin(n * (size + 300))
        for _ in range(n):
            i = rnd.randrange(4000)
            k, v = b"b%d" % i, b"x" * rnd.randrange(size + 1)
            self.h.put(tx, k, v)
            self.current[k] = v

    @rule(k=KEYS)
    def delete(self, k):
        tx = self._begin(1500)
        assert self.h.delete(tx, k) == self.current.pop(k, None)

    @rule(n=st.sampled_from([1, 30, 300]))
    def delete_some(self, n):
        tx = self._begin(n * 1500)
        for k in sorted(self.current)[:n]:
            assert self.h.delete(tx, k) == self.current.pop(k)

    @rule(k=KEYS)
    def get(self, k):
        assert self.h.get(k) == self._state().get(k)

    @precondition(lambda self: self.tx is not None)
    @rule()
    def commit(self):
        self.eng.commit(self.tx)
        self.tx, self.committed = None, self.current
        assert_healthy(self.h, self.committed)

    @precondition(lambda self: self.tx is not None)
    @rule()
    def abort(self):
        self.eng.abort(self.tx)
        self.tx = None
        assert_healthy(self.h, self.committed)

    @rule()
    def checkpoint(self):
        self.eng.checkpoint()

    @precondition(lambda self: self.tx is None)
    @rule()
    def reopen(self):
        self.eng.close()
        self.eng = Engine.open(ImageFileDevice(self.path))
        self.h = LinearHash.open_named(self.eng, "h")
        assert_healthy(self.h, self.committed)

    @rule()
    def crash(self):
        self.eng.unclean_shutdown()
        self.eng = Engine.open(ImageFileDevice(self.path))
        self.h = LinearHash.open_named(self.eng, "h")
        self.tx = None
        assert_healthy(self.h, self.committed)
        assert check_engine(self.eng) == []

    def teardown(self):
        try:
            if not self.eng.closed:
                if self.tx is not None:
                    self.eng.abort(self.tx)
                    self.tx = None
                assert_healthy(self.h, self.committed)
                assert check_engine(self.eng) == []
                self.eng.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


HashMachine.TestCase.settings = settings(max_examples=10, stateful_step_count=30, deadline=None,
                                         phases=IO_PHASES)
TestHashMachine = HashMachine.TestCase


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [0, 1, 5, 700, 30000])
def test_bulk_create_then_use_as_usual(eng, n):
    """A bulk-built table has the shape one-by-one inserts would grow (bytes within FILL of the
    buckets), passes its check, and behaves as any table afterwards (puts split it further)."""
    rnd = random.Random(n)
    items = {rnd.randbytes(rnd.randint(1, 30)): rnd.randbytes(rnd.randint(0, 300)) for _ in range(n)}
    items[b"big"] = b"x" * (MAX_ENTRY - 3)  # a bucket overflowing into a chain is laid out too
    tx = eng.begin()
    h = LinearHash.bulk_create(eng, tx, items.items(), "bulk")
    eng.commit(tx)
    assert_healthy(h, items)
    assert check_engine(eng, leaks=True) == []
    tx = eng.begin()
    for k in list(items)[: min(n // 2, 800)]:
        assert h.delete(tx, k) == items.pop(k)
    for _ in range(min(n, 800)):
        k = rnd.randbytes(8)
        h.put(tx, k, b"y" * 40)
        items[k] = b"y" * 40
    eng.commit(tx)
    assert_healthy(h, items)


@pytest.mark.timeout(120)
def test_bulk_create_is_all_or_nothing(tmp_path):
    items = [(b"%08d" % i, b"v" * 60) for i in range(20000)]
    eng, h = bulk_build_all_or_nothing(str(tmp_path / "engine.img"), LinearHash, items)
    assert_healthy(h, dict(items))
    assert check_engine(eng, leaks=True) == []
    tx = eng.begin()
    with pytest.raises(ValueError, match="duplicate key"):
        LinearHash.bulk_create(eng, tx, [(b"a", b""), (b"a", b"")])
    with pytest.raises(ValueError, match="exceeds the limit"):
        LinearHash.bulk_create(eng, tx, [(b"a", b"x" * MAX_ENTRY)])
    assert tx.last_lsn == 0  # refused before anything was allocated or logged
    eng.abort(tx)
    assert check_engine(eng, leaks=True) == []
    eng.close()

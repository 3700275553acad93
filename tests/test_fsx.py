"""fsx-style random operations on the filesystem under test, checked against an in-memory model.

Two drivers over the same operations (``fsx_model.Fsx``): writes anywhere (inside, at EOF, past
EOF leaving holes, up to 8 MiB), overwrites, reads (across and past EOF), ftruncate up and down,
mmap reads, MAP_SHARED mmap writes with msync, rename onto another name (optionally with the
replaced file still open), fsync/fdatasync, close-and-reopen (optionally after dropping the
file's page cache). Lengths are 1 byte to 256 KiB, half of the operations 4 KiB-aligned.
After every operation: names, st_size (fstat and stat) and sampled ranges are checked; at the
end of every run the whole of every file is compared.

* ``test_fsx_stateful`` — a hypothesis state machine; every example works in a fresh
  subdirectory of ``mnt`` with 2 or 3 file names. No shrinking (``IO_PHASES``): a failure is
  reported as found, with its steps and the exerciser's log of recent operations.
* ``test_fsx_seeded`` — a fixed ``random.Random(seed)`` sequence of thousands of operations, the
  cheap reproducible complement.

``TRAX_FSX_SCALE`` (default 1) multiplies the number of hypothesis examples, the length of the
seeded runs and both timeouts, for soak runs. ``TRAX_FS_TARGET=local`` runs everything against
the host's filesystem (see the ``mnt`` fixture).
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pytest
from conftest import IO_PHASES
from fsx_model import (
    FILLS,
    LEN_RANGES,
    NAMES,
    RAW_MAX,
    READ_WHERE,
    TOTALS,
    TRUNC_HOW,
    WRITE_WHERE,
    Fsx,
    KiB,
    MiB,
    random_step,
    seeded_fsx,
)
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

SCALE = max(1, int(os.environ.get("TRAX_FSX_SCALE", "1")))

MAX_EXAMPLES = 60
STEPS = 100
SEEDED_OPS = 2500
SEEDS = (1, 2, 3)

FSX_SETTINGS = settings(
    max_examples=MAX_EXAMPLES * SCALE,
    stateful_step_count=STEPS,
    phases=IO_PHASES,
)

which = st.integers(0, len(NAMES) - 1)


def _scramble(x: int) -> int:
    """A bijection of 32-bit values fixing 0: hypothesis favours small integers, which as raw
    offsets would keep every access near offset 0 and every truncation near size 0; scrambled,
    0 still comes up (offset 0, truncate to 0) and the rest spread over the whole range."""
    x = (x * 0x9E3779B1) & RAW_MAX
    return x ^ (x >> 16)


raw = st.integers(0, RAW_MAX).map(_scramble)
length = st.one_of(*(st.integers(lo, hi) for lo, hi in LEN_RANGES))
fill = st.sampled_from(FILLS)
initial_size = st.one_of(st.just(0), st.integers(1, 64 * KiB), st.integers(1, 4 * MiB))
_example = itertools.count()


class FsxMachine(RuleBasedStateMachine):
    root: Path  # the directory of the filesystem under test, set by the test

    def __init__(self) -> None:
        super().__init__()
        self.fsx: Fsx | None = None

    @initialize(nfiles=st.integers(2, 3), seed=raw,
                sizes=st.lists(initial_size, min_size=len(NAMES), max_size=len(NAMES)))
    def setup(self, nfiles: int, seed: int, sizes: list[int]) -> None:
        self.fsx = Fsx(self.root / f"ex{next(_example)}", nfiles, seed, tuple(sizes))

    @rule(which=which, where=st.sampled_from(WRITE_WHERE), off=raw, length=length,
          aligned=st.booleans(), seed=raw, fill=fill)
    def write(self, which, where, off, length, aligned, seed, fill):
        self.fsx.write(which, where, off, length, aligned, seed, fill)

    @rule(which=which, where=st.sampled_from(("eof", "near")), off=raw, length=length,
          aligned=st.booleans(), seed=raw, fill=fill)
    def extend(self, which, where, off, length, aligned, seed, fill):
        """A write at or just past EOF (a second write rule: writes are the bulk of fsx)."""
        self.fsx.write(which, where, off, length, aligned, seed, fill)

    @rule(which=which, off=raw, length=length, aligned=st.booleans(), seed=raw, fill=fill)
    def overwrite(self, which, off, length, aligned, seed, fill):
        self.fsx.overwrite(which, off, length, aligned, seed, fill)

    @rule(which=which, where=st.sampled_from(READ_WHERE), off=raw, length=length,
          aligned=st.booleans())
    def read(self, which, where, off, length, aligned):
        self.fsx.read(which, where, off, length, aligned)

    @rule(which=which, how=st.sampled_from(TRUNC_HOW), raw=raw, aligned=st.booleans())
    def truncate(self, which, how, raw, aligned):
        self.fsx.truncate(which, how, raw, aligned)

    @rule(which=which, off=raw, length=length)
    def mmap_read(self, which, off, length):
        self.fsx.mmap_read(which, off, length)

    @rule(which=which, off=raw, length=length, seed=raw, fill=fill)
    def mmap_write(self, which, off, length, seed, fill):
        self.fsx.mmap_write(which, off, length, seed, fill)

    @rule(src=which, dst=which, keep_target_open=st.booleans())
    def rename(self, src, dst, keep_target_open):
        self.fsx.rename(src, dst, keep_target_open)

    @rule(which=which, data_only=st.booleans())
    def sync(self, which, data_only):
        self.fsx.sync(which, data_only)

    @rule(which=which, drop_cache=st.booleans())
    def reopen(self, which, drop_cache):
        self.fsx.reopen(which, drop_cache)

    @precondition(lambda self: self.fsx is not None and self.fsx.missing())
    @rule(idx=which)
    def create(self, idx):
        self.fsx.create_missing(idx)

    @invariant()
    def matches_model(self):
        if self.fsx is not None:
            self.fsx.check_quick()

    def teardown(self):
        if self.fsx is not None:
            self.fsx.finish()


@pytest.mark.timeout(900 * SCALE)
def test_fsx_stateful(mnt):
    class Machine(FsxMachine):
        root = mnt

    before = TOTALS.copy()
    t0 = time.monotonic()
    run_state_machine_as_test(Machine, settings=FSX_SETTINGS)
    done = TOTALS - before
    print(f"\nfsx stateful: {done.pop('runs', 0)} examples, {done.pop('ops', 0)} ops, "
          f"{done.pop('bytes_written', 0) / MiB:.0f} MiB written, {done.pop('bytes_read', 0) / MiB:.0f} MiB "
          f"read in {time.monotonic() - t0:.1f} s: " + ", ".join(f"{k} {v}" for k, v in sorted(done.items())))


@pytest.mark.timeout(600 * SCALE)
@pytest.mark.parametrize("seed", SEEDS)
def test_fsx_seeded(mnt, seed):
    fsx, rng = seeded_fsx(mnt / f"seeded{seed}", seed)
    t0 = time.monotonic()
    try:
        for i in range(SEEDED_OPS * SCALE):
            random_step(fsx, rng)
            fsx.check_quick()
            if i % 500 == 499:
                fsx.check_full()
    finally:
        fsx.finish()
    print(f"\nfsx seed {seed}: {fsx.summary()} in {time.monotonic() - t0:.1f} s")

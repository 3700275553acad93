"""Crash safety of the filesystem.

* SIGKILL of the real mount server at random points of a mixed workload (tests/fs_workload.py)
  running through the real FUSE mount; then fsck (recovery runs, and the check must be clean),
  remount, and judge every journal line: every fsynced file with its exact bytes, every
  durable rename and unlink done, no rename half done (exactly one of the two names, with the
  right bytes), and files never fsynced either absent or holding a prefix of what was written
  (ordered mode: never bytes that were not written to the file). The same image goes through
  all iterations, so recovery also runs on top of earlier recoveries.
* Power loss under the filesystem, in process: the volume is the power-loss device wrapper
  (unflushed writes dropped, reordered, torn at 512 B or 4 KiB); after each crash the
  filesystem reopens on what survived, fsck must be clean (checksums included), every name
  unchanged since the last fsync must hold exactly its contents then, and every name changed
  since must hold one of the states it passed through, whole (``_powerloss_round`` says why that
  is what the filesystem guarantees) — never an I/O error, a torn write, stale bytes or bytes
  from elsewhere.

Both workloads overwrite checksummed pages in place (whole and partial pages, in random order)
and append in odd chunks: the checksum protocol for in-place overwrites (``fs/datasums.py``)
must leave no false checksum error after any crash.

``TRAX_SOAK=N`` multiplies the iterations.
"""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from fs_workload import content
from fsmount import traxfs_mount

from traxfs.fs.errors import FsError
from traxfs.fs.filesystem import ROOT_INO, FileSystem
from traxfs.fs.fsck import fsck
from traxfs.volume.device import ImageFileDevice
from traxfs.volume.powerloss import PowerLossDevice

SOAK = int(os.environ.get("TRAX_SOAK", "1"))
WORKLOAD = Path(__file__).with_name("fs_workload.py")


class Expect:
    """What must be true of the tree, from the journals so far."""

    def __init__(self) -> None:
        self.exact: dict[str, int] = {}  # path -> version it must hold
        self.absent: set[str] = set()
        self.pending_rename: dict[str, tuple[str, int, int | None]] = {}  # final -> (tmp, new ver, old ver)
        self.maybe_unlinked: set[str] = set()
        self.prefix: dict[str, int] = {}  # never fsynced: path -> bytes written
        self.overwriting: dict[str, tuple[int, int]] = {}  # path -> (fsynced version, version being written)
        self.sizes: dict[str, int] = {}  # versions written in place keep their file's size

    def feed(self, line: str) -> None:
        p = line.split()
        if len(p) < 2:
            return  # a torn last line: the workload died writing it
        kind = p[0]
        if kind == "D":
            self.exact[p[1]] = int(p[2])
            if len(p) > 3:
                self.sizes[p[1]] = int(p[3])
            self.absent.discard(p[1])
            self.overwriting.pop(p[1], None)
        elif kind == "O":
            self.overwriting[p[1]] = (int(p[2]), int(p[3]))
        elif kind == "P":
            self.pending_rename[p[1]] = (p[2], int(p[3]), self.exact.get(p[1]))
        elif kind == "R":
            self.pending_rename.pop(p[1], None)
            self.exact[p[1]] = int(p[2])  # (a later replace may have its .tmp written already)
        elif kind == "u":
            self.maybe_unlinked.add(p[1])
        elif kind == "U":
            self.maybe_unlinked.discard(p[1])
            self.exact.pop(p[1], None)
            self.absent.add(p[1])
        elif kind == "V":
            self.prefix[p[1]] = int(p[3])

    def judge(self, problems: list[str]) -> None:
        """Check the mounted tree; then adopt what was found for the uncertain items."""
        def read(path: str) -> bytes | None:
            try:
                with open(path, "rb") as f:
                    return f.read()
            except FileNotFoundError:
                return None
            except OSError as e:  # EIO: a checksum that does not match what recovery left
                problems.append(f"{path}: read failed: {e}")
                return b"<unreadable>"

        for path, (old_ver, new_ver) in self.overwriting.items():
            got, old = read(path), content(path, old_ver, self.sizes.get(path))
            new = content(path, new_ver, len(old))
            if got is None or len(got) != len(old) or any(g != o and g != w for g, o, w in zip(got, old, new, strict=True)):
                problems.append(f"{path}: overwritten in place (version {old_ver} -> {new_ver}, never fsynced) but "
                                "holds bytes that are neither")
            if got is not None:
                os.unlink(path)  # a mix of two versions: out of the model
            self.exact.pop(path, None)
        self.overwriting.clear()

        for path, ver in list(self.exact.items()):
            got = read(path)
            if path in self.maybe_unlinked:
                if got is None:
                    self.exact.pop(path)
                    self.absent.add(path)
                    continue
            if path in self.pending_rename:
                continue
            if got is None:
                problems.append(f"{path}: fsynced (version {ver}) but missing")
            elif got != content(path, ver, self.sizes.get(path)):
                problems.append(f"{path}: {len(got)} bytes differ from fsynced version {ver}")
        self.maybe_unlinked.clear()
        for path in self.absent:
            if os.path.exists(path):
                problems.append(f"{path}: durably removed but present")
        for final, (tmp, ver, old) in list(self.pending_rename.items()):
            f, t = read(final), read(tmp)
            new = content(final, ver)
            if f == new and t is None:
                self.exact[final] = ver
            elif t == new and (f == (content(final, old) if old is not None else None)):
                os.rename(tmp, final)  # finish it by hand so later journals stay simple
                self.exact[final] = ver
            else:
                problems.append(f"rename {tmp} -> {final} half done: final={None if f is None else len(f)} "
                                f"bytes, tmp={None if t is None else len(t)} bytes")
        self.pending_rename.clear()
        for path in list(self.prefix):
            got = read(path)
            if got is not None and got != content(path, 1)[: len(got)]:
                problems.append(f"{path}: never fsynced, holds {len(got)} bytes that are not a prefix of what "
                                "was written (unwritten bytes exposed)")
            if got is not None:
                os.unlink(path)  # keep the tree small and the model exact
        self.prefix.clear()


@pytest.mark.timeout(900)
def test_sigkill_server_during_mixed_workload(tmp_path):
    iterations = 8 * SOAK
    rng = random.Random(20261122)
    exp = Expect()
    with traxfs_mount(tmp_path, size=1 << 30) as m:
        work = m.mp / "crash"
        work.mkdir()
        for it in range(iterations):
            journal = tmp_path / f"journal-{it}"
            wl = subprocess.Popen([sys.executable, str(WORKLOAD), str(work), str(journal), str(it), f"i{it}-"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(rng.uniform(0.3, 2.5))
            m.kill()
            try:
                wl.wait(timeout=30)
            except subprocess.TimeoutExpired:
                wl.kill()
                wl.wait()
            lines = journal.read_text().splitlines() if journal.exists() else []
            for line in lines:
                exp.feed(line)
            r = m.fsck()
            assert r.returncode == 0, f"iteration {it}: fsck after the crash: {r.stdout}\n{r.stderr}"
            m.start()
            problems: list[str] = []
            exp.judge(problems)
            assert not problems, f"iteration {it} ({len(lines)} journal lines): " + "\n".join(problems[:20])


@dataclass(frozen=True)
class Overwritten:
    """A file's bytes overwritten in place since they were last known: no transaction covers such
    writes, so after a crash each byte holds its old value or one written there since."""

    base: bytes
    writes: tuple[tuple[int, bytes], ...]

    def admits(self, got: bytes | None) -> bool:
        if got is None or len(got) != len(self.base):
            return False
        allowed = [{b} for b in self.base]
        for off, chunk in self.writes:
            for i, b in enumerate(chunk):
                allowed[off + i].add(b)
        return all(g in a for g, a in zip(got, allowed, strict=True))

    def applied(self) -> bytes:
        out = bytearray(self.base)
        for off, chunk in self.writes:
            out[off : off + len(chunk)] = chunk
        return bytes(out)


# What a name holds: None (absent), its exact bytes, or bytes being overwritten in place.
State = bytes | Overwritten | None


def _admits(state: State, got: bytes | None) -> bool:
    return state.admits(got) if isinstance(state, Overwritten) else got == state


def _describe(state: State) -> str:
    if state is None:
        return "absent"
    if isinstance(state, Overwritten):
        return f"{len(state.base)} bytes overwritten in place"
    return f"{len(state)} bytes"


def _contents(fs: FileSystem, name: bytes) -> bytes | None:
    try:
        node = fs.lookup(ROOT_INO, name)
    except FsError as e:
        if e.errno != errno.ENOENT:
            raise
        return None
    try:
        return fs.read(node.ino, 0, node.size + 1)
    except FsError as e:  # EIO: bytes that do not match their checksum
        raise AssertionError(f"{name!r}: read failed: {e}") from e


def _powerloss_round(inner: ImageFileDevice, seed: int, durable: dict[bytes, bytes | None]) -> None:
    """One round: changes, some fsynced, then power loss; ``durable`` holds every name's contents
    on disk (None: absent) before the round and is updated to what survived.

    What survives is judged exactly. The log is one sequence and an fsync of any file forces all
    of it (and every file's data before it), so a name unchanged since the last fsync holds
    exactly its contents then. A name changed since holds one of the states it passed through
    since then, whole: each change is one transaction (a create, an unlink, a truncate, a write
    into holes with its pages and its new size) and ordered mode puts the data a transaction
    makes reachable on disk before its commit record, so a truncate-and-rewrite leaves the old
    contents, empty, or all of the new — never a torn prefix, stale bytes or another file's.
    Overwrites in place are not transactions: each byte is its old value or one written there."""
    rng = random.Random(seed)
    dev = PowerLossDevice(inner, seed=seed)
    # a short commit interval in some rounds: the log daemon then writes commits nobody forced
    # (and the inode flusher deferred sizes) before the power goes, which is where ordered mode
    # must hold; with the default second they are simply lost
    fs = FileSystem.open(dev, buffer_pages=64, commit_interval=rng.choice([1.0, 0.002]))
    current = dict(durable)  # each name's state now (in memory)
    since: dict[bytes, list[State]] = {}  # names changed since the last fsync: each state they held

    def became(name: bytes, state: State) -> None:
        since.setdefault(name, [current[name]]).append(state)
        current[name] = state

    def fsynced() -> None:
        since.clear()
        for name, state in current.items():
            if isinstance(state, Overwritten):
                current[name] = state.applied()

    for name, data in durable.items():
        assert _contents(fs, name) == data, f"seed {seed}: {name!r} is not {_describe(data)} as recovered"
    for _ in range(rng.randint(3, 25)):
        name = f"p{rng.randrange(30)}".encode()
        if current[name] is None:
            fs.create(ROOT_INO, name, 0o644, 0, 0)
            became(name, b"")
        node = fs.lookup(ROOT_INO, name)
        state = current[name]
        if rng.random() < 0.35 and isinstance(state, bytes | Overwritten) and node.size:
            # overwrite in place (whole and partial checksummed pages)
            base = state.base if isinstance(state, Overwritten) else state
            writes = list(state.writes) if isinstance(state, Overwritten) else []
            for _ in range(rng.randint(1, 6)):
                off = rng.randrange(len(base))
                if rng.random() < 0.5:
                    off -= off % 4096
                chunk = rng.randbytes(min(rng.choice([1, 100, 4096, 5000, 12288]), len(base) - off))
                fs.write(node.ino, off, chunk)
                writes.append((off, chunk))
            became(name, Overwritten(base, tuple(writes)))
            if rng.random() < 0.5:
                fs.fsync(node.ino)
                fsynced()
            continue
        if rng.random() < 0.15:
            fs.unlink(ROOT_INO, name)
            became(name, None)
            if rng.random() < 0.5:
                fs.fsync()
                fsynced()
            continue
        data = rng.randbytes(rng.choice([0, 10, 4096, 9000, 70000]))
        fs.truncate(node.ino, 0)
        became(name, b"")
        fs.write(node.ino, 0, data)
        became(name, data)
        if rng.random() < 0.6:
            fs.fsync(node.ino)
            fsynced()
    time.sleep(rng.choice([0, 0.001, 0.01]))
    dev.crash(keep=rng.random(), tear=True, sector=rng.choice([512, 4096]))
    fs.crash()
    fs2 = FileSystem.open(inner, buffer_pages=64)
    try:
        rep = fsck(fs2)
        assert not rep.problems, f"seed {seed}: fsck after power loss: {rep.problems}; {dev.stats}"
        for name, state in current.items():
            got = _contents(fs2, name)
            allowed = since.get(name, [state])
            assert any(_admits(s, got) for s in allowed), (
                f"seed {seed}: {name!r} holds {'nothing' if got is None else f'{len(got)} bytes'} after power "
                f"loss, none of the states it {'passed through since' if name in since else 'had at'} the "
                f"last fsync ({', '.join(_describe(s) for s in allowed)}); {dev.stats}")
            durable[name] = got
    finally:
        fs2.close()


@pytest.mark.timeout(900)
def test_power_loss_under_filesystem(tmp_path):
    inner = ImageFileDevice(str(tmp_path / "pl.img"), 128 << 20, create=True)
    FileSystem.mkfs(inner, log_size=16 << 20)
    durable: dict[bytes, bytes | None] = {f"p{i}".encode(): None for i in range(30)}
    for seed in range(25 * SOAK):
        _powerloss_round(inner, seed, durable)


@pytest.mark.timeout(300)
def test_crash_after_mkfs_over_an_old_filesystem(tmp_path):
    """``trax mkfs --force`` over a used filesystem, files written and fsynced, then a crash
    before any page was written back: the new files are there, none of the old ones, and fsck
    is clean. (The old filesystem's pages carry higher LSNs than the new log's: before the
    engine's page seed, redo skipped the new records and the old directory came back.)"""
    path = str(tmp_path / "fs.img")
    dev = ImageFileDevice(path, 64 << 20, create=True)
    FileSystem.mkfs(dev, log_size=8 << 20)
    fs = FileSystem.open(dev)
    for i in range(300):
        node = fs.create(ROOT_INO, b"old%03d" % i, 0o100644, 0, 0)
        fs.write(node.ino, 0, b"old" * 100)
    fs.close()
    FileSystem.mkfs(dev, log_size=8 << 20)
    fs = FileSystem.open(dev)
    for i in range(100):  # new tree pages, at page numbers the old trees used
        node = fs.create(ROOT_INO, b"new%d" % i, 0o100644, 0, 0)
        fs.write(node.ino, 0, b"new %d" % i)
    fs.fsync()
    fs.crash()
    fs = FileSystem.open(dev)
    try:
        assert [_contents(fs, b"new%d" % i) for i in range(100)] == [b"new %d" % i for i in range(100)]
        assert _contents(fs, b"old000") is None and _contents(fs, b"old299") is None
        rep = fsck(fs)
        assert not rep.problems, rep.problems
    finally:
        fs.close()
        dev.close()

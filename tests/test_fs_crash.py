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
  filesystem reopens on what survived, every fsynced byte must be there and fsck clean
  (checksums included), and bytes overwritten in place since the last fsync each hold a value
  written there — never an I/O error, never bytes from elsewhere.

Both workloads overwrite checksummed pages in place (whole and partial pages, in random order)
and append in odd chunks: the checksum protocol for in-place overwrites (``fs/datasums.py``)
must leave no false checksum error after any crash.

``TRAX_SOAK=N`` multiplies the iterations.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fs_workload import content
from fsmount import traxfs_mount

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


def _powerloss_round(inner: ImageFileDevice, seed: int, expect: dict[bytes, bytes]) -> None:
    rng = random.Random(seed)
    dev = PowerLossDevice(inner, seed=seed)
    fs = FileSystem.open(dev, buffer_pages=64)
    for name, data in expect.items():
        node = fs.lookup(ROOT_INO, name)
        got = fs.read(node.ino, 0, node.size + 1)
        assert got == data, f"seed {seed}: {name!r} lost fsynced bytes ({len(got)} vs {len(data)}); {dev.stats}"
    for _ in range(rng.randint(3, 25)):
        name = f"p{rng.randrange(30)}".encode()
        data = rng.randbytes(rng.choice([0, 10, 4096, 9000, 70000]))
        try:
            node = fs.lookup(ROOT_INO, name)
        except Exception:  # noqa: BLE001
            node = fs.create(ROOT_INO, name, 0o644, 0, 0)
        op = rng.random()
        expect.pop(b"~" + name, None)  # a second change this round: whatever survives is adopted
        if rng.random() < 0.35 and expect.get(name):  # fsynced bytes overwritten in place (checksummed pages)
            base, writes = expect[name], []
            for _ in range(rng.randint(1, 6)):
                off = rng.randrange(len(base))
                if rng.random() < 0.5:
                    off -= off % 4096
                chunk = rng.randbytes(min(rng.choice([1, 100, 4096, 5000, 12288]), len(base) - off))
                fs.write(node.ino, off, chunk)
                writes.append((off, chunk))
            if rng.random() < 0.5:
                fs.fsync(node.ino)
                expect[name] = _apply(base, writes)
            else:
                del expect[name]
                expect[b"~" + name] = (base, writes)
            continue
        if op < 0.15:
            fs.unlink(ROOT_INO, name)
            durable = rng.random() < 0.5
            if durable:
                fs.fsync()
                expect.pop(name, None)
            else:
                expect.pop(name, None)  # uncertain: re-learnt below after the crash
                expect[b"?" + name] = b""
            continue
        fs.truncate(node.ino, 0)
        fs.write(node.ino, 0, data)
        if rng.random() < 0.6:
            fs.fsync(node.ino)
            expect[name] = data
        else:
            expect.pop(name, None)
            expect[b"?" + name] = data
    dev.crash(keep=rng.random(), tear=True, sector=rng.choice([512, 4096]))
    fs.crash()
    # after the crash: uncertain names are whatever survived, as long as it is whole
    fs2 = FileSystem.open(inner, buffer_pages=64)
    try:
        rep = fsck(fs2)
        assert not rep.problems, f"seed {seed}: fsck after power loss: {rep.problems}; {dev.stats}"
        for key in [k for k in expect if k.startswith(b"~")]:  # each byte: fsynced or written since
            base, writes = expect.pop(key)
            node = fs2.lookup(ROOT_INO, key[1:])
            got = fs2.read(node.ino, 0, node.size + 1)
            allowed = [{b} for b in base]
            for off, chunk in writes:
                for i, b in enumerate(chunk):
                    allowed[off + i].add(b)
            assert len(got) == len(base) and all(g in a for g, a in zip(got, allowed, strict=True)), \
                f"seed {seed}: {key[1:]!r} overwritten in place holds bytes never written there; {dev.stats}"
            expect[key[1:]] = got
        for key in [k for k in expect if k.startswith(b"?")]:
            name = key[1:]
            del expect[key]
            try:
                node = fs2.lookup(ROOT_INO, name)
            except Exception:  # noqa: BLE001
                continue
            expect[name] = fs2.read(node.ino, 0, node.size)
    finally:
        fs2.close()


def _apply(base: bytes, writes: list[tuple[int, bytes]]) -> bytes:
    out = bytearray(base)
    for off, chunk in writes:
        out[off : off + len(chunk)] = chunk
    return bytes(out)


@pytest.mark.timeout(900)
def test_power_loss_under_filesystem(tmp_path):
    inner = ImageFileDevice(str(tmp_path / "pl.img"), 128 << 20, create=True)
    FileSystem.mkfs(inner, log_size=16 << 20)
    expect: dict[bytes, bytes] = {}
    for seed in range(25 * SOAK):
        _powerloss_round(inner, seed, expect)

"""An asynchronous direct write leaves no stale page cached (found by CI: a buffered read racing
fio's io_uring writes kept old bytes).

For an ``O_DIRECT`` write on a FUSE file the kernel drops the cached pages of its range before
it sends the WRITE, and drops them again after it only when the write finished synchronously; an
asynchronous one (libaio, io_uring) completes without that second drop. A buffered read of the
range that comes between the first drop and the write's arrival is answered with the old bytes —
rightly, then — and caches them; nothing dropped them afterwards, so every later buffered read
(any descriptor, any process, until the page is evicted) saw the old bytes. The server now drops
the range itself once the write is done and before it answers (``fuse_lowlevel``).

The race is made certain here: the filesystem's write is held at a gate (the mount is served
from a thread of this process) while a buffered read of the page comes and goes."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading

import pytest
from fsmount import served_image

from traxfs.fs.filedata import FileData

BLOCK = 4096
MiB = 1 << 20
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def served(tmp_path):
    with served_image(tmp_path / "direct.img", "traxfs-direct-", "traxfs:direct") as mp:
        yield mp


class HeldWrites:
    """The filesystem's writes of ``marker`` pages held at a gate (before any lock is taken)."""

    def __init__(self, monkeypatch, marker: bytes):
        self.arrived, self.release = threading.Event(), threading.Event()
        real = FileData.write

        def held(files, ino, off, data):
            if data[:BLOCK] == marker * BLOCK:
                self.arrived.set()
                assert self.release.wait(60), "the held write was never released"
            return real(files, ino, off, data)

        monkeypatch.setattr(FileData, "write", held)


@pytest.mark.parametrize("engine", ["libaio", "io_uring"])
def test_a_page_read_while_an_asynchronous_direct_write_is_in_flight_is_dropped_after_it(
        served, monkeypatch, engine):
    if shutil.which("fio") is None:
        pytest.skip("fio is not installed")
    f = served / "f"
    f.write_bytes(b"A" * MiB)
    reader = os.open(f, os.O_RDONLY)
    gate = HeldWrites(monkeypatch, b"B")
    fio = None
    try:
        assert os.pread(reader, MiB, 0) == b"A" * MiB  # cached
        # one 4 KiB direct write at 4 KiB, submitted asynchronously (fio leaves the cache alone)
        fio = subprocess.Popen(["fio", "--name=one", f"--filename={f}", f"--ioengine={engine}", "--direct=1",
                                "--rw=write", "--bs=4k", "--offset=4k", "--size=4k", "--iodepth=1",
                                "--invalidate=0", "--buffer_pattern=0x42", "--output-format=terse"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if not gate.arrived.wait(30):
            out, err = fio.communicate(timeout=30)
            if engine == "io_uring" and "io_uring" in out + err:
                pytest.skip(f"io_uring unavailable here: {err.strip()[-200:]}")
            pytest.fail(f"fio's write never reached the filesystem: {err.strip()[-300:]}")
        # the kernel dropped the page before sending the write: read again, and cached again,
        # with what the file holds until the write is done
        assert os.pread(reader, BLOCK, BLOCK) == b"A" * BLOCK
        gate.release.set()
        out, err = fio.communicate(timeout=60)
        assert fio.returncode == 0, err
        assert os.pread(reader, 3 * BLOCK, 0) == b"A" * BLOCK + b"B" * BLOCK + b"A" * BLOCK
        with open(f, "rb") as again:  # another open, the kernel's cache kept across opens
            assert again.read(2 * BLOCK)[BLOCK:] == b"B" * BLOCK
    finally:
        gate.release.set()
        if fio is not None and fio.poll() is None:
            fio.kill()
            fio.wait()
        os.close(reader)


"""A real traxfs mount for tests: mkfs on an image file, `trax mount --foreground` in a child
process, and a teardown that always unmounts, waits for the clean close, and runs fsck.

The mount point sits in a fresh folder under /tmp (mode 0755) and the mount uses
``allow_other``, so tests may act as other users. ``Mount.kill()`` SIGKILLs the server (crash
tests); ``Mount.restart()`` mounts the same image again (recovery runs first).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

MiB = 1 << 20


def trax(*args: str, home: Path, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traxfs.tools.cli", "--home", str(home), *args],
                          capture_output=True, text=True, errors="surrogateescape", check=check, timeout=timeout)


def is_mounted(mp: Path) -> bool:
    """From the mount table: ``os.path.ismount`` says False for a FUSE mount whose server died
    (stat fails with ENOTCONN), which would leave it behind."""
    target = os.fsencode(os.path.realpath(mp))
    with open("/proc/self/mounts", "rb") as f:  # bytes: another mount's path may not be UTF-8
        return any(_unescape(line.split()[1]) == target for line in f)


def _unescape(field: bytes) -> bytes:
    """A mount table field as the path it is: the kernel writes space, tab, newline and
    backslash as three-digit octal escapes."""
    return re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), field)


def _unmount(mp: Path) -> None:
    if is_mounted(mp):
        subprocess.run(["fusermount3", "-u", str(mp)], capture_output=True)
    if is_mounted(mp):  # busy or a dead server: detach lazily so the test run never hangs
        subprocess.run(["fusermount3", "-uz", str(mp)], capture_output=True)


class Mount:
    def __init__(self, image: Path, home: Path, mp: Path, log: Path, args: tuple[str, ...]):
        self.image, self.home, self.mp, self.log, self.args = image, home, mp, log, args
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> None:
        pidfile = self.home / "test.pid"
        pidfile.unlink(missing_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "traxfs.tools.cli", "--home", str(self.home), "mount", "--foreground",
                 "--allow-other", "--pidfile", str(pidfile), *self.args, str(self.image), str(self.mp)],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not (pidfile.exists() and os.path.ismount(self.mp)):
            if self.proc.poll() is not None:
                raise RuntimeError(f"mount failed (rc {self.proc.returncode}): {self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"mount not live after {timeout} s: {self.log_tail()}")
            time.sleep(0.02)

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the server (as a crash would), then drop the dead mount."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        _unmount(self.mp)
        self.proc = None

    def stop(self, timeout: float = 120) -> None:
        """Clean unmount: the server closes the filesystem and exits 0."""
        if self.proc is None:
            return
        _unmount(self.mp)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"server did not exit after unmount: {self.log_tail()}") from None
        self.proc = None
        if rc != 0:
            raise RuntimeError(f"server exited with {rc}: {self.log_tail()}")

    def restart(self) -> None:
        self.kill() if self.proc is not None and self.proc.poll() is not None else None
        self.start()

    def fsck(self, repair: bool = False) -> subprocess.CompletedProcess:
        return trax("fsck", str(self.image), *(["--repair"] if repair else []), home=self.home, check=False)


@contextmanager
def traxfs_mount(tmp_path: Path, size: int = 512 * MiB, args: tuple[str, ...] = (), fsck: bool = True):
    """Yield a started :class:`Mount`; on the way out unmount, and (``fsck``) check the image."""
    top = Path(tempfile.mkdtemp(prefix="traxfs-mnt-", dir="/tmp"))
    os.chmod(top, 0o755)
    mp = top / "mnt"
    mp.mkdir()
    home = tmp_path / "trax-home"
    image = tmp_path / "fs.img"
    trax("mkfs", str(image), "--size", str(size), home=home)
    m = Mount(image, home, mp, tmp_path / "mount.log", args)
    try:
        m.start()
        yield m
        m.stop()
        if fsck:
            r = m.fsck()
            if r.returncode != 0:
                raise AssertionError(f"fsck after unmount: rc {r.returncode}\n{r.stdout}\n{r.stderr}")
    finally:
        m.kill()
        shutil.rmtree(top, ignore_errors=True)


@contextmanager
def served_in_thread(dev, prefix: str, source: str):
    """The mountpoint of the filesystem on ``dev`` served from a thread of this process (as
    ``trax mount`` serves it), so that a test can change the filesystem's code under the mount;
    unmounted at the end, and the serving thread must have finished."""
    from traxfs.fs.fuse.mount import serve

    mp = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    ready = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            serve(dev, str(mp), source=source, ready=ready.set)
        except BaseException as e:  # noqa: BLE001  (reported here)
            failure.append(e)
            ready.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        assert ready.wait(60) and not failure, f"mount failed: {failure}"
        yield mp
    finally:
        subprocess.run(["fusermount3", "-u", str(mp)], capture_output=True)
        t.join(60)
        if os.path.ismount(mp):
            subprocess.run(["fusermount3", "-uz", str(mp)], capture_output=True)
        shutil.rmtree(mp, ignore_errors=True)
    assert not t.is_alive(), "server thread did not finish after unmount"


@contextmanager
def served_image(path, prefix: str, source: str, size: int = 256 << 20):
    """A new filesystem on the image file ``path`` served from a thread of this process (see
    :func:`served_in_thread`): its mountpoint."""
    from traxfs.fs.filesystem import FileSystem
    from traxfs.volume.device import ImageFileDevice

    dev = ImageFileDevice(str(path), size, create=True)
    FileSystem.mkfs(dev)
    try:
        with served_in_thread(dev, prefix, source) as mp:
            yield mp
    finally:
        dev.close()

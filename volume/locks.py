"""Locks that keep traxfs commands from writing under each other, and under a live mount.

All are BSD ``flock`` locks: the kernel drops them when the holder exits, however it exits, so
a crashed command never leaves a stale lock behind. Two places hold them:

* **the device file itself** (an image file or a block-device node): exclusive for whoever
  writes the whole device — ``mkfs`` and ``mount``/``fsck`` of a device path, ``pv create``,
  ``pv remove``, labelling in ``vg create``/``extend``/``replace``, ``pv extract`` — and shared
  by every process that has a volume group on the device open (a mounted or exposed logical
  volume holds its group's devices for as long). This is the convention of systemd's block
  device locking (udev probes under ``LOCK_SH``, partitioning and formatting tools write under
  ``LOCK_EX``), so the same lock also keeps udev from probing a device while it is rewritten.
  An exclusive holder of a block device also opens it ``O_EXCL``: the kernel refuses that
  while the device is mounted or claimed by a driver (device-mapper, md, another exclusive
  opener), which no flock can see;
* **named files under** ``$TRAX_HOME/locks`` (:meth:`traxfs.volume.registry.Registry.lock`): a
  group's metadata, its use, each logical volume, a group name.

A lock that is taken is refused — at once, or after a bounded wait for locks that are only ever
held briefly — with a message naming the holder: its pid and command, from ``/proc/locks``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from pathlib import Path

from .errors import DeviceError, InUseError

WRITE_HINT = "; a device in use is never written, even with --force"
UDEV_WAIT = 1.0  # udev holds LOCK_SH on a block device for a moment after every write
_POLL = 0.02


class HeldLock:
    """One flock held on its own descriptor until :meth:`release` (or the end of a ``with``)."""

    def __init__(self, fd: int, path: str):
        self.fd, self.path = fd, path

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> HeldLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def take(path: str | os.PathLike, *, exclusive: bool, what: str, wait: float = 0.0, create: bool = False,
         block_excl: bool = False, hint: str = "") -> HeldLock:
    """Lock ``path`` (shared or exclusive), trying for up to ``wait`` seconds; raise
    :class:`InUseError` naming ``what`` and the holder(s) if it stays taken.

    ``create`` makes a missing lock file; ``block_excl`` also opens a block device ``O_EXCL``
    (exclusive holders of whole devices); ``hint`` is appended to the refusal."""
    path = os.fspath(path)
    flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    is_block = not create and _is_block(path)
    if block_excl and is_block:
        flags |= os.O_EXCL
    deadline = time.monotonic() + max(wait, UDEV_WAIT if is_block else 0.0)
    while True:
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise DeviceError(f"{path}: cannot open: {e.strerror}") from None
            if time.monotonic() >= deadline:
                raise InUseError(f"{what}: in use by the kernel ({_kernel_holder(path)}){hint}") from None
            time.sleep(_POLL)
            continue
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
            return HeldLock(fd, path)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                who = holders(fd)
                os.close(fd)
                raise InUseError(f"{what}: in use by {who}{hint}") from None
            os.close(fd)
            time.sleep(_POLL)


def device_lock(path: str, *, exclusive: bool, hint: str = "") -> HeldLock:
    """The lock on a device file (see the module docstring); ``what`` is the path itself."""
    return take(path, exclusive=exclusive, what=path, block_excl=exclusive, hint=hint)


def _is_block(path: str) -> bool:
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


def holders(fd: int) -> str:
    """Who holds a flock on the file open as ``fd``: "pid N (command)", from /proc/locks."""
    st = os.fstat(fd)
    ident = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    pids: list[int] = []
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK":  # "->" marks a waiter, not a holder
            continue
        try:
            major, minor, ino = parts[5].split(":")
            key = (int(major, 16), int(minor, 16), int(ino))
            pid = int(parts[4])
        except ValueError:
            continue
        if key == ident and pid > 0 and pid not in pids:
            pids.append(pid)
    if not pids:
        return "another process"
    return ", ".join(f"pid {p} ({command_of(p)})" for p in pids)


_VALUE_OPTIONS = {"--home", "--pidfile", "--log", "--commit-interval", "--timeout"}


def command_of(pid: int) -> str:
    """A short form of ``pid``'s command line: ``trax mount vg0/lv /mnt`` for a trax process
    (its bookkeeping options left out), the program and arguments otherwise."""
    if pid == os.getpid():
        return "this process"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "exited"
    argv = [a for a in argv if a]
    if "traxfs.tools.cli" in argv:
        argv = ["trax", *argv[argv.index("traxfs.tools.cli") + 1 :]]
    elif argv and os.path.basename(argv[0]) != "trax" and len(argv) > 1 and os.path.basename(argv[1]) == "trax":
        argv = argv[1:]  # "python .../bin/trax ..."
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a in _VALUE_OPTIONS:
            skip = True
        elif a != "--foreground" and not any(a.startswith(o + "=") for o in _VALUE_OPTIONS):
            out.append(os.path.basename(a) if not out else a)
    text = " ".join(" ".join(out).split()) or "unknown"  # one line, whatever the arguments held
    return text if len(text) <= 300 else text[:297] + "..."


def _kernel_holder(path: str) -> str:
    """What the kernel says holds a block device: its mount point, or its holder devices."""
    rdev = os.stat(path).st_rdev
    ident = f"{os.major(rdev)}:{os.minor(rdev)}"
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            if len(fields) > 4 and fields[2] == ident:
                return f"mounted on {fields[4]}"
    except OSError:
        pass
    try:
        users = sorted(os.listdir(f"/sys/dev/block/{ident}/holders"))
    except OSError:
        users = []
    if users:
        return "held by " + ", ".join(users)
    return "mounted, or opened exclusively by a driver or another program"

"""Mount points as the kernel sees them, for `trax mount`, `trax umount` and `trax lv expose`.

* The mount table (``/proc/self/mountinfo``) is the truth about what is mounted where:
  ``os.path.ismount`` says False for a FUSE mount whose server died (its ``stat`` fails with
  ENOTCONN), although the dead mount is still attached and hides the directory beneath.
* Nothing here ``stat``s a mount point without a time limit: a server that is stopped or wedged
  would block the caller forever. :func:`probe` runs the ``stat`` in a helper thread.
* The server of a FUSE mount is found from the kernel, whatever state folder (``TRAX_HOME``)
  it was started with: since Linux 6.16 ``/proc/PID/fdinfo`` of a ``/dev/fuse`` descriptor
  names its connection, which is the minor device number of the mount. On older kernels
  :func:`fuse_servers` finds nothing and the caller falls back to its pidfile.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass

import psutil

from ..volume.errors import VolumeError

_OCTAL = re.compile(rb"\\([0-7]{3})")
DEAD_ERRNOS = (errno.ENOTCONN, errno.ECONNABORTED)


@dataclass(frozen=True)
class MountEntry:
    mountpoint: str  # as os.fsdecode gives it (surrogate escapes for undecodable bytes)
    fstype: str  # "fuse.traxfs" for trax mount and trax lv expose
    source: str
    minor: int  # for a FUSE mount, its connection number (/sys/fs/fuse/connections/MINOR)

    @property
    def is_traxfs(self) -> bool:
        return self.fstype == "fuse.traxfs"


def shown(path: str) -> str:
    """A path for a message: undecodable bytes as ``\\xNN`` instead of an encoding error."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def absolute(path: str) -> str:
    """``path`` made absolute with symbolic links resolved in its parent only: resolving the
    last component would ``stat`` the mount point itself, which hangs on a stopped server."""
    path = os.path.normpath(os.path.abspath(path))
    head, tail = os.path.split(path)
    return os.path.join(os.path.realpath(head), tail) if tail else path


def _unescape(field: bytes) -> str:
    return os.fsdecode(_OCTAL.sub(lambda m: bytes([int(m.group(1), 8)]), field))


def find_mount(path: str) -> MountEntry | None:
    """The mount on top at ``path`` (mounts can be stacked), or None."""
    target = absolute(path)
    found = None
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            fields = line.split()
            sep = fields.index(b"-")
            if _unescape(fields[4]) == target:
                minor = int(fields[2].split(b":")[1])
                found = MountEntry(target, os.fsdecode(fields[sep + 1]), _unescape(fields[sep + 2]), minor)
    return found


def probe(path: str, timeout: float = 5.0) -> str:
    """``"live"``, ``"dead"`` (the server is gone: ENOTCONN) or ``"hung"`` (no answer within
    ``timeout`` seconds: a stopped or wedged server) for the mount at ``path``."""
    result: list[BaseException | None] = []

    def look() -> None:
        try:
            os.stat(path)
            result.append(None)
        except OSError as e:
            result.append(e)

    t = threading.Thread(target=look, name="mount-probe", daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        return "hung"
    e = result[0]
    return "dead" if isinstance(e, OSError) and e.errno in DEAD_ERRNOS else "live"


def fuse_servers(entry: MountEntry) -> set[int]:
    """PIDs of the processes holding the FUSE connection of ``entry`` open (its server): the
    kernel names each ``/dev/fuse`` descriptor's connection in its fdinfo; empty if none, or if
    the kernel does not name connections there."""
    want = f"fuse_connection:\t{entry.minor}\n"
    pids = set()
    for pid in psutil.pids():
        for fd in fuse_descriptors(pid):
            try:
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    if want in f.read():
                        pids.add(pid)
                        break
            except OSError:  # the process or descriptor went away meanwhile
                continue
    return pids


def fuse_descriptors(pid: int) -> list[str]:
    """The descriptors by which ``pid`` holds ``/dev/fuse`` open (psutil lists open regular
    files only, so these are read from ``/proc``); none if the process is gone or not ours to
    look at."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return []
    out = []
    for fd in fds:
        try:
            if os.readlink(f"{fd_dir}/{fd}") == "/dev/fuse":
                out.append(fd)
        except OSError:  # closed meanwhile
            continue
    return out


def check_mountpoint(path: str) -> None:
    """Refuse a mount point that cannot take a new mount, saying what to do about it."""
    entry = find_mount(path)
    if entry is not None:
        if probe(path) == "dead":
            what = "traxfs" if entry.is_traxfs else entry.fstype
            fix = f"trax umount {shown(path)}" if entry.is_traxfs else f"fusermount3 -u {shown(path)}"
            raise VolumeError(f"{shown(path)}: a dead {what} mount is still attached (its server died); "
                              f"run '{fix}' first")
        raise VolumeError(f"{shown(path)}: something is already mounted there ({entry.fstype} {shown(entry.source)})")
    if not os.path.exists(path):
        raise VolumeError(f"{shown(path)}: mount point does not exist")
    if not os.path.isdir(path):
        raise VolumeError(f"{shown(path)}: mount point is not a directory")


def fusermount(path: str, *, lazy: bool = False) -> subprocess.CompletedProcess:
    """``fusermount3 -u`` (``-uz`` with ``lazy``: detach now, finish when no longer busy)."""
    tool = shutil.which("fusermount3") or "fusermount3"
    return subprocess.run([tool, "-uz" if lazy else "-u", path], capture_output=True, text=True,
                          errors="backslashreplace")

"""Where traxfs looks for devices, and the per-group locks.

Like LVM2's devices file (``/etc/lvm/devices/system.devices``), traxfs scans only the devices
listed in ``$TRAX_HOME/devices`` — one path per line — instead of probing every block device on
the machine. ``trax pv create`` adds a path; ``trax pv remove`` drops it. ``TRAX_HOME`` defaults
to ``/var/lib/traxfs`` for root and ``~/.local/share/traxfs`` otherwise.

A group is changed under an exclusive ``flock`` on ``$TRAX_HOME/locks/<vg uuid>``; a process
that has a logical volume open for I/O (e.g. ``trax lv expose``) holds it for as long, so no
other command rewrites the group's metadata under it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from traxfs.volume.errors import VolumeError


def default_home() -> Path:
    env = os.environ.get("TRAX_HOME")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/traxfs")
    return Path.home() / ".local" / "share" / "traxfs"


class Registry:
    def __init__(self, home: str | os.PathLike | None = None):
        self.home = Path(home) if home is not None else default_home()
        self.devices_file = self.home / "devices"

    def paths(self) -> list[str]:
        if not self.devices_file.exists():
            return []
        lines = self.devices_file.read_text().splitlines()
        return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]

    def _save(self, paths: list[str]) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        tmp = self.devices_file.with_suffix(".tmp")
        tmp.write_text("".join(p + "\n" for p in paths))
        os.replace(tmp, self.devices_file)

    def add(self, path: str) -> str:
        real = os.path.realpath(path)
        paths = self.paths()
        if real not in paths:
            self._save(paths + [real])
        return real

    def remove(self, path: str) -> None:
        real = os.path.realpath(path)
        self._save([p for p in self.paths() if p != real])

    @contextlib.contextmanager
    def lock(self, key: str, what: str) -> Iterator[None]:
        """Hold the exclusive lock ``key``; refuse at once (naming ``what``) if it is taken."""
        d = self.home / "locks"
        d.mkdir(parents=True, exist_ok=True)
        fd = os.open(d / key, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
                raise VolumeError(f"{what} is in use (locked by pid {holder})") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            os.close(fd)

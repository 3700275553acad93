"""Where traxfs looks for devices, and the named locks.

Like LVM2's devices file (``/etc/lvm/devices/system.devices``), traxfs scans only the devices
listed in ``$TRAX_HOME/devices`` — one path per line — instead of probing every block device on
the machine. ``trax pv create`` adds a path; ``trax pv remove`` drops it. ``TRAX_HOME`` defaults
to ``/var/lib/traxfs`` for root and ``~/.local/share/traxfs`` otherwise.

Named locks are ``flock`` files in ``$TRAX_HOME/locks`` (see :mod:`traxfs.volume.locks` for
the whole scheme, and :class:`traxfs.volume.group.VolumeGroup` for which lock guards what).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from .locks import HeldLock, take

LIST_WAIT = 10.0  # the devices file is locked only while a line is added or removed


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
        with self.lock("devices", f"{self.devices_file}", wait=LIST_WAIT):  # two commands may add at once
            paths = self.paths()
            if real not in paths:
                self._save(paths + [real])
        return real

    def remove(self, path: str) -> None:
        real = os.path.realpath(path)
        with self.lock("devices", f"{self.devices_file}", wait=LIST_WAIT):
            self._save([p for p in self.paths() if p != real])

    def take_lock(self, key: str, what: str, *, shared: bool = False, wait: float = 0.0) -> HeldLock:
        """Take the named lock ``key``; refuse (naming ``what`` and the holder) if it is still
        taken after ``wait`` seconds."""
        d = self.home / "locks"
        d.mkdir(parents=True, exist_ok=True)
        return take(d / key, exclusive=not shared, what=what, wait=wait, create=True)

    @contextlib.contextmanager
    def lock(self, key: str, what: str, *, shared: bool = False, wait: float = 0.0) -> Iterator[None]:
        """:meth:`take_lock` for the duration of a ``with`` block."""
        held = self.take_lock(key, what, shared=shared, wait=wait)
        try:
            yield
        finally:
            held.release()

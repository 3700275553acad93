"""Serving a filesystem through FUSE: open, mount, run the trio loop, unmount, close.

The mount ends cleanly on ``umount``/``fusermount3 -u`` (the kernel ends the session) or, when
:func:`serve` runs in the main thread, on SIGTERM or SIGINT (we unmount ourselves). On every way
out the mount is removed and the filesystem is closed cleanly (data flushed, engine
checkpointed), so the next mount needs no recovery. A process that is killed (SIGKILL) leaves
the engine to recover at the next mount: everything whose commit was durable is there.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable

import pyfuse3
import trio

from ...ext import fuse_lowlevel
from ...volume.overlay import OverlayDevice
from ..errors import FsError
from ..filesystem import FileSystem
from .loop import serve_loop
from .operations import LOWLEVEL_OPS, TraxOperations
from .options import mount_options

log = logging.getLogger("traxfs.fs")

MIN_TASKS, MAX_TASKS = 8, 64
READ_AHEAD_KB = 1024  # one full-size FUSE read (max_pages 256) per readahead window
MALLOC_ARENAS = 1  # fuse_lowlevel.limit_malloc_arenas; MALLOC_ARENA_MAX in the environment wins
_one_session = threading.Lock()
NEEDED = frozenset(LOWLEVEL_OPS)  # the slots fuse_lowlevel must fill


def serve(dev, mountpoint: str, *, source: str = "traxfs", where: str = "", allow_other: bool = False,
          commit_interval: float = 1.0, volume_info: Callable[[], dict] | None = None,
          ready: Callable[[], None] | None = None, read_only: bool = False,
          flags: frozenset[str] = frozenset()) -> None:
    """Mount the filesystem on ``dev`` at ``mountpoint`` and serve until unmounted.
    ``source`` is what the mount table shows; ``where`` names the filesystem in messages
    (default: ``source``): what the user named, e.g. in "run fsck on it". ``ready()`` runs
    once the mount is live; ``volume_info()`` is what ``/.trax/volume.json`` shows. One mount
    per process (pyfuse3's rule).

    ``read_only``: the kernel mount is ``ro`` (every change refused with EROFS before it gets
    here) and the engine runs on an :class:`OverlayDevice` over ``dev``: what it writes itself
    (recovery of an unclean stop, the log, the checkpoint at unmount) stays in memory, so not
    one byte reaches the device. ``flags``: more kernel mount flags (``options.KERNEL_FLAGS``)."""
    if not _one_session.acquire(blocking=False):
        raise RuntimeError("this process already serves a mount (pyfuse3 allows one session)")
    try:
        if "MALLOC_ARENA_MAX" not in os.environ:  # before the filesystem's and the readers' threads
            fuse_lowlevel.limit_malloc_arenas(MALLOC_ARENAS)
        if read_only:
            dev, flags = OverlayDevice(dev), frozenset(flags) | {"ro"}
        fs = FileSystem.open(dev, commit_interval=commit_interval, where=where or source)
        try:
            if volume_info is not None:
                fs.status_files.volume_info = volume_info
            ops = TraxOperations(fs)
            options = mount_options(source, "traxfs", allow_other=allow_other, flags=frozenset(flags))
            made = fuse_lowlevel.sessions()
            try:
                ops.install_lowlevel()
            except RuntimeError as e:
                raise FsError(errno.ENOSYS, f"mount of {source} refused: {e}") from None
            try:
                pyfuse3.init(ops, mountpoint, options)
                try:
                    missing = NEEDED - fuse_lowlevel.installed()
                    if fuse_lowlevel.sessions() == made or missing:
                        raise FsError(errno.ENOSYS, f"mount of {source} refused: pyfuse3 made its FUSE session "
                                      "without traxfs.ext.fuse_lowlevel's handlers "
                                      f"({', '.join(sorted(missing))}): SEEK_DATA/SEEK_HOLE, fallocate and "
                                      "chattr would be wrong (is libfuse3 in LD_PRELOAD?)")
                    if not fuse_lowlevel.reader()["running"]:
                        raise FsError(errno.EAGAIN, f"mount of {source} refused: the FUSE reader threads did "
                                      "not start (the daemon's standard error says why)")
                    on_signals = threading.current_thread() is threading.main_thread()
                    def live() -> None:
                        widen_readahead(mountpoint)
                        if ready is not None:
                            ready()

                    trio.run(serve_loop, os.path.join(mountpoint, ".trax"), live, on_signals, MIN_TASKS,
                             MAX_TASKS)
                finally:
                    pyfuse3.close(unmount=True)
            finally:
                fuse_lowlevel.install()  # a later session of this process gets no handler of this one
        finally:
            fs.close()
    finally:
        _one_session.release()


def widen_readahead(mountpoint: str, kb: int = READ_AHEAD_KB) -> bool:
    """Let the kernel read ahead ``kb`` KiB on the mount instead of the 128 KiB it offers at
    FUSE's INIT (libfuse can only lower that): a sequential reader's pages then come in 1 MiB
    requests (``max_pages`` 256) rather than 128 KiB ones, an eighth of the round trips through
    the server. A setting of the mount's backing device (``/sys/class/bdi/MAJ:MIN``), which only
    root may change: for anyone else nothing changes. True if set."""
    dev = os.stat(mountpoint).st_dev
    knob = f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb"
    try:
        with open(knob, "w") as f:
            f.write(f"{kb}\n")
        return True
    except OSError as e:
        log.debug("read-ahead of %s left as is: %s", mountpoint, e)
        return False

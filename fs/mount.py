"""Serving a filesystem through FUSE: open, mount, run the trio loop, unmount, close.

The mount ends cleanly on ``umount``/``fusermount3 -u`` (the kernel ends the session), on
SIGTERM or SIGINT (we unmount ourselves), or when :func:`serve`'s ``stop`` event is set. On
every way out the mount is removed and the filesystem is closed cleanly (data flushed, engine
checkpointed), so the next mount needs no recovery. A process that is killed (SIGKILL) leaves
the engine to recover at the next mount: everything whose commit was durable is there.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

import pyfuse3
import trio

from traxfs.fs.filesystem import FileSystem
from traxfs.fs.fuse_loop import serve_loop
from traxfs.fs.fuse_ops import TraxOperations

log = logging.getLogger("traxfs.fs")

MIN_TASKS, MAX_TASKS = 8, 64
_one_session = threading.Lock()


def serve(dev, mountpoint: str, *, source: str = "traxfs", allow_other: bool = False,
          commit_interval: float = 1.0, volume_info: Callable[[], dict] | None = None,
          ready: Callable[[], None] | None = None, target: str | None = None) -> None:
    """Mount the filesystem on ``dev`` at ``mountpoint`` and serve until unmounted.
    ``ready()`` runs once the mount is live. One mount per process (pyfuse3's rule).
    ``target``: what the user named (messages about the device say it, e.g. "run fsck on it")."""
    if not _one_session.acquire(blocking=False):
        raise RuntimeError("this process already serves a mount (pyfuse3 allows one session)")
    try:
        fs = FileSystem.open(dev, commit_interval=commit_interval, where=target or source)
        try:
            ops = TraxOperations(fs, volume_info)
            options = set(pyfuse3.default_options) | {f"fsname={source}", "subtype=traxfs"}
            if allow_other:
                options.add("allow_other")
            pyfuse3.init(ops, mountpoint, options)
            try:
                on_signals = threading.current_thread() is threading.main_thread()
                trio.run(serve_loop, os.path.join(mountpoint, ".trax"), ready, on_signals, MIN_TASKS, MAX_TASKS)
            finally:
                pyfuse3.close(unmount=True)
        finally:
            fs.close()
    finally:
        _one_session.release()

"""Expose one open logical volume as a single regular file through FUSE.

The mount root is a read-only directory holding one file (``volume`` by default) whose size is
the volume's and whose bytes are the volume's bytes, so fio, dd and ``losetup`` can drive any
layout (linear, striped, traxtent, mirrored) without a kernel driver.

Caching: every open is answered with ``direct_io`` (FOPEN_DIRECT_IO), i.e. no FUSE page cache.

* The backing image files already sit in the host page cache; a second cached copy above the
  volume would double memory use and make fio measure the kernel cache, not the volume.
* Requests reach us at the caller's size (split only at the 1 MiB FUSE maximum), instead of
  being cut into page-cache readahead windows (128 KiB) or pages; Python's cost is per request,
  so fewer, larger requests is what makes throughput.
* ``O_DIRECT`` opens (``fio --direct=1``) work, and any other user of the volume (e.g.
  ``OpenLogicalVolume.read`` after unmount) sees every acknowledged write: nothing is held back.
* ``losetup`` works: the loop driver uses read_iter/write_iter, which direct_io serves. What does
  not work is ``mmap`` of the file (the kernel refuses shared mappings of direct_io files);
  no block-device client needs it.

The largest request is negotiated between the kernel and libfuse (``max_pages``): libfuse 3
offers 1 MiB (256 pages, the kernel's default ``fs.fuse.max_pages_limit``), so a 1 MiB read or
write is one FUSE request and larger ones are split into 1 MiB pieces that are sent together.
The ``max_read=`` mount option is not used: libfuse 3.14 rejects it unless the filesystem's init
callback sets the same value, which pyfuse3 does not let us do (and the kernel's default is
already unlimited, i.e. bounded by ``max_pages``).

Block I/O runs in trio worker threads (``trio.to_thread.run_sync``): the trio thread only
moves requests, so pyfuse3's worker tasks keep several requests in flight at once (fio
iodepth/numjobs), and the volume's own per-device pool serves them in parallel. A read fills a
buffer that belongs to the pyfuse3 task serving it (reused for that task's next read) and hands
that buffer itself to pyfuse3: no allocation, zeroing or extra copy per request.

Where the time goes (py-spy, 1 MiB requests, 2 cores): the server is bound by one core, i.e.
the GIL. pyfuse3 holds it while copying request data to and from the kernel, each thread hop
(trio -> worker -> the volume's device pool and back) costs tens of microseconds of it, and the
volume maps a striped request one stripe unit at a time in Python. Serving from a null handler
moves 4.4 GB/s; adding the one required thread hop, 1.9 GB/s; a striped volume, ~0.8 GB/s.
See BENCHMARKS.md.

The file behaves like a fixed-size block device: reads at or past the end are short (0 bytes at
EOF); a write that starts past the end fails with ENOSPC and one that crosses the end is
short, as on a block device; the size cannot be changed (``ftruncate`` gives EINVAL, ``O_TRUNC``
is ignored as a block device ignores it); nothing can be created, removed or renamed.

pyfuse3 keeps one session per process, so one process serves one volume at a time.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
import weakref
from collections.abc import Callable

import pyfuse3
import trio

from ..fs.fuse.loop import serve_loop
from ..fs.fuse.options import mount_options
from ..volume.errors import VolumeError
from ..volume.logical import OpenLogicalVolume

log = logging.getLogger(__name__)

MAX_REQUEST = 1024 * 1024  # the largest FUSE request libfuse 3 negotiates (256 pages)
FILE_INODE = pyfuse3.ROOT_INODE + 1
TIMEOUT = 3600.0  # entries and attributes never change while mounted: let the kernel keep them
# pyfuse3 runs one trio task per request in flight. With its default of keeping one idle task,
# every burst (fio's iodepth) spawns tasks that exit right after, about one spawn per three
# requests; keeping a pool alive avoids that and lets each task keep its read buffer.
MIN_TASKS, MAX_TASKS = 16, 64
_one_session = threading.Lock()  # pyfuse3 has process-global session state


class VolumeFile(pyfuse3.Operations):
    """The FUSE operations: a root directory with one fixed-size file backed by ``lv``."""

    def __init__(self, lv: OpenLogicalVolume, filename: str):
        super().__init__()
        if not filename or "/" in filename or filename in (".", ".."):
            raise ValueError(f"invalid file name {filename!r}")
        self.lv = lv
        self.name = filename.encode()
        self.uid, self.gid = os.getuid(), os.getgid()
        self.born = time.time_ns()
        self.mtime = self.born
        self._buffers: weakref.WeakKeyDictionary[trio.lowlevel.Task, bytearray] = weakref.WeakKeyDictionary()

    # ----- names and attributes -----------------------------------------------------------------
    def _attr(self, inode: int) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = inode
        a.entry_timeout = a.attr_timeout = TIMEOUT
        a.st_uid, a.st_gid = self.uid, self.gid
        a.st_atime_ns = a.st_ctime_ns = self.born
        if inode == pyfuse3.ROOT_INODE:
            a.st_mode, a.st_nlink, a.st_size, a.st_mtime_ns = stat.S_IFDIR | 0o755, 2, 0, self.born
        elif inode == FILE_INODE:
            a.st_mode, a.st_nlink, a.st_size = stat.S_IFREG | 0o600, 1, self.lv.size
            a.st_mtime_ns = self.mtime
            a.st_blocks = self.lv.size // 512
        else:
            raise pyfuse3.FUSEError(errno.ENOENT)
        a.st_blksize = MAX_REQUEST  # the I/O size hint: one request's worth
        return a

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext | None = None) -> pyfuse3.EntryAttributes:
        return self._attr(inode)

    async def lookup(self, parent_inode: int, name: bytes,
                     ctx: pyfuse3.RequestContext | None = None) -> pyfuse3.EntryAttributes:
        if parent_inode == pyfuse3.ROOT_INODE and name == self.name:
            return self._attr(FILE_INODE)
        if parent_inode == pyfuse3.ROOT_INODE and name in (b".", b".."):
            return self._attr(pyfuse3.ROOT_INODE)
        raise pyfuse3.FUSEError(errno.ENOENT)

    async def forget(self, inode_list: list[tuple[int, int]]) -> None:
        """Both inodes live as long as the mount: nothing to drop (and this must never raise)."""

    async def setattr(self, inode: int, attr: pyfuse3.EntryAttributes, fields: pyfuse3.SetattrFields,
                      fh: int | None, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        """Only timestamps may change; the size is the volume's (EINVAL, as ``ftruncate`` of a
        block device), owner and mode are fixed (EPERM)."""
        if fields.update_size and (inode != FILE_INODE or attr.st_size != self.lv.size):
            raise pyfuse3.FUSEError(errno.EINVAL)
        if fields.update_mode or fields.update_uid or fields.update_gid:
            raise pyfuse3.FUSEError(errno.EPERM)
        if fields.update_mtime and inode == FILE_INODE:
            self.mtime = attr.st_mtime_ns
        return self._attr(inode)

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        s = pyfuse3.StatvfsData()
        s.f_bsize, s.f_frsize = MAX_REQUEST, 512
        s.f_blocks, s.f_bfree, s.f_bavail = self.lv.size // 512, 0, 0
        s.f_files, s.f_ffree, s.f_favail, s.f_namemax = 2, 0, 0, 255
        return s

    # ----- the directory ------------------------------------------------------------------------
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        if inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return inode

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        if start_id == 0:
            pyfuse3.readdir_reply(token, self.name, self._attr(FILE_INODE), 1)

    async def releasedir(self, fh: int) -> None:
        pass

    # ----- the file -----------------------------------------------------------------------------
    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        if inode != FILE_INODE:
            raise pyfuse3.FUSEError(errno.EISDIR)
        return pyfuse3.FileInfo(fh=inode, direct_io=True, keep_cache=False)

    async def read(self, fh: int, off: int, size: int) -> memoryview | bytes:
        n = max(0, min(size, self.lv.size - off))
        if n == 0:
            return b""
        # pyfuse3 replies from the returned buffer before this task takes its next request, so
        # each worker task can reuse one buffer: no allocation, zeroing or page faults per read.
        task = trio.lowlevel.current_task()
        buf = self._buffers.get(task)
        if buf is None or len(buf) < n:
            buf = self._buffers[task] = bytearray(max(n, MAX_REQUEST))
        view = memoryview(buf)[:n]
        await self._io(self.lv.readinto, off, [view])
        return view

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        n = min(len(buf), self.lv.size - off)
        if n <= 0:
            if not buf:
                return 0
            raise pyfuse3.FUSEError(errno.ENOSPC)
        await self._io(self.lv.write, off, memoryview(buf)[:n])
        return n

    async def flush(self, fh: int) -> None:
        await self._io(self.lv.flush)

    async def fsync(self, fh: int, datasync: bool) -> None:
        await self._io(self.lv.flush)

    async def release(self, fh: int) -> None:
        pass

    async def _refuse(self, *args: object) -> None:
        raise pyfuse3.FUSEError(errno.EPERM)

    # the one file is the volume: nothing may be created, removed, renamed or linked
    create = mknod = mkdir = unlink = rmdir = rename = symlink = link = _refuse  # type: ignore[assignment]

    async def _io(self, fn: Callable[..., None], *args: object) -> None:
        """Run blocking volume I/O off the trio thread; a failure becomes EIO for the caller
        instead of an exception that would end the FUSE main loop."""
        try:
            await trio.to_thread.run_sync(fn, *args)
        except (VolumeError, OSError) as e:
            log.error("%s/%s: %s", self.lv.vg_name, self.lv.name, e)
            raise pyfuse3.FUSEError(errno.EIO) from None


def serve(lv: OpenLogicalVolume, mountpoint: str, filename: str = "volume", *, allow_other: bool = False,
          ready: Callable[[], None] | None = None) -> None:
    """Mount ``lv`` as ``mountpoint/filename`` and serve it until unmounted (``fusermount3 -u``)
    or, when called in the main thread, until SIGTERM or SIGINT. ``ready()`` is called once the
    mount is live (in a worker thread, so it may use the mount). On the way out the mount is
    always removed and the volume flushed. May run in any thread; one serve per process."""
    if not _one_session.acquire(blocking=False):
        raise RuntimeError("this process is already serving a volume (pyfuse3 allows one session)")
    try:
        ops = VolumeFile(lv, filename)
        # no max_read=: libfuse 3.14 rejects it unless init() sets the same (pyfuse3 cannot)
        options = mount_options(f"traxfs:{lv.vg_name}/{lv.name}", "traxfs", allow_other=allow_other)
        pyfuse3.init(ops, mountpoint, options)
        try:
            on_signals = threading.current_thread() is threading.main_thread()
            trio.run(serve_loop, os.path.join(mountpoint, filename), ready, on_signals, MIN_TASKS, MAX_TASKS)
        finally:
            pyfuse3.close(unmount=True)  # a no-op when fusermount3 -u already ended the session
            lv.flush()
    finally:
        _one_session.release()

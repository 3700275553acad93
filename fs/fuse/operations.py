"""The FUSE face of the filesystem: pyfuse3 requests -> :class:`FileSystem` calls.

Each request runs its filesystem call in a trio worker thread (``trio.to_thread``): the trio
thread only moves requests, so a slow device read, a long truncate or an fsync waiting for the
log delays the request that asked for it and nothing else. Read-only calls (lookup, getattr,
readlink, getxattr, listxattr) are first tried inline under ``nowait.no_wait()``: answered at
once when everything they touch is in memory, handed to a worker the moment anything would wait
(a thread hand-off costs several times a cached lookup).

Kernel caches (what we chose and why):

* **page cache on, ``keep_cache``**: every change to a file goes through this one mount, so the
  kernel's cached pages are always current; ``mmap`` works (fsx, Spark's memory-mapped reads)
  and re-reads cost no FUSE round trip. Writes are write-through (no writeback cache): a
  ``write`` returns once the data is on the volume (the host page cache of the image files) and
  its records are in the engine's log buffer.
* **attribute and entry timeouts of 1 s**: the kernel revalidates names and attributes at most
  once a second; all changes come through the kernel, which updates its own copy as it makes
  them, so the cache is never stale for users of this mount.
* **large requests**: libfuse 3 negotiates up to 1 MiB writes (``max_pages`` 256); reads come in
  readahead windows.

The lookup count the kernel keeps for each inode (and every open handle) is passed on to
:meth:`FileSystem.ref` / :meth:`FileSystem.unref`, which is what keeps an unlinked but open
file alive.

Virtual entries of the root: ``/.trax`` (status JSON, read-only; each reader reads the bytes
whose size its ``stat`` reported, see ``traxfs.fs.fuse.status_files``) and ``/.snapshots``
(reserved: empty until snapshots arrive; ``mkdir`` there is refused).
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import stat
import time
from collections.abc import Callable

import pyfuse3
import trio

from traxfs.ext import fuse_lowlevel
from traxfs.fs.engine import nowait
from traxfs.fs.engine.page import PageCorrupt
from traxfs.fs.errors import FsError
from traxfs.fs.filesystem import ROOT_INO, FileSystem
from traxfs.fs.fuse.status_files import StatusSnapshots, reader_of
from traxfs.fs.keys import Inode

log = logging.getLogger("traxfs.fs")

TIMEOUT = 1.0
VIRTUAL_BASE = 1 << 62
TRAX_DIR = VIRTUAL_BASE
SNAP_DIR = VIRTUAL_BASE + 1
STATUS_FILES = ("engine.json", "log.json", "buffer.json", "data.json", "filesystem.json", "volume.json")
STATUS_INO = {name: VIRTUAL_BASE + 16 + i for i, name in enumerate(STATUS_FILES)}
STATUS_NAME = {ino: name for name, ino in STATUS_INO.items()}
CAPS = b"security.capability"
SETATTR_FIELDS = (  # pyfuse3 SetattrFields flag, FileSystem.setattr argument, EntryAttributes field
    ("update_mode", "mode", "st_mode"), ("update_uid", "uid", "st_uid"), ("update_gid", "gid", "st_gid"),
    ("update_size", "size", "st_size"), ("update_atime", "atime_ns", "st_atime_ns"),
    ("update_mtime", "mtime_ns", "st_mtime_ns"), ("update_ctime", "ctime_ns", "st_ctime_ns"))
VIRTUAL_ROOT_ENTRIES = ((b".trax", TRAX_DIR, 1), (b".snapshots", SNAP_DIR, 2))


class TraxOperations(pyfuse3.Operations):
    supports_dot_lookup = True
    enable_writeback_cache = False
    enable_acl = False

    def __init__(self, fs: FileSystem, volume_info: Callable[[], dict] | None = None):
        super().__init__()
        self.fs = fs
        self.volume_info = volume_info or (lambda: {})
        self._fh = itertools.count(1)
        self._open: dict[int, int] = {}  # fh -> ino
        self._status = StatusSnapshots()  # the bytes each reader of a /.trax file is to see
        self._dirs: dict[int, int] = {}  # directory fh -> ino
        self._dir_readers: dict[int, int] = {}  # directory fh -> the process that opened it
        self._caps: dict[int, bool] = {}  # ino -> has a security.capability attribute
        self._mounted_ns = time.time_ns()
        self.stats = {"reads": 0, "inline_misses": 0}  # read-only calls; those that needed a worker

    # ----- plumbing -----------------------------------------------------------------------------
    @staticmethod
    def _fuse_error(fn, e: Exception) -> pyfuse3.FUSEError:
        """What the kernel is told when ``fn`` raised ``e``: its errno, EIO for a damaged page,
        or EIO (logged) for a bug."""
        if isinstance(e, pyfuse3.FUSEError):
            return e
        if isinstance(e, FsError):
            return pyfuse3.FUSEError(e.errno)
        if isinstance(e, PageCorrupt):  # logged once by the engine, which marks the filesystem damaged
            return pyfuse3.FUSEError(errno.EIO)
        log.exception("internal error in %s", getattr(fn, "__name__", fn))
        return pyfuse3.FUSEError(errno.EIO)

    async def _run(self, fn, *args, **kw):
        try:
            return await trio.to_thread.run_sync(lambda: fn(*args, **kw))
        except Exception as e:
            raise self._fuse_error(fn, e) from None

    async def _read(self, fn, *args):
        """A read-only call: answered inline when everything it needs is in memory (no worker
        thread hand-off, which costs several times the lookup), else in a worker like any other."""
        try:
            return self.fs.try_now(fn, *args)
        except nowait.WouldBlock:
            self.stats["inline_misses"] += 1
            return await self._run(fn, *args)
        except Exception as e:
            raise self._fuse_error(fn, e) from None
        finally:
            self.stats["reads"] += 1

    def _entry(self, node: Inode) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.generation = node.generation
        a.entry_timeout = a.attr_timeout = TIMEOUT
        a.st_mode = node.mode
        a.st_nlink = node.nlink
        a.st_uid, a.st_gid = node.uid, node.gid
        a.st_rdev = node.rdev
        a.st_size = node.size
        a.st_blksize = 1 << 20
        a.st_blocks = node.blocks
        a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns = node.atime_ns, node.mtime_ns, node.ctime_ns
        a.st_birthtime_ns = node.crtime_ns
        return a

    def _virtual(self, ino: int) -> Inode:
        t = self._mounted_ns
        if ino in (TRAX_DIR, SNAP_DIR):
            return Inode(ino, stat.S_IFDIR | 0o555, 0, 0, 2, atime_ns=t, mtime_ns=t, ctime_ns=t, crtime_ns=t)
        raise pyfuse3.FUSEError(errno.ENOENT)

    async def _status_of(self, name: str, reader: int) -> bytes:
        """The bytes of status file ``name`` that ``reader`` is to see (made now if need be)."""
        data = self._status.known(name, reader)
        if data is None:
            data = self._status.made(name, reader, await trio.to_thread.run_sync(self._status_bytes, name))
        return data

    async def _status_entry(self, name: str, reader: int) -> pyfuse3.EntryAttributes:
        """A status file's attributes: its size is that of the snapshot ``reader`` will read,
        and the kernel must not cache them (attribute timeout 0: it asks at every stat)."""
        t = self._mounted_ns
        data = await self._status_of(name, reader)
        a = self._entry(Inode(STATUS_INO[name], stat.S_IFREG | 0o444, 0, 0, 1, size=len(data), atime_ns=t,
                              mtime_ns=t, ctime_ns=t, crtime_ns=t))
        a.attr_timeout = 0
        return a

    def _referenced(self, node: Inode) -> pyfuse3.EntryAttributes:
        """An entry the kernel will hold a lookup reference to."""
        if node.ino < VIRTUAL_BASE:
            self.fs.ref(node.ino)
        return self._entry(node)

    @staticmethod
    def _refuse_virtual(*inos: int) -> None:
        for ino in inos:
            if ino >= VIRTUAL_BASE:
                raise pyfuse3.FUSEError(errno.EPERM if ino != SNAP_DIR else errno.EOPNOTSUPP)

    def _reserved_name(self, parent: int, name: bytes) -> None:
        if parent == ROOT_INO and name in (b".trax", b".snapshots"):
            raise pyfuse3.FUSEError(errno.EEXIST)

    # ----- names --------------------------------------------------------------------------------
    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode == ROOT_INO:
            for vname, vino, _ in VIRTUAL_ROOT_ENTRIES:
                if name == vname:
                    return self._entry(self._virtual(vino))
        if parent_inode == TRAX_DIR:
            text = name.decode(errors="replace")
            if text not in STATUS_INO:
                raise pyfuse3.FUSEError(errno.ENOENT)
            return await self._status_entry(text, reader_of(ctx.pid))
        if parent_inode >= VIRTUAL_BASE:
            if name == b"..":
                return self._entry(await self._read(self.fs.getattr, ROOT_INO))
            raise pyfuse3.FUSEError(errno.ENOENT)
        if name == b".":
            node = await self._read(self.fs.getattr, parent_inode)
        else:
            node = await self._read(self.fs.lookup, parent_inode, name)
        return self._referenced(node)

    async def forget(self, inode_list):
        for ino, n in inode_list:
            if ino < VIRTUAL_BASE and ino != ROOT_INO:
                await self._run(self.fs.unref, ino, n)

    async def getattr(self, inode, ctx=None):
        if inode in STATUS_NAME:
            return await self._status_entry(STATUS_NAME[inode], reader_of(ctx.pid))
        if inode >= VIRTUAL_BASE:
            return self._entry(self._virtual(inode))
        return self._entry(await self._read(self.fs.getattr, inode))

    async def setattr(self, inode, attr, fields, fh, ctx):
        self._refuse_virtual(inode)
        kw = {arg: getattr(attr, field) for flag, arg, field in SETATTR_FIELDS if getattr(fields, flag)}
        return self._entry(await self._run(self.fs.setattr, inode, **kw))

    async def readlink(self, inode, ctx):
        self._refuse_virtual(inode)
        return await self._read(self.fs.readlink, inode)

    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        self._refuse_virtual(parent_inode)
        self._reserved_name(parent_inode, name)
        return self._referenced(await self._run(self.fs.create, parent_inode, name, mode, ctx.uid, ctx.gid, rdev))

    async def mkdir(self, parent_inode, name, mode, ctx):
        self._refuse_virtual(parent_inode)
        self._reserved_name(parent_inode, name)
        return self._referenced(await self._run(self.fs.mkdir, parent_inode, name, mode, ctx.uid, ctx.gid))

    async def symlink(self, parent_inode, name, target, ctx):
        self._refuse_virtual(parent_inode)
        self._reserved_name(parent_inode, name)
        return self._referenced(await self._run(self.fs.symlink, parent_inode, name, target, ctx.uid, ctx.gid))

    async def link(self, inode, new_parent_inode, new_name, ctx):
        self._refuse_virtual(inode, new_parent_inode)
        self._reserved_name(new_parent_inode, new_name)
        return self._referenced(await self._run(self.fs.link, inode, new_parent_inode, new_name))

    async def unlink(self, parent_inode, name, ctx):
        self._refuse_virtual(parent_inode)
        await self._run(self.fs.unlink, parent_inode, name)

    async def rmdir(self, parent_inode, name, ctx):
        self._refuse_virtual(parent_inode)
        await self._run(self.fs.rmdir, parent_inode, name)

    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        self._refuse_virtual(parent_inode_old, parent_inode_new)
        self._reserved_name(parent_inode_new, name_new)
        await self._run(self.fs.rename, parent_inode_old, name_old, parent_inode_new, name_new, flags)

    # ----- files --------------------------------------------------------------------------------
    async def open(self, inode, flags, ctx):
        fh = next(self._fh)
        if inode >= VIRTUAL_BASE:
            if flags & (os.O_WRONLY | os.O_RDWR):
                raise pyfuse3.FUSEError(errno.EACCES)
            name = STATUS_NAME.get(inode)
            if name is None:
                raise pyfuse3.FUSEError(errno.EISDIR)
            reader = reader_of(ctx.pid)
            while not self._status.opened(fh, name, reader):
                await self._status_of(name, reader)
            return pyfuse3.FileInfo(fh=fh, direct_io=True)
        node = await self._read(self.fs.getattr, inode)
        if node.is_dir:
            raise pyfuse3.FUSEError(errno.EISDIR)
        if flags & os.O_TRUNC and flags & (os.O_WRONLY | os.O_RDWR) and node.is_reg:
            await self._run(self.fs.truncate, inode, 0)  # libfuse asks for atomic O_TRUNC
        self.fs.open_handle(inode)
        self._open[fh] = inode
        return pyfuse3.FileInfo(fh=fh, keep_cache=True)

    async def create(self, parent_inode, name, mode, flags, ctx):
        self._refuse_virtual(parent_inode)
        self._reserved_name(parent_inode, name)
        node = await self._run(self.fs.create, parent_inode, name, stat.S_IFREG | (mode & 0o7777), ctx.uid, ctx.gid)
        fh = next(self._fh)
        self.fs.open_handle(node.ino)
        self._open[fh] = node.ino
        return pyfuse3.FileInfo(fh=fh, keep_cache=True), self._referenced(node)

    async def read(self, fh, off, size):
        data = self._status.read(fh)
        if data is not None:
            return data[off : off + size]
        return await self._run(self.fs.read, self._open[fh], off, size)

    async def write(self, fh, off, buf):
        return await self._run(self.fs.write, self._open[fh], off, buf)

    def lseek(self, ino: int, off: int, whence: int, fh: int) -> int:
        """``SEEK_DATA`` / ``SEEK_HOLE`` (pyfuse3 has no such handler: ``traxfs.ext.fuse_lowlevel``
        adds it and calls this in a worker thread). Status files are dense."""
        content = self._status.read(fh)
        if content is not None:
            if off < 0 or off >= len(content):
                raise pyfuse3.FUSEError(errno.ENXIO)
            return off if whence == os.SEEK_DATA else len(content)
        try:
            return self.fs.seek(ino, off, whence)
        except Exception as e:
            raise self._fuse_error(self.fs.seek, e) from None

    async def flush(self, fh):
        ino = self._open.get(fh)
        if ino is not None and self.fs.has_preallocation(ino):
            await self._run(self.fs.flush_handle, ino)

    async def release(self, fh):
        if self._status.released(fh):
            return
        ino = self._open.pop(fh)
        await self._run(self.fs.release_handle, ino)

    async def fsync(self, fh, datasync):
        if self._status.read(fh) is not None:
            return
        await self._run(self.fs.fsync, self._open[fh], bool(datasync))

    # ----- directories --------------------------------------------------------------------------
    async def opendir(self, inode, ctx):
        if inode < VIRTUAL_BASE:
            node = await self._read(self.fs.getattr, inode)
            if not node.is_dir:
                raise pyfuse3.FUSEError(errno.ENOTDIR)
        elif inode not in (TRAX_DIR, SNAP_DIR):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        fh = next(self._fh)
        self._dirs[fh] = inode
        self._dir_readers[fh] = reader_of(ctx.pid)
        return fh

    async def readdir(self, fh, start_id, token):
        ino = self._dirs[fh]
        if ino == TRAX_DIR:
            for i, name in enumerate(STATUS_FILES):
                if i + 1 > start_id and not pyfuse3.readdir_reply(
                        token, name.encode(), await self._status_entry(name, self._dir_readers[fh]), i + 1):
                    return
            return
        if ino == SNAP_DIR:
            return
        if ino == ROOT_INO:
            for vname, vino, cookie in VIRTUAL_ROOT_ENTRIES:
                if cookie > start_id and not pyfuse3.readdir_reply(token, vname, self._entry(self._virtual(vino)),
                                                                   cookie):
                    return
        after = start_id
        while True:
            # small batches: the kernel's buffer holds a few dozen entries, and each entry's
            # attributes cost an inode lookup
            batch = await self._run(self.fs.readdir, ino, after, 32)
            if not batch:
                return
            for name, node, cookie in batch:
                self.fs.ref(node.ino)  # readdirplus: the kernel takes a lookup reference ...
                if not pyfuse3.readdir_reply(token, name, self._entry(node), cookie):
                    self.fs.unref(node.ino)  # ... only if the entry fit in the reply
                    return
                after = cookie

    async def releasedir(self, fh):
        self._dirs.pop(fh, None)
        self._dir_readers.pop(fh, None)

    async def fsyncdir(self, fh, datasync):
        if self._dirs[fh] < VIRTUAL_BASE:
            await self._run(self.fs.fsync, None, bool(datasync))

    # ----- extended attributes ------------------------------------------------------------------
    async def getxattr(self, inode, name, ctx):
        if inode >= VIRTUAL_BASE:
            raise pyfuse3.FUSEError(errno.ENODATA)
        if name == CAPS:
            # the kernel asks this before every write (may the write drop file capabilities?);
            # the answer is cached per inode and served on the trio thread, no worker hop
            has = self._caps.get(inode)
            if has is False:
                raise pyfuse3.FUSEError(errno.ENODATA)
            if len(self._caps) > 1 << 17:
                self._caps.clear()
            try:
                value = await self._read(self.fs.getxattr, inode, name)
            except pyfuse3.FUSEError as e:
                if e.errno == errno.ENODATA:
                    self._caps[inode] = False
                raise
            self._caps[inode] = True
            return value
        return await self._read(self.fs.getxattr, inode, name)

    async def setxattr(self, inode, name, value, ctx):
        self._refuse_virtual(inode)
        self._caps.pop(inode, None)
        await self._run(self.fs.setxattr, inode, name, value)

    async def listxattr(self, inode, ctx):
        if inode >= VIRTUAL_BASE:
            return []
        return await self._read(self.fs.listxattr, inode)

    async def removexattr(self, inode, name, ctx):
        self._refuse_virtual(inode)
        self._caps.pop(inode, None)
        await self._run(self.fs.removexattr, inode, name)

    # ----- whole filesystem ---------------------------------------------------------------------
    async def statfs(self, ctx):
        st = await self._run(self.fs.statfs)
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = st.block_size
        s.f_blocks, s.f_bfree, s.f_bavail = st.blocks, st.blocks_free, st.blocks_free
        s.f_files, s.f_ffree, s.f_favail = st.files, st.files_free, st.files_free
        s.f_namemax = st.name_max
        return s

    def _status_bytes(self, name: str) -> bytes:
        st = self.fs.status()
        if isinstance(st.get("filesystem"), dict):
            st["filesystem"]["fuse_reads"] = dict(self.stats)
            st["filesystem"]["fuse_lowlevel"] = {"installed": sorted(fuse_lowlevel.installed()),
                                                 **fuse_lowlevel.calls}
        parts = {"engine.json": st, "log.json": st.get("log"), "buffer.json": st.get("buffer"),
                 "data.json": st.get("data"), "filesystem.json": st.get("filesystem"),
                 "volume.json": self.volume_info()}
        return (json.dumps(parts[name], indent=2, sort_keys=True, default=str) + "\n").encode()

"""The FUSE face of the filesystem: FUSE requests -> :class:`FileSystem` calls.

A translator only: what a name, inode or file is — the tree's own or a subtree's (``/.trax``,
``/.snapshots``, ``fs/subtrees/``) — is the filesystem's business; this layer passes each
request on with its caller, turns the answer into what the kernel wants (attributes with their
cache timeouts, an open's cache choice) and errors into errnos.

Every request this filesystem serves (lookup, getattr, setattr, forget, create, open, read,
write, flush, release, fsync, fsyncdir, getxattr, setxattr, listxattr, removexattr, unlink,
mkdir, rmdir, rename, symlink, link, mknod, readlink, statfs, opendir, readdirplus, releasedir,
and lseek, fallocate, ioctl, which pyfuse3 lacks: the ``ll_*`` methods,
registered by :meth:`TraxOperations.install_lowlevel`) is read from the device by the reader
threads of ``traxfs.ext.fuse_lowlevel`` and answered start to end by the thread that read it,
as in a C server's multi-threaded loop: no trio task, no hand-off (a thread that waits for the
device or the log holds up only its own request; another reads meanwhile). pyfuse3's trio loop
is left INIT, DESTROY and the requests nobody serves (libfuse answers ENOSYS).

Kernel caches (what we chose and why):

* **page cache on, ``keep_cache``** for the tree's files (the handle says so): every change to a
  file goes through this one mount, so the kernel's cached pages are always current; ``mmap``
  works (fsx, Spark's memory-mapped reads) and re-reads cost no FUSE round trip. Writes are
  write-through (no writeback cache): a ``write`` returns once the data is on the volume (the
  host page cache of the image files) and its records are in the engine's log buffer. The one
  hole is an asynchronous ``O_DIRECT`` write (libaio, io_uring), after which the kernel does not
  drop the range's cached pages again: ``fuse_lowlevel`` drops them before it answers the write.
* **attribute and entry timeouts of 1 s**: the kernel revalidates names and attributes at most
  once a second; all changes come through the kernel, which updates its own copy as it makes
  them, so the cache is never stale for users of this mount. Two changes it neither makes nor
  re-reads after are told to it (``fuse_lowlevel.invalidate_attributes``): the ctime a
  ``chattr`` sets, and the blocks of preallocation given back at close. An inode whose attributes change by
  themselves (``FileSystem.volatile``: the status files, the files of /tables) gets attribute
  and entry timeouts of 0 (its name may go by itself too: a file of /tables/NAME/ingest/ goes
  once it is ingested).
* **no FLUSH for opens without write access** (``FOPEN_NOFLUSH``, see ``_opened``): closing a
  file that was only read costs no round trip.
* **large requests**: libfuse 3 negotiates up to 1 MiB writes (``max_pages`` 256); reads come in
  readahead windows, widened to 1 MiB once the mount is live (``mount.widen_readahead``).

The lookup count the kernel keeps for each inode (and every open handle) is passed on to
:meth:`FileSystem.ref` / :meth:`FileSystem.unref`, which is what keeps an unlinked but open
file alive. Both only count (they never wait for the metadata lock); an inode whose last
reference went is handed to the reaper (:meth:`FileSystem.collect_later`, ``fs/reaper.py``),
which frees it off the request path.
"""

from __future__ import annotations

import errno
import itertools
import logging
import struct

import pyfuse3

from ...ext import fuse_lowlevel
from ..engine.page import PageCorrupt
from ..errors import FsError
from ..filesystem import WRITE_ACCESS, FileSystem
from ..inode_flags import flags_to_xflags, xflags_to_flags
from ..keys import Inode
from ..limits import ROOT_INO
from ..subtrees.protocol import Caller, OpenFile
from ..xattrs import XATTR_CREATE, XATTR_REPLACE

log = logging.getLogger("traxfs.fs")

TIMEOUT = 1.0
CAPS = b"security.capability"
DOTS = (b".", b"..")
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS = 0x80086601, 0x40086602  # _IOR/_IOW('f', 1/2, long), as the kernel sends them
FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR = 0x801C581F, 0x401C5820  # _IOR/_IOW('X', 31/32, struct fsxattr)
FSXATTR = struct.Struct("<IIIII8x")  # xflags, extsize, nextents, projid, cowextsize, padding
IOCTL_CMDS = frozenset({FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR})  # what ioctl serves
SEEK_WINDOW = 4  # entries in the first reply after a seekdir (see _OpenDir)
READDIR_BATCH = 32  # the kernel's buffer holds a few dozen entries; each entry's attributes cost a lookup


class _OpenDir:
    """An open directory: its inode, the caller that opened it, and where its listing stands.

    A reply fills the kernel's buffer (the size of the reader's ``getdents`` buffer: glibc asks
    for 32 KiB, some 200 entries with their attributes) when the reader goes on from where the
    last reply ended. A request from anywhere else is a ``seekdir`` (or ``rewinddir``): glibc
    dropped what it had buffered, and a reader that seeks after every entry (telldir, seekdir
    back) would have every step fill a whole buffer from its cookie to be thrown away but one
    entry, so such a request gets :data:`SEEK_WINDOW` entries, doubling while the reader then
    goes on (readahead's rule). The cookie itself resumes in the B+tree directly."""

    __slots__ = ("ino", "caller", "end", "window")

    def __init__(self, ino: int, caller: Caller) -> None:
        self.ino, self.caller = ino, caller
        self.end = 0  # the cookie the last reply ended at (0: the listing's start)
        self.window: int | None = None  # entries the next reply may hold (None: as many as fit)

    def window_for(self, start: int) -> int | None:
        if start != self.end:
            self.window = SEEK_WINDOW
        elif self.window is not None:
            self.window = None if self.window >= READDIR_BATCH * 8 else self.window * 2
        return self.window


LOWLEVEL_OPS = ("lookup", "getattr", "setattr", "forget", "mkdir", "rmdir", "rename", "unlink", "create", "open",
                "read", "write", "flush", "release", "fsync", "opendir", "releasedir", "readdirplus", "symlink",
                "link", "mknod", "readlink", "statfs", "getxattr", "listxattr", "setxattr", "removexattr",
                "fsyncdir", "lseek", "fallocate", "ioctl")  # each served by TraxOperations.ll_<op>


class TraxOperations(pyfuse3.Operations):
    supports_dot_lookup = True
    enable_writeback_cache = False
    enable_acl = False

    def __init__(self, fs: FileSystem):
        super().__init__()
        self.fs = fs
        self._fh = itertools.count(1)
        self._open: dict[int, OpenFile] = {}  # fh -> the filesystem's handle
        self._dirs: dict[int, _OpenDir] = {}  # directory fh -> what was opened, by whom, where it is
        self._caps: dict[int, bool] = {}  # ino -> has a security.capability attribute
        fs.status_files.fuse_counters = self.counters
        fs.lifetime.attributes_changed = fuse_lowlevel.invalidate_attributes

    def install_lowlevel(self) -> None:
        """Register with ``fuse_lowlevel`` every request this filesystem serves (pyfuse3 keeps
        INIT, DESTROY and the ones nobody serves, which libfuse refuses with ENOSYS), each
        answered start to end by the reader thread that read it."""
        fuse_lowlevel.install({op: getattr(self, f"ll_{op}") for op in LOWLEVEL_OPS}, ioctl_cmds=IOCTL_CMDS)

    def counters(self) -> dict:
        """What this adapter adds to ``/.trax/filesystem.json``."""
        return {"fuse_lowlevel": {"installed": sorted(fuse_lowlevel.installed()), **fuse_lowlevel.calls,
                                  "killpriv_v2": fuse_lowlevel.killpriv_v2()},
                "fuse_reader": fuse_lowlevel.reader()}

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

    def _call(self, fn, *args, **kw):
        """``fn(*args, **kw)`` on a reader thread of the fast path (``fuse_lowlevel``), errors as
        errnos. An ENOSPC while removed files wait for the reaper is tried once more after they
        are freed (an operation that fails changes nothing: SPEC §6)."""
        for retry in (False, True):
            try:
                return fn(*args, **kw)
            except Exception as e:
                no_space = isinstance(e, FsError) and e.errno == errno.ENOSPC
                if retry or not no_space or not self.fs.settle():
                    raise self._fuse_error(fn, e) from None

    def _entry_tuple(self, node: Inode) -> tuple:
        """``node`` as ``fuse_lowlevel`` replies an entry (and the cache timeouts chosen for it)."""
        volatile = self.fs.volatile(node.ino)
        timeout = 0 if volatile else TIMEOUT  # (its name may go by itself too: an ingested file)
        return (node.ino, node.generation, timeout, timeout, node.mode, node.nlink, node.uid, node.gid,
                node.rdev, node.size, node.blocks, node.atime_ns, node.mtime_ns, node.ctime_ns)

    def _referenced(self, node: Inode) -> tuple:
        """An entry the kernel will hold a lookup reference to (found, made or linked)."""
        self.fs.ref(node.ino)
        return self._entry_tuple(node)

    def _opened(self, handle: OpenFile, flags: int) -> tuple:
        """The answer to an open (``flags``: open(2)'s) of ``handle``: ``(fh, direct_io,
        keep_cache, nonseekable, noflush)``. An open without write access asks for no FLUSH at
        close(2) (``FOPEN_NOFLUSH``): a flush has work only for what was written (a producer's
        last batch, a schema, preallocation to give back — which the last handle's release
        gives back all the same), and every close of a file read would otherwise wait for a
        round trip that does nothing."""
        fh = next(self._fh)
        self._open[fh] = handle
        return fh, handle.direct_io, handle.keep_cache, handle.nonseekable, not flags & WRITE_ACCESS

    # ----- names --------------------------------------------------------------------------------
    def ll_lookup(self, parent: int, name: bytes, pid: int, uid: int, gid: int) -> tuple:
        return self._referenced(self._call(self.fs.lookup, parent, name, Caller(pid, uid, gid)))

    def ll_forget(self, pairs: list[tuple[int, int]]) -> None:
        """The kernel dropped references (it wants no answer); the last one of an unlinked
        inode hands it to the reaper (``fs/reaper.py``), which frees it between requests."""
        for ino, n in pairs:
            if ino != ROOT_INO and self.fs.unref(ino, n):
                try:
                    self.fs.collect_later(ino)
                except Exception:  # noqa: BLE001  (no answer carries it; the other pairs still count)
                    log.exception("freeing inode %d after its last reference", ino)

    def ll_getattr(self, ino: int, pid: int, uid: int, gid: int) -> tuple:
        return self._entry_tuple(self._call(self.fs.getattr, ino, Caller(pid, uid, gid)))

    def ll_setattr(self, ino: int, changes: dict, pid: int, uid: int, gid: int) -> tuple:
        return self._entry_tuple(self._call(self.fs.setattr, ino, caller=Caller(pid, uid, gid), **changes))

    def ll_readlink(self, ino: int) -> bytes:
        return self._call(self.fs.readlink, ino)

    def ll_mknod(self, parent: int, name: bytes, mode: int, rdev: int, pid: int, uid: int, gid: int) -> tuple:
        return self._referenced(self._call(self.fs.create, parent, name, mode, uid, gid, rdev,
                                           caller=Caller(pid, uid, gid)))

    def ll_mkdir(self, parent: int, name: bytes, mode: int, pid: int, uid: int, gid: int) -> tuple:
        return self._referenced(self._call(self.fs.mkdir, parent, name, mode, uid, gid, Caller(pid, uid, gid)))

    def ll_symlink(self, parent: int, name: bytes, target: bytes, pid: int, uid: int, gid: int) -> tuple:
        return self._referenced(self._call(self.fs.symlink, parent, name, target, uid, gid,
                                           caller=Caller(pid, uid, gid)))

    def ll_link(self, ino: int, new_parent: int, new_name: bytes, pid: int, uid: int, gid: int) -> tuple:
        return self._referenced(self._call(self.fs.link, ino, new_parent, new_name, Caller(pid, uid, gid)))

    def ll_unlink(self, parent: int, name: bytes, pid: int, uid: int, gid: int) -> None:
        self._call(self.fs.unlink, parent, name, Caller(pid, uid, gid))

    def ll_rmdir(self, parent: int, name: bytes, pid: int, uid: int, gid: int) -> None:
        self._call(self.fs.rmdir, parent, name, Caller(pid, uid, gid))

    def ll_rename(self, parent: int, name: bytes, new_parent: int, new_name: bytes, flags: int, pid: int, uid: int,
                  gid: int) -> None:
        self._call(self.fs.rename, parent, name, new_parent, new_name, flags, Caller(pid, uid, gid))

    # ----- files --------------------------------------------------------------------------------
    def ll_open(self, ino: int, flags: int, kill_suidgid: bool, pid: int, uid: int, gid: int) -> tuple:
        """(libfuse asks for atomic O_TRUNC: an open may truncate, on the reader thread.)
        ``kill_suidgid``: a truncating open by a caller without CAP_FSETID (HANDLE_KILLPRIV_V2)."""
        handle = self._call(self.fs.open_file, ino, flags, Caller(pid, uid, gid))
        if kill_suidgid:
            self._kill_suidgid(ino)
        return self._opened(handle, flags)

    def ll_create(self, parent: int, name: bytes, mode: int, flags: int, pid: int, uid: int, gid: int) -> tuple:
        node, handle = self._call(self.fs.create_file, parent, name, mode, flags, Caller(pid, uid, gid))
        self.fs.ref(node.ino)
        self._caps[node.ino] = False  # a new file has no attributes: its first write needs no lookup
        return self._entry_tuple(node), self._opened(handle, flags)

    def ll_read(self, fh: int, off: int, size: int) -> bytes:
        return self._call(self._open[fh].read, off, size)

    def ll_write(self, fh: int, off: int, data: bytes, kill_suidgid: bool, ino: int) -> int:
        """``kill_suidgid``: the writer has no CAP_FSETID (HANDLE_KILLPRIV_V2, or direct I/O);
        the bits go first, as the kernel's own check did (a write that cannot clear them is
        refused before it changes the file)."""
        if kill_suidgid:
            self._kill_suidgid(ino)
        return self._call(self._open[fh].write, off, data)

    def _kill_suidgid(self, ino: int) -> None:
        """Clear the set-user-ID bit of file ``ino``, and its set-group-ID bit if it is group
        executable, as a write or truncate by an unprivileged caller does on a local filesystem.
        (The kernel's cached attributes need no word: it marks them stale itself after a write,
        a truncating open or a fallocate, and a stat asks again.)"""
        self._call(self.fs.kill_suidgid, ino)

    def ll_lseek(self, ino: int, off: int, whence: int, fh: int) -> int:
        """``SEEK_DATA`` / ``SEEK_HOLE`` (pyfuse3 has no such handler: ``traxfs.ext.fuse_lowlevel``
        adds it and calls this on a reader thread)."""
        handle = self._open[fh]
        try:
            return handle.seek(off, whence)
        except Exception as e:
            raise self._fuse_error(handle.seek, e) from None

    def ll_fallocate(self, ino: int, mode: int, off: int, length: int, fh: int, kill_suidgid: bool) -> None:
        """fallocate(2) (pyfuse3 has no such handler: ``traxfs.ext.fuse_lowlevel`` adds it and
        calls this on a reader thread)."""
        self._call(self._open[fh].fallocate, mode, off, length)
        if kill_suidgid:
            self._kill_suidgid(ino)

    def ll_ioctl(self, ino: int, cmd: int, data: bytes, out_size: int, fh: int) -> bytes:
        """The inode flags of chattr and lsattr: ``FS_IOC_GETFLAGS`` / ``SETFLAGS`` (an
        ``unsigned int`` each way) and ``FS_IOC_FSGETXATTR`` / ``FSSETXATTR`` (``struct fsxattr``:
        the kernel reads the old flags this way before a ``SETFLAGS``); ENOTTY for any other
        ioctl. pyfuse3 has no such handler: ``traxfs.ext.fuse_lowlevel`` adds it and calls this
        on a reader thread."""
        try:
            if cmd == FS_IOC_GETFLAGS:
                return self.fs.get_flags(ino).to_bytes(4, "little")[:out_size]
            if cmd == FS_IOC_FSGETXATTR:
                return FSXATTR.pack(flags_to_xflags(self.fs.get_flags(ino)), 0, 0, 0, 0)[:out_size]
            if cmd == FS_IOC_SETFLAGS and len(data) >= 4:
                self._caps.pop(ino, None)
                self.fs.set_flags(ino, int.from_bytes(data[:4], "little"))
                fuse_lowlevel.invalidate_attributes(ino)  # its ctime: the kernel re-reads none after an ioctl
                return data[:out_size]
            if cmd == FS_IOC_FSSETXATTR and len(data) >= FSXATTR.size:
                xflags, extsize, _, projid, cowextsize = FSXATTR.unpack_from(data)
                if extsize or projid or cowextsize:
                    raise pyfuse3.FUSEError(errno.EOPNOTSUPP)
                self.fs.set_flags(ino, xflags_to_flags(xflags))
                fuse_lowlevel.invalidate_attributes(ino)
                return data[:out_size]
            raise pyfuse3.FUSEError(errno.ENOTTY)
        except Exception as e:
            raise self._fuse_error(self.ll_ioctl, e) from None

    def ll_flush(self, fh: int) -> None:
        handle = self._open.get(fh)
        if handle is not None and handle.flush_pending():  # (mostly nothing: no lock taken)
            self._call(handle.flush)

    def ll_release(self, fh: int) -> None:
        self._call(self._open.pop(fh).release)

    def ll_fsync(self, fh: int, datasync: bool) -> None:
        self._call(self._open[fh].fsync, datasync)

    # ----- directories --------------------------------------------------------------------------
    def ll_opendir(self, ino: int, pid: int, uid: int, gid: int) -> tuple:
        """Answered as an open is (no direct I/O, cache or seek choice for a directory)."""
        caller = Caller(pid, uid, gid)
        self._call(self.fs.opendir, ino, caller)
        fh = next(self._fh)
        self._dirs[fh] = _OpenDir(ino, caller)
        return fh, False, False, False, False

    def ll_readdirplus(self, fh: int, start: int, size: int) -> list:
        """The entries after cookie ``start`` that fit in ``size`` bytes (as many as the open
        directory's window allows), each with its attributes; the kernel takes a lookup
        reference of every one but "." and "..", counted here as it is chosen."""
        d = self._dirs[fh]
        window = d.window_for(start)
        out: list = []
        after, room = start, size
        while window is None or len(out) < window:
            want = READDIR_BATCH if window is None else min(READDIR_BATCH, window - len(out))
            batch = self._call(self.fs.readdir, d.ino, after, want, d.caller, True)
            if not batch:
                break
            for name, node, cookie in batch:
                need = fuse_lowlevel.direntplus_size(name)
                if need > room:
                    d.end = after
                    return out
                if name not in DOTS:
                    self.fs.ref(node.ino)
                out.append((name, self._entry_tuple(node), cookie))
                after, room = cookie, room - need
        d.end = after
        return out

    def ll_releasedir(self, fh: int) -> None:
        self._dirs.pop(fh, None)

    def ll_fsyncdir(self, fh: int, datasync: bool) -> None:
        self._call(self.fs.fsync_dir, self._dirs[fh].ino, datasync)

    # ----- extended attributes ------------------------------------------------------------------
    def ll_getxattr(self, ino: int, name: bytes) -> bytes:
        if name == CAPS:
            # the kernel asks this before every write (may the write drop file capabilities?);
            # the answer is cached per inode: no metadata lock, no B+tree walk
            if self._caps.get(ino) is False:
                raise pyfuse3.FUSEError(errno.ENODATA)
            if len(self._caps) > 1 << 17:
                self._caps.clear()
        return self._noting_caps(ino, name)

    def _noting_caps(self, ino: int, name: bytes) -> bytes:
        """``fs.getxattr``; whether ``ino`` has capabilities is remembered."""
        try:
            value = self._call(self.fs.getxattr, ino, name)
        except pyfuse3.FUSEError as e:
            if name == CAPS and e.errno == errno.ENODATA:
                self._caps[ino] = False
            raise
        if name == CAPS:
            self._caps[ino] = True
        return value

    def ll_setxattr(self, ino: int, name: bytes, value: bytes, flags: int) -> None:
        """``XATTR_CREATE`` / ``XATTR_REPLACE`` are checked in the same transaction as the change."""
        if flags & ~(XATTR_CREATE | XATTR_REPLACE):
            raise pyfuse3.FUSEError(errno.EINVAL)
        self._caps.pop(ino, None)
        self._call(self.fs.setxattr, ino, name, value, flags)

    def ll_listxattr(self, ino: int) -> list[bytes]:
        return self._call(self.fs.listxattr, ino)

    def ll_removexattr(self, ino: int, name: bytes) -> None:
        self._caps.pop(ino, None)
        self._call(self.fs.removexattr, ino, name)

    # ----- whole filesystem ---------------------------------------------------------------------
    def ll_statfs(self) -> tuple:
        st = self._call(self.fs.statfs)
        return st.block_size, st.blocks, st.blocks_free, st.files, st.files_free, st.name_max

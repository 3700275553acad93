"""A minimal pass-through filesystem: mirror a source directory at a mountpoint through FUSE.

This is the "Python FUSE baseline" of the benchmarks (BENCHMARKS.md) and of the Spark tests: the
same pyfuse3 + trio stack as traxfs, with every request answered by the host filesystem, so any
difference measured against it is traxfs's own cost, and a Spark job that passes through it
shows that the FUSE path itself (rename of directories, listing, create/unlink churn) is sound.

Design, kept small on purpose:

* Inodes are the source's own ``st_ino`` (the source root is ``ROOT_INODE``); the source must be
  one filesystem (mounts below it are not crossed cleanly: inode numbers could collide).
* Each inode remembers the ``(parent inode, name)`` pairs it is known under, not a path, so
  renaming a directory moves its whole subtree by changing one entry; a path is rebuilt by
  walking up to the root when needed. Hard links give an inode several pairs.
* Metadata calls (lstat, mkdir, rename, ...) run inline on the trio thread: they take
  microseconds on a local filesystem, and running them without an ``await`` keeps the inode
  tables consistent without locks. Data calls (pread, pwrite, fsync) may block on the disk,
  so they go to worker threads (``trio.to_thread.run_sync``) and several run at once.
* Each open is its own host file descriptor, which is the FUSE file handle. The kernel page cache
  is used as for any filesystem (no direct_io); ``default_permissions`` makes the kernel check
  access bits itself. The process umask is 0 while serving, because the kernel has already
  applied the caller's umask to every mode it sends.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyfuse3
import trio

from ..fs.fuse.loop import serve_loop
from ..fs.fuse.options import mount_options

log = logging.getLogger(__name__)

ROOT = pyfuse3.ROOT_INODE
TIMEOUT = 1.0  # seconds the kernel may cache entries and attributes (libfuse's default)
_one_session = threading.Lock()  # pyfuse3 has process-global session state


def _fuse_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn an ``OSError`` from the host into the same errno for the FUSE caller; anything else
    escaping a handler would end pyfuse3's main loop."""

    async def wrapper(*args: Any) -> Any:
        try:
            return await fn(*args)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None

    wrapper.__name__ = fn.__name__
    return wrapper


class Passthrough(pyfuse3.Operations):
    def __init__(self, source: str):
        super().__init__()
        self.source = os.fsencode(os.path.abspath(source))
        self.root_ino = os.lstat(self.source).st_ino
        self._names: dict[int, set[tuple[int, bytes]]] = {}  # inode -> (parent, name) known under
        self._lookups: dict[int, int] = {}  # the kernel's lookup count per inode
        self._fds: dict[int, set[int]] = {}  # inode -> open host fds (getattr of unlinked files)
        self._fd_inode: dict[int, int] = {}
        self._dirs: dict[int, tuple[int, list[bytes]]] = {}  # opendir handle -> (inode, names)
        self._next_dir = 1
        self._as_root = os.geteuid() == 0

    # ----- inode bookkeeping --------------------------------------------------------------------
    def _path(self, inode: int, name: bytes | None = None) -> bytes:
        parts = [] if name is None else [name]
        while inode != ROOT:
            names = self._names.get(inode)
            if not names:
                raise pyfuse3.FUSEError(errno.ENOENT)  # forgotten, or unlinked while open
            inode, part = next(iter(names))
            parts.append(part)
        return os.path.join(self.source, *reversed(parts))

    def _ino(self, st: os.stat_result) -> int:
        return ROOT if st.st_ino == self.root_ino else st.st_ino

    def _attr(self, st: os.stat_result) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = self._ino(st)
        a.entry_timeout = a.attr_timeout = TIMEOUT
        for f in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_rdev", "st_size", "st_blksize",
                  "st_blocks", "st_atime_ns", "st_mtime_ns", "st_ctime_ns"):
            setattr(a, f, getattr(st, f))
        return a

    def _remember(self, parent: int, name: bytes, st: os.stat_result) -> pyfuse3.EntryAttributes:
        """Count one kernel lookup of ``parent/name`` (every reply carrying an entry is one)."""
        ino = self._ino(st)
        if ino != ROOT and name not in (b".", b".."):
            self._names.setdefault(ino, set()).add((parent, name))
        self._lookups[ino] = self._lookups.get(ino, 0) + 1
        return self._attr(st)

    def _unname(self, parent: int, name: bytes, ino: int) -> None:
        self._names.get(ino, set()).discard((parent, name))

    def _owned(self, path: bytes, ctx: pyfuse3.RequestContext) -> None:
        """New entries belong to the caller, not to the (root) server process."""
        if self._as_root and (ctx.uid, ctx.gid) != (0, 0):
            os.chown(path, ctx.uid, ctx.gid, follow_symlinks=False)

    # ----- names and attributes -----------------------------------------------------------------
    @_fuse_errors
    async def lookup(self, parent_inode, name, ctx=None):
        return self._remember(parent_inode, name, os.lstat(self._path(parent_inode, name)))

    async def forget(self, inode_list):
        for ino, n in inode_list:
            left = self._lookups.get(ino, 0) - n
            if left > 0 or ino == ROOT:
                self._lookups[ino] = max(left, 0)
            else:
                self._lookups.pop(ino, None)
                self._names.pop(ino, None)

    @_fuse_errors
    async def getattr(self, inode, ctx=None):
        fds = self._fds.get(inode)
        return self._attr(os.fstat(next(iter(fds))) if fds else os.lstat(self._path(inode)))

    @_fuse_errors
    async def setattr(self, inode, attr, fields, fh, ctx):
        # with a file handle (ftruncate) work on the open fd, else on the path without following
        # a final symlink (Python refuses follow_symlinks=False together with an fd)
        target: bytes | int = fh if fh is not None else self._path(inode)
        follow = fh is not None
        is_link = not follow and stat.S_ISLNK(os.lstat(target).st_mode)
        if fields.update_size:
            os.truncate(target, attr.st_size)
        if fields.update_mode and not is_link:  # Linux cannot chmod a symlink itself
            os.chmod(target, stat.S_IMODE(attr.st_mode))
        if fields.update_uid or fields.update_gid:
            os.chown(target, attr.st_uid if fields.update_uid else -1,
                     attr.st_gid if fields.update_gid else -1, follow_symlinks=follow)
        if fields.update_atime or fields.update_mtime:
            now = os.stat(target, follow_symlinks=follow)
            os.utime(target, ns=(attr.st_atime_ns if fields.update_atime else now.st_atime_ns,
                                 attr.st_mtime_ns if fields.update_mtime else now.st_mtime_ns),
                     follow_symlinks=follow)
        return await self.getattr(inode, ctx)

    @_fuse_errors
    async def readlink(self, inode, ctx):
        return os.readlink(self._path(inode))

    @_fuse_errors
    async def statfs(self, ctx):
        v, s = os.statvfs(self.source), pyfuse3.StatvfsData()
        for f in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
                  "f_favail", "f_namemax"):
            setattr(s, f, getattr(v, f))
        return s

    # ----- directories --------------------------------------------------------------------------
    async def opendir(self, inode, ctx):
        fh, self._next_dir = self._next_dir, self._next_dir + 1
        self._dirs[fh] = (inode, [])
        return fh

    @_fuse_errors
    async def readdir(self, fh, start_id, token):
        inode, names = self._dirs[fh]
        if start_id == 0:  # a snapshot per listing: offsets stay valid while entries come and go
            names[:] = sorted(os.listdir(self._path(inode)))
        for i in range(start_id, len(names)):
            try:
                st = os.lstat(self._path(inode, names[i]))
            except FileNotFoundError:
                continue  # removed since the snapshot
            if not pyfuse3.readdir_reply(token, names[i], self._attr(st), i + 1):
                break
            self._remember(inode, names[i], st)

    async def releasedir(self, fh):
        self._dirs.pop(fh, None)

    @_fuse_errors
    async def mkdir(self, parent_inode, name, mode, ctx):
        path = self._path(parent_inode, name)
        os.mkdir(path, mode)
        self._owned(path, ctx)
        return self._remember(parent_inode, name, os.lstat(path))

    @_fuse_errors
    async def rmdir(self, parent_inode, name, ctx):
        path = self._path(parent_inode, name)
        ino = self._ino(os.lstat(path))
        os.rmdir(path)
        self._unname(parent_inode, name, ino)

    @_fuse_errors
    async def unlink(self, parent_inode, name, ctx):
        path = self._path(parent_inode, name)
        ino = self._ino(os.lstat(path))
        os.unlink(path)
        self._unname(parent_inode, name, ino)

    @_fuse_errors
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        if flags:  # RENAME_NOREPLACE / RENAME_EXCHANGE: callers (mv, glibc) fall back on EINVAL
            raise pyfuse3.FUSEError(errno.EINVAL)
        old, new = self._path(parent_inode_old, name_old), self._path(parent_inode_new, name_new)
        moved = self._ino(os.lstat(old))
        try:
            replaced: int | None = self._ino(os.lstat(new))
        except FileNotFoundError:
            replaced = None
        os.rename(old, new)
        if replaced == moved:
            return  # two links to one inode: rename(2) does nothing
        if replaced is not None:
            self._unname(parent_inode_new, name_new, replaced)
        self._unname(parent_inode_old, name_old, moved)
        self._names.setdefault(moved, set()).add((parent_inode_new, name_new))

    @_fuse_errors
    async def symlink(self, parent_inode, name, target, ctx):
        path = self._path(parent_inode, name)
        os.symlink(target, path)
        self._owned(path, ctx)
        return self._remember(parent_inode, name, os.lstat(path))

    @_fuse_errors
    async def link(self, inode, new_parent_inode, new_name, ctx):
        path = self._path(new_parent_inode, new_name)
        os.link(self._path(inode), path, follow_symlinks=False)
        return self._remember(new_parent_inode, new_name, os.lstat(path))

    # ----- files --------------------------------------------------------------------------------
    def _opened(self, inode: int, fd: int) -> pyfuse3.FileInfo:
        self._fds.setdefault(inode, set()).add(fd)
        self._fd_inode[fd] = inode
        return pyfuse3.FileInfo(fh=fd)

    @_fuse_errors
    async def open(self, inode, flags, ctx):
        # O_DIRECT would need aligned buffers, which Python's are not; the kernel side of the
        # caller's O_DIRECT is already honoured by FUSE itself.
        return self._opened(inode, os.open(self._path(inode), flags & ~(os.O_CREAT | os.O_DIRECT)))

    @_fuse_errors
    async def create(self, parent_inode, name, mode, flags, ctx):
        path = self._path(parent_inode, name)
        fd = os.open(path, (flags | os.O_CREAT) & ~os.O_DIRECT, mode)
        try:
            self._owned(path, ctx)
            attr = self._remember(parent_inode, name, os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        return self._opened(attr.st_ino, fd), attr

    @_fuse_errors
    async def read(self, fh, off, size):
        return await trio.to_thread.run_sync(os.pread, fh, size, off)

    @_fuse_errors
    async def write(self, fh, off, buf):
        view, done = memoryview(buf), 0
        while done < len(view):  # FUSE without direct_io needs all of it written
            done += await trio.to_thread.run_sync(os.pwrite, fh, view[done:], off + done)
        return done

    async def flush(self, fh):
        pass  # nothing is buffered here; data reaches the host file on each write

    @_fuse_errors
    async def fsync(self, fh, datasync):
        await trio.to_thread.run_sync(os.fdatasync if datasync else os.fsync, fh)

    async def release(self, fh):
        inode = self._fd_inode.pop(fh, None)
        fds = self._fds.get(inode, set())
        fds.discard(fh)
        if not fds:
            self._fds.pop(inode, None)
        os.close(fh)


# ----- serving ----------------------------------------------------------------------------------
def serve(source: str, mountpoint: str, *, allow_other: bool = False,
          ready: Callable[[], None] | None = None) -> None:
    """Mirror ``source`` at ``mountpoint`` until unmounted (``fusermount3 -u``) or, when called in
    the main thread, until SIGTERM or SIGINT. ``ready()`` is called once the mount is live (in a
    worker thread, so it may use the mount). The mount is always removed on the way out."""
    if not os.path.isdir(source):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", source)
    if not _one_session.acquire(blocking=False):
        raise RuntimeError("this process is already serving (pyfuse3 allows one session)")
    umask = os.umask(0)
    try:
        options = mount_options(os.path.abspath(source), "passthrough", allow_other=allow_other)
        pyfuse3.init(Passthrough(source), mountpoint, options)
        try:
            on_signals = threading.current_thread() is threading.main_thread()
            trio.run(serve_loop, mountpoint, ready, on_signals, 4, 64)
        finally:
            pyfuse3.close(unmount=True)  # a no-op when fusermount3 -u already ended the session
    finally:
        os.umask(umask)
        _one_session.release()


def _in_mount_table(path: str) -> bool:
    """Whether ``path`` is a mount point, from the mount table: ``os.path.ismount`` says False
    for a FUSE mount whose server is gone (its stat fails with ENOTCONN)."""
    target = os.path.realpath(path).replace(" ", "\\040")
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == target for line in f)


@contextlib.contextmanager
def mounted(source: str | os.PathLike[str], mountpoint: str | os.PathLike[str], *,
            allow_other: bool = False, timeout: float = 30.0) -> Iterator[subprocess.Popen[bytes]]:
    """Serve ``source`` at ``mountpoint`` from a child process for the ``with`` block (tests,
    benchmarks). A separate process, because pyfuse3 allows one session per process and a
    server in the same process as its clients deadlocks as soon as they share a lock. On the
    way out the mount is always removed and the child always ends (SIGKILL by PID at worst)."""
    mountpoint = os.fspath(mountpoint)
    cmd = [sys.executable, "-m", "traxfs.tools.passthrough", os.fspath(source), mountpoint, "--foreground"]
    proc = subprocess.Popen(cmd + (["--allow-other"] if allow_other else []), stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while not os.path.ismount(mountpoint):
            if proc.poll() is not None:
                raise RuntimeError(f"passthrough server exited with {proc.returncode} before mounting")
            if time.monotonic() > deadline:
                raise TimeoutError(f"passthrough: {mountpoint} not mounted after {timeout} s")
            time.sleep(0.05)
        yield proc
    finally:
        if _in_mount_table(mountpoint):
            subprocess.run(["fusermount3", "-u", mountpoint], capture_output=True, timeout=30)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        if _in_mount_table(mountpoint):  # busy, or the server died without unmounting
            subprocess.run(["fusermount3", "-uz", mountpoint], capture_output=True, timeout=30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m traxfs.tools.passthrough", description=__doc__.split("\n")[0])
    p.add_argument("source")
    p.add_argument("mountpoint")
    p.add_argument("--foreground", "-f", action="store_true",
                   help="serve in this process (default: detach once the mount is live)")
    p.add_argument("--allow-other", action="store_true", help="let other users use the mount")
    p.add_argument("--debug", action="store_true")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if a.debug else logging.INFO,
                        format="passthrough: %(levelname)s %(message)s")
    banner = f"passthrough: serving {a.source} at {a.mountpoint} (pid %d)"
    if a.foreground:
        serve(a.source, a.mountpoint, allow_other=a.allow_other,
              ready=lambda: print(banner % os.getpid(), flush=True))
        return 0
    # Detach: the child serves; the parent exits 0 only once the mount is live, so a script can
    # use the mount right after this command returns.
    rfd, wfd = os.pipe()
    if child := os.fork():
        os.close(wfd)
        with os.fdopen(rfd, "rb") as r:
            msg = r.read()
        if msg == b"ok":
            print(banner % child)
            return 0
        os.waitpid(child, 0)
        print(msg.decode(errors="replace") or "passthrough: the server died", file=sys.stderr)
        return 1
    os.close(rfd)
    os.setsid()

    def detach() -> None:
        os.write(wfd, b"ok")
        os.close(wfd)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)

    try:
        serve(a.source, a.mountpoint, allow_other=a.allow_other, ready=detach)
    except BaseException as e:
        try:
            os.write(wfd, f"passthrough: {e}".encode())
        except OSError:
            pass  # already detached
        os._exit(1)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())

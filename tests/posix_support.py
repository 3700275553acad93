"""Helpers for the POSIX behaviour suite (``tests/test_posix*.py``).

* Running code as another user: :func:`as_user` forks a child that drops to the given uid, gid
  and supplementary groups (``setgroups``, ``setgid``, ``setuid``, in that order, then
  ``umask``), calls a function there and sends back its result, or the errno of the ``OSError``
  it raised, which :func:`as_user` raises again in the test. :func:`errno_as` returns that
  outcome as an errno name (``"OK"`` on success), which reads well in asserts. The child never
  execs: the test interpreter may live where other users cannot read it (``/root/.pyenv``), and
  a fork costs a millisecond where an interpreter start costs tens.
* Syscalls Python's ``os`` module does not offer, through ctypes: ``renameat2`` (flags),
  ``utimensat`` with ``UTIME_NOW`` / ``UTIME_OMIT``, ``getdents64`` with a caller-chosen buffer
  size (to read a directory a few entries per call, with the raw ``d_off`` cookies), ``syncfs``.
* Small file helpers (:func:`write_file`, :func:`read_file`, :func:`touch`), :func:`tick` (wait
  out the timestamp clock's granularity) and the users and groups the tests use.
"""

from __future__ import annotations

import ctypes
import errno
import os
import pickle
import platform
import signal
import struct
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

# ----- users ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class User:
    uid: int
    gid: int
    groups: tuple[int, ...] = ()


#: the unprivileged user the permission tests act as
NOBODY = User(65534, 65534)
#: another unprivileged user: owns the files NOBODY must not touch
OTHER = User(61002, 61002)
#: a third one: owns the sticky directory in the sticky-bit tests
THIRD = User(61003, 61003)
#: a group NOBODY is not a member of (unless a test says so via ``groups``)
GROUP = 61010
#: yet another group, for chgrp tests
GROUP2 = 61011


class ChildFailed(AssertionError):
    """The function run as another user raised something other than OSError (or the child could
    not drop privileges): the traceback from the child is the message."""


def as_user(fn: Callable[[], Any], user: User = NOBODY, umask: int = 0o022, timeout: float = 30.0) -> Any:
    """Call ``fn()`` in a forked child running as ``user`` with ``umask``; return its result.

    An ``OSError`` in the child is raised again here as ``OSError(errno)`` (so the matching
    subclass: ``PermissionError`` for EACCES/EPERM, ...). The result must pickle. The child is
    killed (by its pid) if it has not answered within ``timeout`` seconds or if this test is
    interrupted.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        code = 0
        try:
            os.close(r)
            os.setgroups(list(user.groups))
            os.setgid(user.gid)
            os.setuid(user.uid)
            os.umask(umask)
            try:
                payload: tuple = ("ok", fn())
            except OSError as e:
                payload = ("errno", e.errno)
            except BaseException:
                payload = ("exc", traceback.format_exc())
            try:
                data = pickle.dumps(payload)
            except Exception:
                data = pickle.dumps(("exc", f"result does not pickle: {payload!r:.300}"))
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    reaped = False
    try:
        chunks = []
        deadline = time.monotonic() + timeout
        os.set_blocking(r, False)
        while True:
            try:
                chunk = os.read(r, 65536)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"child running as {user} did not answer in {timeout} s") from None
                time.sleep(0.0005)
                continue
            if not chunk:
                break
            chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
        reaped = True
    finally:
        os.close(r)
        if not reaped:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    if not chunks:
        raise ChildFailed(f"child as {user} sent nothing (wait status {status}): could it drop privileges?")
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "ok":
        return value
    if kind == "errno":
        raise OSError(value, os.strerror(value))
    raise ChildFailed(f"child as {user} raised:\n{value}")


def errno_as(fn: Callable[[], Any], user: User = NOBODY, umask: int = 0o022) -> str:
    """Like :func:`as_user`, but return the outcome as a name: ``"OK"`` or e.g. ``"EACCES"``."""
    try:
        as_user(fn, user, umask)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    return "OK"


def errno_of(fn: Callable[[], Any]) -> str:
    """The outcome of ``fn()`` in this process (as root), as :func:`errno_as` names it."""
    try:
        fn()
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    return "OK"


# ----- files ------------------------------------------------------------------------------------


def write_file(path, data: bytes = b"", mode: int = 0o644) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def read_file(path) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def pread_all(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes at ``offset`` (fewer only at end of file), looping over short reads."""
    out = bytearray()
    while len(out) < size:
        chunk = os.pread(fd, size - len(out), offset + len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def touch(path, mode: int = 0o644) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, mode))


#: how long to wait so that a timestamp taken now differs from one taken before: the kernel's
#: coarse clock advances once a jiffy (1-10 ms), a FUSE daemon's clock at least as often
TICK = 0.03


def tick() -> None:
    time.sleep(TICK)


def times_ns(path, follow_symlinks: bool = True) -> tuple[int, int, int]:
    """(atime, mtime, ctime) in nanoseconds."""
    st = os.stat(path, follow_symlinks=follow_symlinks)
    return st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns


def mode_of(path, follow_symlinks: bool = True) -> int:
    """The permission and set-id/sticky bits (``S_IMODE``) of ``path``."""
    return os.stat(path, follow_symlinks=follow_symlinks).st_mode & 0o7777


# ----- syscalls through ctypes --------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2


def _check(ret: int, *paths) -> int:
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), *[os.fsdecode(p) for p in paths[:1]])
    return ret


def renameat2(src, dst, flags: int) -> None:
    """``renameat2(AT_FDCWD, src, AT_FDCWD, dst, flags)``."""
    fn = _libc.renameat2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    _check(fn(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags), src)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _timespec(t: int) -> _Timespec:
    if t in (UTIME_NOW, UTIME_OMIT):
        return _Timespec(0, t)
    return _Timespec(t // 1_000_000_000, t % 1_000_000_000)


def utimensat(path, atime_ns: int, mtime_ns: int, follow_symlinks: bool = True) -> None:
    """``utimensat(AT_FDCWD, path, {atime, mtime}, flags)``; each time is nanoseconds since the
    epoch, or :data:`UTIME_NOW` / :data:`UTIME_OMIT`."""
    fn = _libc.utimensat
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_Timespec), ctypes.c_int]
    fn.restype = ctypes.c_int
    ts = (_Timespec * 2)(_timespec(atime_ns), _timespec(mtime_ns))
    flags = 0 if follow_symlinks else AT_SYMLINK_NOFOLLOW
    _check(fn(AT_FDCWD, os.fsencode(path), ts, flags), path)


def syncfs(fd: int) -> None:
    fn = _libc.syncfs
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    _check(fn(fd))


_SYS_GETDENTS64 = {"x86_64": 217, "aarch64": 61, "riscv64": 61}.get(platform.machine())


@dataclass(frozen=True)
class Dirent:
    ino: int
    off: int  # the cookie: lseek(fd, off, SEEK_SET) resumes after this entry
    type: int
    name: bytes


def getdents(fd: int, bufsize: int = 512) -> list[Dirent]:
    """One ``getdents64`` call with a ``bufsize`` buffer: the next few entries of the open
    directory ``fd``, or ``[]`` at its end."""
    if _SYS_GETDENTS64 is None:
        raise OSError(errno.ENOSYS, f"getdents64 syscall number unknown on {platform.machine()}")
    buf = ctypes.create_string_buffer(bufsize)
    sc = _libc.syscall
    sc.restype = ctypes.c_long
    n = _check(sc(ctypes.c_long(_SYS_GETDENTS64), ctypes.c_long(fd), buf, ctypes.c_long(bufsize)))
    raw = buf.raw[:n]
    out, pos = [], 0
    while pos < n:
        ino, off, reclen, dtype = struct.unpack_from("<QqHB", raw, pos)
        name = raw[pos + 19:pos + reclen].split(b"\0", 1)[0]
        out.append(Dirent(ino, off, dtype, name))
        pos += reclen
    return out


def list_dir_small(path, bufsize: int = 512, between: Callable[[], None] | None = None) -> list[bytes]:
    """All names of a directory read with many small ``getdents64`` calls (``.`` and ``..``
    included), calling ``between()`` after each call."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        names: list[bytes] = []
        while batch := getdents(fd, bufsize):
            names.extend(d.name for d in batch)
            if between:
                between()
        return names
    finally:
        os.close(fd)


@contextmanager
def umask(mask: int):
    """Set this process's umask for the block (the tests run one at a time)."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def assert_newer(before: int, after: int, what: str) -> None:
    assert after > before, f"{what} not updated: {before} -> {after}"


def assert_same(before: int, after: int, what: str) -> None:
    assert after == before, f"{what} changed: {before} -> {after}"

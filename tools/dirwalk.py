"""Directory walks through libc's ``opendir``/``readdir``/``telldir``/``seekdir`` (ctypes).

Python's ``os.scandir`` never seeks; programs that do (Samba, NFS servers, ``rm -r`` of some
libcs, backup tools) walk a directory taking ``telldir`` after every entry and ``seekdir`` back
to it. :func:`seekdir_walk` is that walk: after each entry it saves the position, seeks away
(to the start) and back, and reads on. Each ``seekdir`` throws away glibc's buffered entries, so
every entry costs one fresh ``getdents64`` from the saved cookie: a filesystem that resumes a
cookie by rescanning makes this walk quadratic. Used by the tests and ``tools/bench_fs``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os


class _Dirent64(ctypes.Structure):
    _fields_ = [("d_ino", ctypes.c_uint64), ("d_off", ctypes.c_int64), ("d_reclen", ctypes.c_ushort),
                ("d_type", ctypes.c_ubyte), ("d_name", ctypes.c_char * 256)]


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.opendir.argtypes = [ctypes.c_char_p]
_libc.opendir.restype = ctypes.c_void_p
_libc.readdir64.argtypes = [ctypes.c_void_p]
_libc.readdir64.restype = ctypes.POINTER(_Dirent64)
_libc.telldir.argtypes = [ctypes.c_void_p]
_libc.telldir.restype = ctypes.c_long
_libc.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
_libc.seekdir.restype = None
_libc.rewinddir.argtypes = [ctypes.c_void_p]
_libc.rewinddir.restype = None
_libc.closedir.argtypes = [ctypes.c_void_p]


def seekdir_walk(path: str | os.PathLike) -> list[bytes]:
    """Every name of directory ``path`` (``.`` and ``..`` included), read one entry at a time
    with ``telldir`` after each, a ``rewinddir`` and a ``seekdir`` back to the saved position."""
    d = _libc.opendir(os.fsencode(path))
    if not d:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), os.fspath(path))
    names: list[bytes] = []
    try:
        while True:
            ctypes.set_errno(0)
            ent = _libc.readdir64(d)
            if not ent:
                e = ctypes.get_errno()
                if e:
                    raise OSError(e, os.strerror(e), os.fspath(path))
                return names
            names.append(ent.contents.d_name)
            pos = _libc.telldir(d)
            _libc.rewinddir(d)
            _libc.seekdir(d, pos)
    finally:
        _libc.closedir(d)

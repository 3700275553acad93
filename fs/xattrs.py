"""Extended attributes: ``user.``, ``trusted.`` and ``security.`` names (``system.`` would be
ACLs: not supported), values of up to 64 KiB kept in ``CHUNK``-byte records."""

from __future__ import annotations

import errno

from .errors import FsError
from .inodes import FsTransaction, Inodes
from .keys import CHUNK, joined_chunks, prefix_range, xattr_key
from .limits import now_ns

XATTR_NAME_MAX = 255
XATTR_SIZE_MAX = 65536
XATTR_NAMESPACES = (b"user.", b"trusted.", b"security.")
XATTR_CREATE = 1
XATTR_REPLACE = 2
LAST_CHUNK = 0xFFFF


def _check_name(name: bytes) -> None:
    if not name or len(name) > XATTR_NAME_MAX:
        raise FsError(errno.ERANGE, f"attribute name of {len(name)} bytes")
    if not name.startswith(XATTR_NAMESPACES):
        raise FsError(errno.EOPNOTSUPP, f"attribute namespace of {name!r} not supported")


class Xattrs:
    def __init__(self, inodes: Inodes) -> None:
        self.inodes = inodes
        self.t = inodes.t

    def get(self, ino: int, name: bytes) -> bytes:
        _check_name(name)
        with self.inodes.lock:
            self.inodes.get(ino)
            lo = xattr_key(ino, name, 0)
            first = self.t["xattrs"].get(lo)
            if first is None:  # the common answer (the kernel and ls ask for attributes few files have)
                raise FsError(errno.ENODATA, f"no attribute {name!r}")
            if len(first) < CHUNK:  # every chunk but the last is full: this one is the value
                return first
            return joined_chunks(self.t["xattrs"], lo, xattr_key(ino, name, LAST_CHUNK))

    def names(self, ino: int) -> list[bytes]:
        with self.inodes.lock:
            self.inodes.get(ino)
            # only the namespaces users set: internal values (``trax.flags``) stay unlisted
            return [k[8:-3] for k, _ in self.t["xattrs"].items(*prefix_range(ino))
                    if k[-2:] == b"\0\0" and k[8:].startswith(XATTR_NAMESPACES)]

    def set(self, ino: int, name: bytes, value: bytes, flags: int = 0) -> None:
        _check_name(name)
        if b"\0" in name:
            raise FsError(errno.EINVAL, "attribute name contains NUL")
        if len(value) > XATTR_SIZE_MAX:
            raise FsError(errno.E2BIG, f"attribute value of {len(value)} bytes (limit {XATTR_SIZE_MAX})")
        with self.inodes.lock:
            node = self.inodes.copy(ino)
            exists = self.t["xattrs"].get(xattr_key(ino, name, 0)) is not None
            if flags & XATTR_CREATE and exists:
                raise FsError(errno.EEXIST, f"attribute {name!r} exists")
            if flags & XATTR_REPLACE and not exists:
                raise FsError(errno.ENODATA, f"no attribute {name!r}")
            with self.inodes.transaction() as ftx:
                self._delete(ftx, ino, name)
                chunks = [value[i : i + CHUNK] for i in range(0, len(value), CHUNK)] or [b""]
                for i, c in enumerate(chunks):
                    self.t["xattrs"].put(ftx.tx, xattr_key(ino, name, i), c)
                node.ctime_ns = now_ns()
                self.inodes.put(ftx, node)

    def remove(self, ino: int, name: bytes) -> None:
        _check_name(name)
        with self.inodes.lock:
            node = self.inodes.copy(ino)
            with self.inodes.transaction() as ftx:
                if not self._delete(ftx, ino, name):
                    raise FsError(errno.ENODATA, f"no attribute {name!r}")
                node.ctime_ns = now_ns()
                self.inodes.put(ftx, node)

    def _delete(self, ftx: FsTransaction, ino: int, name: bytes) -> bool:
        keys = list(self.t["xattrs"].keys(xattr_key(ino, name, 0), xattr_key(ino, name, LAST_CHUNK)))
        for k in keys:
            self.t["xattrs"].delete(ftx.tx, k)
        return bool(keys)

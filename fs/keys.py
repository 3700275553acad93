"""On-disk records of the filesystem: inodes, directory entries, readdir cookies, extents.

Every record lives in one of the filesystem's B+trees (``fs/trees.py`` names them). Keys
are big-endian so that the trees' byte order is the numeric order: all entries of one directory
are adjacent and sorted by name, all extents of one file adjacent and sorted by file page.

==============  ===========================================  =========================================
tree            key                                          value
==============  ===========================================  =========================================
inodes          ino                                          :class:`Inode` (``INODE``)
dirents         parent ino + name                            child ino + readdir cookie
cookies         parent ino + cookie                          name
extents         ino + first file page                        first device page + page count + birth epoch
xattrs          ino + name + NUL + chunk number              up to ``CHUNK`` bytes of the value
symlinks        ino + chunk number                           up to ``CHUNK`` bytes of the target
orphans         ino                                          empty: unlinked, still open at a crash
==============  ===========================================  =========================================
"""

from __future__ import annotations

import hashlib
import stat
import struct
from dataclasses import dataclass

U64 = struct.Struct(">Q")
U64X2 = struct.Struct(">QQ")
EXTENT = struct.Struct(">QI")  # format 2: first device page, page count
EXTENT3 = struct.Struct(">QIQ")  # format 3: first device page, page count, birth epoch
INODE = struct.Struct("<IIIIQQqqqqQ")
INODE_VERSION = 1
CHUNK = 1000  # bytes per chunk of a long value (a B+tree entry holds key + value <= 1300)
# Readdir cookies: 1 and 2 are "." and ".." in every directory; 3 to FIRST_COOKIE - 1 are the
# root's entries of the subtrees (``DOTS + tag``); a subtree's own listings are shifted up by DOTS;
# the tree's own entries have cookies from FIRST_COOKIE up (a hash of the name: name_cookie).
DOT_COOKIE = 1
DOTDOT_COOKIE = 2
DOTS = 2  # cookies taken by "." and ".."
FIRST_COOKIE = 16
COOKIE_MASK = (1 << 62) - 1


@dataclass
class Inode:
    ino: int
    mode: int
    uid: int
    gid: int
    nlink: int
    size: int = 0
    rdev: int = 0
    atime_ns: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    crtime_ns: int = 0
    generation: int = 0
    blocks: int = 0  # 512-byte units of data allocated: counted from the extent map, never stored

    def pack(self) -> bytes:
        return INODE.pack(self.mode, self.uid, self.gid, self.nlink, self.size, self.rdev, self.atime_ns,
                          self.mtime_ns, self.ctime_ns, self.crtime_ns, self.generation)

    @classmethod
    def unpack(cls, ino: int, raw: bytes) -> Inode:
        return cls(ino, *INODE.unpack(raw))

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    @property
    def is_reg(self) -> bool:
        return stat.S_ISREG(self.mode)

    @property
    def is_link(self) -> bool:
        return stat.S_ISLNK(self.mode)


def name_cookie(name: bytes) -> int:
    """A directory entry's readdir cookie: a hash of its name (the first free value from it on
    collision). Listings run in hash order, as ext4's htree does: an entry created during a
    listing lands before or after the reader's position at random, so a listing ends even while
    others keep adding entries; with cookies that only grew, a reader slower than a writer never
    would."""
    return max(FIRST_COOKIE, int.from_bytes(hashlib.blake2b(name, digest_size=8).digest(), "big") & COOKIE_MASK)


def ino_key(ino: int) -> bytes:
    return U64.pack(ino)


def dirent_key(parent: int, name: bytes) -> bytes:
    return U64.pack(parent) + name


def cookie_key(parent: int, cookie: int) -> bytes:
    return U64X2.pack(parent, cookie)


def extent_key(ino: int, page: int) -> bytes:
    return U64X2.pack(ino, page)


def prefix_range(ino: int) -> tuple[bytes, bytes]:
    """(start, stop) of every key that begins with ``ino``."""
    return U64.pack(ino), U64.pack(ino + 1)


def xattr_key(ino: int, name: bytes, chunk: int) -> bytes:
    return U64.pack(ino) + name + b"\0" + struct.pack(">H", chunk)


def chunk_key(ino: int, chunk: int) -> bytes:
    return U64.pack(ino) + struct.pack(">H", chunk)


def joined_chunks(tree, lo: bytes, hi: bytes) -> bytes:
    """A long value (symlink target, xattr) stored as the chunks keyed in [lo, hi)."""
    return b"".join(v for _, v in tree.items(lo, hi))


def pack_extent(phys: int, count: int, birth: int) -> bytes:
    """An extent value: its pages, and the epoch they were written in (``fs/history.py``)."""
    return EXTENT3.pack(phys, count, birth)


def unpack_extent(raw: bytes) -> tuple[int, int, int]:
    """(device page, count, birth) of an extent value; a format-2 value (12 bytes) has birth 0."""
    if len(raw) == EXTENT.size:
        return (*EXTENT.unpack(raw), 0)
    return EXTENT3.unpack(raw)

"""The engine's superblock: where the log and the pages are, and where recovery starts.

Two copies, at bytes 0 and 4096 of the engine's device; each write goes to the copy holding the
older sequence number, so a torn superblock write leaves the previous one intact. Format
(little-endian)::

    magic          8s  b"TRAXENG1"
    version        u32 ENGINE_VERSION
    page_size      u32
    log_offset     u64
    log_size       u64
    pages_offset   u64
    page_count     u64
    checkpoint_lsn u64 the last complete checkpoint's begin record: analysis starts here
    trunc_lsn      u64 the oldest LSN recovery may need
    epoch          u32 incremented at every open (log records carry it)
    seq            u64
    log_id         u32 random per format: the seed of every log record's crc
    map_pages      u32 allocation maps at pages 1..map_pages; the maps of pages added by a
                       grow (``traxfs.fs.engine.resize``) sit at the first page they cover
    errors         u32 damaged pages met while the engine was in use (0: none seen)
    error_page     u64 the first of them
    in_use         u32 1 from open until a clean close: found set at open, the last stop was a crash
    page_seed      u32 random per format: the seed of every page's crc32c (0: unseeded)
    crc            u32 crc32c of all of the above

Version 2 added ``map_pages``, ``errors``, ``error_page`` and ``in_use``; version 3 added
``page_seed``. Why a page seed: LSNs start anew at every format, so a page left on the device by
an earlier format (its own number, a valid checksum, a *higher* LSN) would pass for current and
make redo skip every record of the page: a re-formatted device could lose committed work at
its first crash. Seeded with a value drawn at format, such a page fails its checksum and is
rebuilt from the log's page image, as a torn page is (ext4's metadata_csum seed and XFS's
UUID in every block do the same). Older superblocks are still read (version 1: every map
contiguous, no errors recorded; versions 1 and 2: page seed 0, the pages they wrote are
unseeded and stay so); the next write makes them version 3.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

import crc32c

from .copies import good_copy

MAGIC = b"TRAXENG1"
ENGINE_VERSION = 3
_V1 = struct.Struct("<8sIIQQQQQQIQI")
_V2 = struct.Struct("<8sIIQQQQQQIQIIIQI")
_FMT = struct.Struct("<8sIIQQQQQQIQIIIQII")
_HEAD = struct.Struct("<8sI")
_CRC = struct.Struct("<I")
COPIES = (0, 4096)
SUPER_AREA = 8192


class SuperblockError(Exception):
    """No usable superblock: the message names each copy's damage."""


@dataclass(frozen=True)
class Superblock:
    page_size: int
    log_offset: int
    log_size: int
    pages_offset: int
    page_count: int
    checkpoint_lsn: int
    trunc_lsn: int
    epoch: int = 0
    seq: int = 0
    log_id: int = 0
    map_pages: int = 0  # 0: every map at pages 1..k (version 1, never grown)
    errors: int = 0
    error_page: int = 0
    in_use: int = 0
    page_seed: int = 0  # 0: pages of a version 1 or 2 engine, unseeded

    @property
    def end(self) -> int:
        """Bytes of the device the engine uses: the page area's end."""
        return self.pages_offset + self.page_count * self.page_size

    def pack(self) -> bytes:
        body = _FMT.pack(MAGIC, ENGINE_VERSION, self.page_size, self.log_offset, self.log_size,
                         self.pages_offset, self.page_count, self.checkpoint_lsn, self.trunc_lsn,
                         self.epoch, self.seq, self.log_id, self.map_pages, self.errors, self.error_page,
                         self.in_use, self.page_seed)
        return body + _CRC.pack(crc32c.crc32c(body))

    @classmethod
    def unpack(cls, raw: bytes, where: str) -> Superblock:
        magic, version = _HEAD.unpack_from(raw)
        if magic != MAGIC:
            raise SuperblockError(f"{where}: no traxfs engine superblock (magic {magic!r})")
        fmt = {1: _V1, 2: _V2, 3: _FMT}.get(version)
        if fmt is None:
            raise SuperblockError(f"{where}: superblock checksum mismatch (damaged), or engine format version "
                                  f"{version} of a newer traxfs (this one reads 1 to {ENGINE_VERSION})")
        body = raw[: fmt.size]
        (crc,) = _CRC.unpack_from(raw, fmt.size)
        if crc32c.crc32c(body) != crc:
            raise SuperblockError(f"{where}: superblock checksum mismatch (damaged)")
        return cls(*fmt.unpack(body)[2:])


def read_copies(dev, name: str) -> list[Superblock | SuperblockError]:
    """Each copy, or the error that names its damage."""
    if dev.size < SUPER_AREA:  # an empty or truncated image: say so, not which read failed
        raise SuperblockError(f"{name}: too small to hold a traxfs filesystem ({dev.size} bytes)")
    out: list[Superblock | SuperblockError] = []
    for i, off in enumerate(COPIES):
        try:
            out.append(Superblock.unpack(dev.read(off, 512), f"{name} superblock copy {i}"))
        except SuperblockError as e:
            out.append(e)
    return out


def read_superblock(dev, name: str) -> Superblock:
    """The newest valid copy. A copy that fails its check is read from a mirror's other legs
    before it is given up (and its bad leg rewritten)."""
    found, problems = [], []
    for i, copy in enumerate(read_copies(dev, name)):
        if isinstance(copy, Superblock):
            found.append(copy)
            continue
        where = f"{name} superblock copy {i}"
        good = good_copy(dev, COPIES[i], 512, lambda raw, w=where: _valid(raw, w), where)
        if good is None:
            problems.append(str(copy).removeprefix(f"{name} "))
        else:
            found.append(Superblock.unpack(good[0], where))
    if not found:  # the device named once, then each copy's damage
        raise SuperblockError(f"{name}: " + "; ".join(problems))
    return max(found, key=lambda s: s.seq)


def _valid(raw: bytes, where: str) -> bool:
    try:
        Superblock.unpack(raw, where)
    except SuperblockError:
        return False
    return True


def write_superblock(dev, sb: Superblock) -> Superblock:
    """Write ``sb`` with the next sequence number over the older copy; flush. Returns it."""
    new = replace(sb, seq=sb.seq + 1)
    dev.write(COPIES[new.seq % 2], new.pack().ljust(512, b"\0"))
    dev.flush()
    return new

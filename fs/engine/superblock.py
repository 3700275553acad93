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
    crc            u32 crc32c of all of the above
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

import crc32c

from traxfs.fs.engine.copies import good_copy

MAGIC = b"TRAXENG1"
ENGINE_VERSION = 1
_FMT = struct.Struct("<8sIIQQQQQQIQI")
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

    def pack(self) -> bytes:
        body = _FMT.pack(MAGIC, ENGINE_VERSION, self.page_size, self.log_offset, self.log_size,
                         self.pages_offset, self.page_count, self.checkpoint_lsn, self.trunc_lsn,
                         self.epoch, self.seq, self.log_id)
        return body + _CRC.pack(crc32c.crc32c(body))

    @classmethod
    def unpack(cls, raw: bytes, where: str) -> Superblock:
        body = raw[: _FMT.size]
        (crc,) = _CRC.unpack_from(raw, _FMT.size)
        magic, version, ps, lo, ls, po, pc, ck, tr, ep, seq, log_id = _FMT.unpack(body)
        if magic != MAGIC:
            raise SuperblockError(f"{where}: no traxfs engine superblock (magic {magic!r})")
        if crc32c.crc32c(body) != crc:
            raise SuperblockError(f"{where}: superblock checksum mismatch (damaged)")
        if version != ENGINE_VERSION:
            raise SuperblockError(f"{where}: engine format version {version}, this traxfs reads {ENGINE_VERSION}")
        return cls(ps, lo, ls, po, pc, ck, tr, ep, seq, log_id)


def read_superblock(dev, name: str) -> Superblock:
    """The newest valid copy. A copy that fails its check is read from a mirror's other legs
    before it is given up (and its bad leg rewritten)."""
    found, problems = [], []
    for i, off in enumerate(COPIES):
        where = f"{name} superblock copy {i}"
        try:
            found.append(Superblock.unpack(dev.read(off, 512), where))
        except SuperblockError as e:
            good = good_copy(dev, off, 512, lambda raw, w=where: _valid(raw, w), where)
            if good is None:
                problems.append(str(e))
            else:
                found.append(Superblock.unpack(good[0], where))
    if not found:
        raise SuperblockError("; ".join(problems))
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

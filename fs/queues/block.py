"""The on-device format of a queue block: a header, then checksummed frames of whole lines.

A block is ``pages`` engine pages used raw (the queue's block size, or a multiple of it for a
record longer than a block)::

    [0, 64)        block header: magic "TRAXQBLK", version, header size, pages, queue id,
                   block ordinal (0, 1, 2, ... per queue: the chain), first sequence number,
                   the queue's end before this block (equal to the first sequence number
                   unless a crash skipped numbers), creation time, crc32c of the header
    [64, used)     frames, back to back
    [used, end)    never read (bytes of an earlier owner, or of frames a crash lost)

A frame is one append batch (or several, merged while still in memory, that got the same
millisecond timestamp)::

    [0, 40)        frame header: magic, flags, record count, first sequence number, timestamp
                   (ms since the epoch), payload length, crc32c of the payload, crc32c of the
                   header's first 36 bytes
    [40, 40+len)   payload: the records, each one line ending in b"\\n"

Why this shape: the header is written once, with the block's first frame, and never again;
frames are only ever added past ``used``. So bytes that a logged ``used`` describes are never
rewritten, and no crash — a torn write included — can damage them (the rule appends to file
pages follow too). The frame's two checksums let the payload checksum grow while a frame is
still in memory (``crc32c(more, crc)``), and let a reader verify every byte it serves. The
payload is the records verbatim, so a reader serves a frame's lines as one slice.
"""

from __future__ import annotations

import errno
import struct
from bisect import bisect_right
from typing import NamedTuple

import crc32c

from ..engine.page import PAGE_SIZE
from ..errors import FsError

BLOCK_MAGIC = b"TRAXQBLK"
BLOCK_VERSION = 1
FRAME_MAGIC = 0x51465258  # "XRFQ" little-endian
_HEADER = struct.Struct("<8sHHIQQQQQ4xI")
_FRAME = struct.Struct("<IIIQQIII")
HEADER_SIZE = _HEADER.size
FRAME_SIZE = _FRAME.size
_crc = crc32c.crc32c
assert HEADER_SIZE == 64 and FRAME_SIZE == 40


class BlockHeader(NamedTuple):
    pages: int
    queue: int
    ordinal: int
    first_seq: int
    prev_end: int
    created_ms: int

    def pack(self) -> bytes:
        raw = _HEADER.pack(BLOCK_MAGIC, BLOCK_VERSION, HEADER_SIZE, *self, 0)
        return raw[:-4] + _crc(raw[:-4]).to_bytes(4, "little")


class Frame(NamedTuple):
    """A frame found in a block: where its payload is, and what it holds."""

    at: int  # offset of the payload in the block
    length: int
    count: int
    first_seq: int
    ts_ms: int


class BlockDamaged(FsError):
    """A block's bytes fail their checksums or contradict the index: EIO, never wrong bytes."""

    def __init__(self, detail: str):
        super().__init__(errno.EIO, detail)


def parse_header(data, where: str) -> BlockHeader:
    if len(data) < HEADER_SIZE:
        raise BlockDamaged(f"{where}: block header cut short ({len(data)} bytes)")
    magic, version, size, *fields, crc = _HEADER.unpack_from(data)
    if magic != BLOCK_MAGIC:
        raise BlockDamaged(f"{where}: block magic {bytes(magic)!r} is not {BLOCK_MAGIC!r} (damaged or not a block)")
    if _crc(bytes(data[: HEADER_SIZE - 4])) != crc:
        raise BlockDamaged(f"{where}: block header fails its checksum (damaged)")
    if version != BLOCK_VERSION or size != HEADER_SIZE:
        raise BlockDamaged(f"{where}: block format version {version}; this traxfs reads version {BLOCK_VERSION}")
    return BlockHeader(*fields)


def frame_header(count: int, first_seq: int, ts_ms: int, length: int, pcrc: int) -> bytes:
    """A frame's header for a payload of ``length`` bytes whose crc32c is ``pcrc``."""
    raw = _FRAME.pack(FRAME_MAGIC, 0, count, first_seq, ts_ms, length, pcrc, 0)
    return raw[:-4] + _crc(raw[:-4]).to_bytes(4, "little")


def frames(data, start: int, used: int, where: str, verify: bool = True) -> list[Frame]:
    """The frames in ``data[start:used]`` (``start``: where a frame begins), each checked
    (header checksum; with ``verify`` the payload's too). Raises :class:`BlockDamaged` at the
    first that fails."""
    out = []
    at = start
    view = memoryview(data)
    while at < used:
        if at + FRAME_SIZE > used:
            raise BlockDamaged(f"{where}: frame header at byte {at} runs past the block's end {used} (damaged)")
        magic, _, count, first, ts, length, pcrc, hcrc = _FRAME.unpack_from(data, at)
        if magic != FRAME_MAGIC or _crc(view[at : at + FRAME_SIZE - 4]) != hcrc:
            raise BlockDamaged(f"{where}: frame header at byte {at} fails its checksum (damaged)")
        body = at + FRAME_SIZE
        if body + length > used:
            raise BlockDamaged(f"{where}: frame at byte {at} runs past the block's end {used} (damaged)")
        if verify and _crc(view[body : body + length]) != pcrc:
            raise BlockDamaged(f"{where}: records of the frame at byte {at} (sequence {first}..) fail their "
                               "checksum (damaged)")
        out.append(Frame(body, length, count, first, ts))
        at = body + length
    return out


def pages_for(record_bytes: int, block_size: int) -> int:
    """Pages of a block that can hold a frame of ``record_bytes`` (a whole number of blocks)."""
    need = HEADER_SIZE + FRAME_SIZE + record_bytes
    blocks = max(1, -(-need // block_size))
    return blocks * block_size // PAGE_SIZE


def line_offset(data, start: int, end: int, k: int) -> int:
    """Offset in ``data`` of line ``k`` of the whole lines in ``data[start:end]`` (``k`` = their
    count: ``end``)."""
    at = start
    for _ in range(k):
        at = data.find(b"\n", at, end) + 1
        if at == 0:
            raise BlockDamaged(f"a frame's payload holds fewer than {k} lines (damaged)")
    return at


class Block:
    """A block in memory: its bytes and frames. Positions in its records are "record offsets":
    byte offsets in the concatenation of its frames' payloads (the stream of its lines).

    A block read from the device is sealed and never changes. The queue's tail block is built
    here by :meth:`add` under the queue's lock, which readers of an unsealed block hold too."""

    __slots__ = ("qid", "ordinal", "page", "pages", "first_seq", "prev_end", "data", "used", "frames", "seqs",
                 "ros", "count", "payload", "first_ts", "last_ts", "sealed", "persisted", "open_crc")

    def __init__(self, qid: int, ordinal: int, page: int, pages: int, first_seq: int, prev_end: int, data,
                 used: int):
        self.qid, self.ordinal, self.page, self.pages = qid, ordinal, page, pages
        self.first_seq, self.prev_end = first_seq, prev_end
        self.data, self.used = data, used
        self.frames: list[Frame] = []
        self.seqs: list[int] = []  # each frame's first sequence number
        self.ros: list[int] = []  # each frame's first record offset
        self.count = self.payload = self.first_ts = self.last_ts = 0
        self.sealed = False
        self.persisted = 0  # bytes [0, persisted) written to the device
        self.open_crc: int | None = None  # the last frame's payload crc while more may merge into it

    # ----- building the tail --------------------------------------------------------------------
    @classmethod
    def new(cls, qid: int, ordinal: int, page: int, pages: int, first_seq: int, prev_end: int,
            created_ms: int) -> Block:
        data = bytearray(pages * PAGE_SIZE)
        data[:HEADER_SIZE] = BlockHeader(pages, qid, ordinal, first_seq, prev_end, created_ms).pack()
        b = cls(qid, ordinal, page, pages, first_seq, prev_end, data, HEADER_SIZE)
        b.first_ts = b.last_ts = created_ms  # its first records come with it (the time index keys on it)
        return b

    def reopened(self) -> Block:
        """A sealed block read back as the tail again (appends continue past ``used``)."""
        data = bytearray(self.pages * PAGE_SIZE)
        data[: self.used] = self.data
        b = Block(self.qid, self.ordinal, self.page, self.pages, self.first_seq, self.prev_end, data, self.used)
        b.frames, b.seqs, b.ros = list(self.frames), list(self.seqs), list(self.ros)
        b.count, b.payload, b.first_ts, b.last_ts = self.count, self.payload, self.first_ts, self.last_ts
        b.persisted = self.persisted
        return b

    def seal(self) -> None:
        """The block is full: it never changes again."""
        self.open_crc = None
        self.sealed = True

    def room(self, ts_ms: int) -> int:
        """Payload bytes the next chunk stamped ``ts_ms`` can have."""
        merge = self.open_crc is not None and self.last_ts == ts_ms
        return len(self.data) - self.used - (0 if merge else FRAME_SIZE)

    def add(self, src, start: int, end: int, count: int, ts_ms: int) -> None:
        """Append ``count`` whole lines ``src[start:end]`` stamped ``ts_ms`` (they fit: :meth:`room`)."""
        n = end - start
        data, seq = self.data, self.first_seq + self.count
        piece = memoryview(src)[start:end]  # (views: the bytes are copied once, into the block)
        if self.open_crc is not None and self.last_ts == ts_ms:  # the same millisecond: one frame
            f = self.frames[-1]
            data[self.used : self.used + n] = piece
            self.open_crc = _crc(piece, self.open_crc)
            f = self.frames[-1] = Frame(f.at, f.length + n, f.count + count, f.first_seq, ts_ms)
            data[f.at - FRAME_SIZE : f.at] = frame_header(f.count, f.first_seq, ts_ms, f.length, self.open_crc)
            self.used += n
        else:
            body = self.used + FRAME_SIZE
            data[body : body + n] = piece
            self.open_crc = _crc(piece)
            data[self.used : body] = frame_header(count, seq, ts_ms, n, self.open_crc)
            self.frames.append(Frame(body, n, count, seq, ts_ms))
            self.seqs.append(seq)
            self.ros.append(self.payload)
            self.used = body + n
        self.count += count
        self.payload += n
        self.last_ts = ts_ms

    def close_frame(self) -> None:
        """Nothing more merges into the last frame (its bytes are going to the device)."""
        self.open_crc = None

    # ----- reading ------------------------------------------------------------------------------
    @classmethod
    def load(cls, qid: int, first_seq: int, entry, data, where: str) -> Block:
        """A block read from the device, checked against its index ``entry`` (ordinal, pages,
        first sequence number, records and bytes): every frame up to ``entry.used`` verified."""
        head = parse_header(data, where)
        want = BlockHeader(entry.pages, qid, entry.ordinal, first_seq, entry.prev_end, head.created_ms)
        if head != want:
            raise BlockDamaged(f"{where}: block header {tuple(head)} disagrees with the index {tuple(want)}")
        b = cls(qid, entry.ordinal, entry.page, entry.pages, first_seq, entry.prev_end, data, entry.used)
        seq = first_seq
        for f in frames(data, HEADER_SIZE, entry.used, where):
            if f.first_seq != seq:
                raise BlockDamaged(f"{where}: frame at byte {f.at - FRAME_SIZE} starts at sequence {f.first_seq}, "
                                   f"expected {seq} (damaged)")
            b.frames.append(f)
            b.seqs.append(seq)
            b.ros.append(b.payload)
            b.payload += f.length
            seq += f.count
        b.count = seq - first_seq
        if b.count != entry.count or b.payload != entry.payload:
            raise BlockDamaged(f"{where}: block holds {b.count} records in {b.payload} bytes, the index says "
                               f"{entry.count} in {entry.payload} (damaged)")
        if b.frames:
            b.first_ts, b.last_ts = b.frames[0].ts_ms, b.frames[-1].ts_ms
        b.sealed = True
        b.persisted = entry.used
        return b

    @property
    def end_seq(self) -> int:
        return self.first_seq + self.count

    def copy(self, ro: int, stop: int) -> bytes:
        """Record bytes ``[ro, stop)`` of the block."""
        i = bisect_right(self.ros, ro) - 1
        parts = []
        while ro < stop:
            f = self.frames[i]
            at = f.at + ro - self.ros[i]
            n = min(f.at + f.length - at, stop - ro)
            parts.append(self.data[at : at + n])
            ro += n
            i += 1
        return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)

    def ro_of(self, seq: int) -> int:
        """The record offset where record ``seq`` starts (the payload's end for ``end_seq``)."""
        if seq >= self.end_seq:
            return self.payload
        i = max(0, bisect_right(self.seqs, seq) - 1)
        f = self.frames[i]
        return self.ros[i] + line_offset(self.data, f.at, f.at + f.length, seq - f.first_seq) - f.at

    def ts_from(self, ts_ms: int) -> int | None:
        """The first sequence number stamped ``ts_ms`` or later, None if none is."""
        for f in self.frames:
            if f.ts_ms >= ts_ms:
                return f.first_seq
        return None

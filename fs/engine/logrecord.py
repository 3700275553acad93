"""Log records: the on-disk (and in-buffer) format of one entry of the write-ahead log.

Header (64 bytes, little-endian), then the payload::

    crc       u32  crc32c of the record with crc and lsn fields skipped (see below)
    length    u32  total bytes, header + payload + padding to 8
    lsn       u64  the record's own LSN (its byte offset in the log)
    epoch     u32  the engine's open count when written
    type      u8   RecType
    flags     u8
    opcode    u16  operation (UPDATE, CLR, LOGICAL)
    xid       u64  transaction id (0 for none)
    prev_lsn  u64  previous record of the same transaction (0: none)
    page      u64  page the operation applies to (NO_PAGE for none)
    undo_next u64  CLR / LOGICAL: the next record of this transaction to undo
    plen      u32  payload bytes
    _pad      u32

Why the crc skips the LSN: the LSN is known only when the log buffer reserves space, which in
the consolidated buffer happens in parallel with other fills; the buffer writes the LSN into its
field, and a reader checks it against the record's position instead. A stale record left from
an earlier lap of the circular log fails that check; one from before a crash that happens to sit
where the new tail ends fails the epoch check (epochs never go down along the log); one from an
earlier ``mkfs`` of the same device fails the crc, whose seed is the log's random id.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import crc32c

HDR = struct.Struct("<IIQIBBHQQQQII")
_HEAD, _TAIL, _U32 = struct.Struct("<IIQ"), struct.Struct("<IBBHQQQQII"), struct.Struct("<I")  # HDR's parts
_PAD = bytes(8)
_crc32c = crc32c.crc32c
HEADER_SIZE = HDR.size  # 64
NO_PAGE = (1 << 64) - 1
MAX_PAYLOAD = 256 * 1024


class RecType(enum.IntEnum):
    UPDATE = 1  # redo + undo of one operation on one page (or logical undo only, page NO_PAGE)
    CLR = 2  # compensation: redo-only, undo_next says where undo continues
    COMMIT = 3
    ABORT = 4  # rollback has begun
    END = 5  # the transaction is finished (committed or fully rolled back)
    CHECKPOINT = 6  # payload: transaction table and dirty page table
    LOGICAL = 7  # closes a nested top action: logical undo opcode + args, undo_next skips the NTA
    DUMMY_CLR = 8  # closes a nested top action without a logical undo
    BEGIN_CHECKPOINT = 9  # a fuzzy checkpoint starts; analysis begins here
    PAGE_IMAGE = 10  # full image of a page at its first change since it was last written
    RAW_CLAIM = 11  # pages (first, count) now hold unlogged raw data: redo forgets their history


RAW_CLAIM = struct.Struct("<QI")  # payload of a RAW_CLAIM record: first page, count


class LogCorrupt(Exception):
    """A record failed validation where one was required (not merely the end of the log)."""


@dataclass(frozen=True)
class LogRecord:
    lsn: int
    type: int
    xid: int = 0
    prev_lsn: int = 0
    page: int = NO_PAGE
    opcode: int = 0
    undo_next: int = 0
    payload: bytes = b""
    epoch: int = 0
    length: int = 0

    @property
    def end(self) -> int:
        return self.lsn + self.length


def encode(rtype: int, xid: int, prev_lsn: int, page: int, opcode: int, undo_next: int, payload: bytes,
           epoch: int, seed: int) -> bytes:
    """A record ready for the log buffer; its LSN field is zero until the buffer fills it."""
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"log record payload of {len(payload)} bytes exceeds the limit of {MAX_PAYLOAD}")
    plen = len(payload)
    total = (HEADER_SIZE + plen + 7) & ~7
    tail = _TAIL.pack(epoch, rtype, 0, opcode, xid, prev_lsn, page, undo_next, plen, 0) + payload
    if total != HEADER_SIZE + plen:
        tail += _PAD[: total - HEADER_SIZE - plen]
    crc = _crc32c(tail, _crc32c(_U32.pack(total), seed))  # = _crc of the whole record
    return _HEAD.pack(crc, total, 0) + tail


def _crc(buf: bytes | bytearray | memoryview, seed: int) -> int:
    return crc32c.crc32c(buf[16:], crc32c.crc32c(buf[4:8], seed))


def decode(buf: bytes | memoryview, lsn: int, seed: int, min_epoch: int = 0) -> LogRecord | None:
    """Parse the record at ``lsn`` from ``buf`` (which starts at it); None if there is no valid
    record there — the end of the log."""
    if len(buf) < HEADER_SIZE:
        return None
    crc, length, own, epoch, rtype, _flags, opcode, xid, prev, page, undo_next, plen, _ = HDR.unpack_from(buf)
    if length < HEADER_SIZE or length % 8 or length > len(buf) or own != lsn or epoch < min_epoch:
        return None
    if plen > length - HEADER_SIZE or _crc(memoryview(buf)[:length], seed) != crc:
        return None
    return LogRecord(lsn, rtype, xid, prev, page, opcode, undo_next,
                     bytes(buf[HEADER_SIZE : HEADER_SIZE + plen]), epoch, length)


def why_invalid(buf: bytes | memoryview, lsn: int, seed: int, min_epoch: int = 0) -> str:
    """Why there is no valid record at ``lsn`` (for reporting where the log ends)."""
    if len(buf) < HEADER_SIZE:
        return "end of the log region"
    crc, length, own, epoch, *_ = HDR.unpack_from(buf)
    if not any(bytes(buf[:HEADER_SIZE])):
        return "unwritten (zeros)"
    if own != lsn:
        return f"stale record (it says LSN {own})"
    if length < HEADER_SIZE or length % 8 or length > len(buf):
        return f"bad length {length}"
    if epoch < min_epoch:
        return f"older epoch {epoch} < {min_epoch} (left from before a crash)"
    return "checksum mismatch (torn or damaged record)"


def peek_length(buf: bytes | memoryview) -> int:
    return struct.unpack_from("<I", buf, 4)[0]

"""The queue store's records in engine B+trees (catalog names ``btree:q.NAME``).

==========  ===========================================  ==============================================
tree        key                                          value
==========  ===========================================  ==============================================
queues      name                                         :class:`QueueRecord`: id, creation time,
                                                         sequence numbers reserved, settings
            ``\\0next``                                   the next queue id
            ``\\0doomed`` + id                            a removed queue whose blocks are still
                                                         being freed
            ``\\0frozen`` + epoch + name                  :class:`FrozenQueue`: the queue as a
                                                         filesystem snapshot froze it
blocks      queue id + first sequence number             :class:`BlockEntry`: where the block is and
                                                         how much of it the log vouches for
times       queue id + first timestamp (ms) + first seq  empty: the time index, one entry per block
views       queue id + view name                         head (next sequence number to read),
                                                         creation time
segments    queue id + first sequence number             end (exclusive), records, bytes, seal time
==========  ===========================================  ==============================================

Keys are big-endian, so a queue's entries are adjacent and in sequence (or time) order. Names
cannot hold NUL, so the ``\\0`` keys never collide with one.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .config import QueueConfig

TREES = ("queues", "blocks", "times", "views", "segments")
PREFIX = "q"
RECORD_VERSION = 1
U64 = struct.Struct(">Q")
U64X2 = struct.Struct(">QQ")
U64X3 = struct.Struct(">QQQ")
KEY_NEXT_ID = b"\0next"
DOOMED = b"\0doomed"
FROZEN = b"\0frozen"
_FROZEN = struct.Struct("<BQQQ")
_QUEUE = struct.Struct("<BQQQ")
_BLOCK = struct.Struct("<QQIIIIQQQ")
_VIEW = struct.Struct("<QQ")
_SEGMENT = struct.Struct("<QQQQ")
MAX_SEQ = (1 << 64) - 1


class QueueRecord(NamedTuple):
    qid: int
    created_ms: int
    reserved: int  # sequence numbers below this may have been handed out: never reused
    config: QueueConfig

    def pack(self) -> bytes:
        return _QUEUE.pack(RECORD_VERSION, self.qid, self.created_ms, self.reserved) + self.config.pack()

    @classmethod
    def unpack(cls, raw: bytes, where: str) -> QueueRecord:
        if not raw or raw[0] != RECORD_VERSION:
            raise ValueError(f"{where}: queue record version {raw[:1].hex() or 'missing'}; this traxfs reads "
                             f"version {RECORD_VERSION}")
        _, qid, created, reserved = _QUEUE.unpack_from(raw)
        return cls(qid, created, reserved, QueueConfig.unpack(raw[_QUEUE.size :]))


class BlockEntry(NamedTuple):
    ordinal: int  # 0, 1, 2, ... in the queue's chain of blocks
    page: int  # first engine page
    pages: int
    count: int  # records the log vouches for ...
    used: int  # ... in the block's bytes [0, used) (0: nothing written yet)
    payload: int  # bytes of those records
    first_ts: int  # ms
    last_ts: int
    prev_end: int  # the queue's end before this block (its first sequence number unless a crash skipped)

    def pack(self) -> bytes:
        return _BLOCK.pack(*self)

    @classmethod
    def unpack(cls, raw: bytes) -> BlockEntry:
        return cls(*_BLOCK.unpack(raw))


class ViewRecord(NamedTuple):
    head: int
    created_ms: int

    def pack(self) -> bytes:
        return _VIEW.pack(*self)

    @classmethod
    def unpack(cls, raw: bytes) -> ViewRecord:
        return cls(*_VIEW.unpack(raw))


class SegmentRecord(NamedTuple):
    end: int  # exclusive
    count: int
    size: int  # bytes
    sealed_ms: int

    def pack(self) -> bytes:
        return _SEGMENT.pack(*self)

    @classmethod
    def unpack(cls, raw: bytes) -> SegmentRecord:
        return cls(*_SEGMENT.unpack(raw))


def seq_key(qid: int, seq: int) -> bytes:
    return U64X2.pack(qid, seq)


def time_key(qid: int, ts_ms: int, seq: int) -> bytes:
    return U64X3.pack(qid, ts_ms, seq)


def view_key(qid: int, name: bytes) -> bytes:
    return U64.pack(qid) + name


def queue_range(qid: int) -> tuple[bytes, bytes]:
    """(start, stop) of every key of queue ``qid``."""
    return U64.pack(qid), U64.pack(qid + 1)


def key_seq(key: bytes) -> int:
    """The sequence number of a ``blocks`` or ``segments`` key."""
    return U64X2.unpack(key)[1]


class FrozenQueue(NamedTuple):
    """A queue as a snapshot froze it: its id, its oldest retained record then, where its open
    segment started then (the sealed segments are those from ``first_seq`` up to there), and
    its status document then."""

    qid: int
    first_seq: int
    sealed_end: int
    status: bytes

    def pack(self) -> bytes:
        return _FROZEN.pack(RECORD_VERSION, self.qid, self.first_seq, self.sealed_end) + self.status

    @classmethod
    def unpack(cls, raw: bytes, where: str) -> FrozenQueue:
        if not raw or raw[0] != RECORD_VERSION:
            raise ValueError(f"{where}: frozen queue record version {raw[:1].hex() or 'missing'}; this traxfs "
                             f"reads version {RECORD_VERSION}")
        _, qid, first, end = _FROZEN.unpack_from(raw)
        return cls(qid, first, end, bytes(raw[_FROZEN.size :]))


def frozen_key(epoch: int, name: bytes) -> bytes:
    return FROZEN + U64.pack(epoch) + name

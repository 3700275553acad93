"""Reading records: a view's stream from its head, and a sealed segment's bytes at any offset.

A :class:`Reader` serves the records from a sequence number on as one byte stream, in order,
up to the live end at the moment of each read (a later read continues with what was appended
meanwhile). It pins the records it still needs, so reclaim never frees a block under it, and
asks the cache to read ahead of it. A :class:`SegmentReader` serves a sealed segment, whose
records and size never change, at any offset (Spark reads splits of files), pinning its first
record while open.
"""

from __future__ import annotations

import errno
from bisect import bisect_right

from ..errors import FsError
from .block import Block
from .index import BlockEntry, SegmentRecord, key_seq, queue_range, seq_key

READ_AHEAD = 4  # blocks loaded ahead of a reader


class Reader:
    def __init__(self, queue, seq: int):
        self.q = queue
        self.pin = queue.pin(seq)
        self.seq = queue.pins[self.pin]  # the record at the cursor (or the one being cut by the last read)
        self.block: Block | None = None
        self.ro = 0  # record offset in ``block``
        self.served = 0  # bytes served so far (the stream's offset)

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes of the stream; fewer (b"" at the live end) when caught up."""
        q = self.q
        parts, got = [], 0
        while got < size:
            b = self.block
            if b is None:
                b = self._enter(q.block_at(self.seq))
                if b is None:
                    break
            if b.sealed:
                chunk = b.copy(self.ro, min(b.payload, self.ro + size - got))
            else:
                with q.lock:
                    chunk = b.copy(self.ro, min(b.payload, self.ro + size - got))
            if not chunk:
                if not b.sealed and (q.tail is b or q.removed):
                    break  # at the live end
                nxt = q._next_block(b.first_seq)
                if nxt is None:
                    break
                self._enter(nxt)
                continue
            parts.append(chunk)
            got += len(chunk)
            self.ro += len(chunk)
            self.seq += chunk.count(b"\n")
        if got:
            self.served += got
            with q.lock:
                if self.pin in q.pins:
                    q.pins[self.pin] = self.seq
            q.stats["reads"] += 1
            q.stats["read_bytes"] += got
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _enter(self, b: Block | None) -> Block | None:
        if b is None:
            return None
        self.block = b
        if b.first_seq > self.seq:  # numbers a crash skipped
            self.seq = b.first_seq
        if self.seq == b.first_seq:
            self.ro = 0
        elif b.sealed:
            self.ro = b.ro_of(self.seq)
        else:
            with self.q.lock:
                self.ro = b.ro_of(self.seq)
        if b.sealed:
            self.q.prefetch_after(b.first_seq, READ_AHEAD)
        return b

    def close(self) -> None:
        self.q.unpin(self.pin)


class SegmentReader:
    def __init__(self, queue, first: int):
        raw = queue.t["segments"].get(seq_key(queue.qid, first))
        if raw is None:
            raise FsError(errno.ENOENT, f"{queue.where}: no segment starts at sequence {first}")
        self.q, self.first = queue, first
        self.rec = SegmentRecord.unpack(raw)
        self.pin = queue.pin(first)
        self._layout: list[tuple[int, int, int, int]] | None = None  # (segment offset, block, ro from, ro to)
        self._starts: list[int] = []

    @property
    def size(self) -> int:
        return self.rec.size

    def _plan(self) -> None:
        """Where each block's share of the segment is: the first and last block are read to find
        the record offsets of its ends; the others are whole, by the index."""
        q, first, end = self.q, self.first, self.rec.end
        out, at = [], 0
        lo = q.block_at(first).first_seq
        for key, raw in q.t["blocks"].items(seq_key(q.qid, lo), queue_range(q.qid)[1]):
            bfirst, e = key_seq(key), BlockEntry.unpack(raw)
            if bfirst >= end:
                break
            whole = bfirst >= first and bfirst + e.count <= end
            if whole:
                ro0, ro1 = 0, e.payload
            else:
                b = q._block(bfirst, e)
                ro0 = b.ro_of(first) if bfirst < first else 0
                ro1 = b.ro_of(end) if end < b.end_seq else b.payload
            out.append((at, bfirst, ro0, ro1))
            at += ro1 - ro0
        if at != self.rec.size:
            raise FsError(errno.EIO, f"{q.where}: segment {first}..{end - 1} should hold {self.rec.size} bytes, its "
                                     f"blocks hold {at} (damaged)")
        self._layout, self._starts = out, [o for o, *_ in out]

    def read(self, off: int, size: int) -> bytes:
        if off >= self.rec.size or size <= 0:
            return b""
        if self._layout is None:
            self._plan()
        stop = min(self.rec.size, off + size)
        i = bisect_right(self._starts, off) - 1
        parts = []
        while off < stop:
            at, bfirst, ro0, ro1 = self._layout[i]
            b = self.q._block(bfirst)
            lo = ro0 + off - at
            hi = min(ro1, ro0 + stop - at)
            parts.append(b.copy(lo, hi) if b.sealed else self._copy_locked(b, lo, hi))
            off += hi - lo
            i += 1
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _copy_locked(self, b: Block, lo: int, hi: int) -> bytes:
        with self.q.lock:
            return b.copy(lo, hi)

    def close(self) -> None:
        self.q.unpin(self.pin)

"""The log's home on the volume: a circular region addressed by LSN.

LSN ``L`` lives at byte ``offset + L % size`` of the region. The log manager never writes past
``trunc_lsn + size`` (that would overwrite records recovery may still need); the engine moves
``trunc_lsn`` forward at checkpoints. Stasis' log file layer has four operations — read at
offset, append, truncate, force — and so does this one (truncation is the engine's
``trunc_lsn``, recorded in its superblock).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator

from ...ext.logwriter import DirectLogWriter
from ...volume.contract import DeviceContract
from .logrecord import HEADER_SIZE, LogCorrupt, LogRecord, decode, peek_length, why_invalid

SCAN_CHUNK = 1 << 20
log = logging.getLogger("traxfs.engine")
FIRST_LSN = 4096  # where a freshly formatted log starts (LSN 0 means "none")


class LogStore:
    def __init__(self, dev: DeviceContract, offset: int, size: int, seed: int):
        if size % 4096 or size < 1 << 20:
            raise ValueError(f"log region of {size} bytes: must be a multiple of 4096 and at least 1 MiB")
        self.dev, self.offset, self.size, self.seed = dev, offset, size, seed
        self.scan_stop = ""  # why the last scan ended where it did
        self._tail: tuple[int, bytes] = (-1, b"")  # (LSN of the last partial sector, its bytes)
        self._sector = max(dev.block_size, 512)
        # the GIL-free path (``DirectLogWriter``), made at the first append when the device
        # offers an O_DIRECT|O_DSYNC descriptor; False: not offered, or refused once
        self._direct: object | None = None

    def append_from(self, buffer, start: int, end: int) -> None:
        """Write log bytes [start, end) of the log buffer ``buffer`` durably: straight from the
        ring to the device without the GIL when the device offers a direct descriptor
        (``traxfs.ext.logwriter.DirectLogWriter``), otherwise through :meth:`append_durable`."""
        if self._direct is None:
            fd = self.dev.direct_sync_fd()
            if fd is None or self.offset % self._sector or self._sector > 4096:
                self._direct = False
            else:
                self._direct = DirectLogWriter(fd, self.offset, self.size, self._sector, buffer.capacity)
                self._tail = (-1, b"")
        if self._direct:
            try:
                self._direct.append(buffer, start, end)
                return
            except OSError as e:
                if e.errno != errno.EINVAL:  # a real I/O error: the caller must hear of it
                    raise
                self._direct = False  # the filesystem wants another alignment: the Python path
                self.dev.refuse_direct()
        self.append_durable(start, buffer.read(start, end))

    def flush_path(self) -> str:
        """How appends reach the device: "direct" (C, no GIL), "python", or "undecided" (none yet)."""
        return "undecided" if self._direct is None else "direct" if self._direct else "python"

    def _spans(self, lsn: int, n: int) -> list[tuple[int, int, int]]:
        """(device offset, bytes, offset in data) pieces of [lsn, lsn+n), split at the wrap."""
        pos = lsn % self.size
        first = min(n, self.size - pos)
        spans = [(self.offset + pos, first, 0)]
        if first < n:
            spans.append((self.offset, n - first, first))
        return spans

    def write(self, lsn: int, data: bytes | memoryview) -> None:
        view = memoryview(data)
        if len(view) > self.size:
            raise ValueError("write larger than the log region")
        for dev_off, n, at in self._spans(lsn, len(view)):
            self.dev.write(dev_off, view[at : at + n])

    def append_durable(self, lsn: int, data: bytes) -> None:
        """Write the log bytes ``data`` at ``lsn`` and make them durable, as whole sectors with
        one durable write per span (``Device.write_durable``: O_DIRECT|O_DSYNC on an image file,
        one device round trip instead of a buffered write plus fdatasync). The first sector's
        bytes before ``lsn`` were appended last time (kept in ``_tail``); the last sector is padded
        with zeros, which only ever replace bytes past the log's end. Rewriting a durable prefix
        is safe against torn writes: every version of that sector holds the same prefix."""
        sector = self._sector
        start = lsn - lsn % sector
        if self._tail[0] == start and len(self._tail[1]) == lsn - start:
            head = self._tail[1]
        else:
            head = self.read(start, lsn - start) if lsn > start else b""
        end = lsn + len(data)
        whole = head + data
        cut = end - end % sector
        self._tail = (cut, whole[cut - start :])
        whole += bytes(-len(whole) % sector)
        if len(whole) > self.size:
            raise ValueError("write larger than the log region")
        view = memoryview(whole)
        for dev_off, n, at in self._spans(start, len(whole)):
            self.dev.write_durable(dev_off, view[at : at + n])

    def read(self, lsn: int, n: int) -> bytes:
        n = min(n, self.size)
        return b"".join(self.dev.read(dev_off, k) for dev_off, k, _ in self._spans(lsn, n))

    def sync(self) -> None:
        self.dev.flush()

    def read_record(self, lsn: int) -> LogRecord:
        """The record at ``lsn``, which must exist (it is on a transaction's undo chain)."""
        head = self.read(lsn, HEADER_SIZE)
        rec = decode(self.read(lsn, max(peek_length(head), HEADER_SIZE)), lsn, self.seed)
        if rec is None:
            rec = self._record_from_copies(lsn, 0)
        if rec is None:
            raise LogCorrupt(f"log record at LSN {lsn} is missing or damaged")
        return rec

    def _copies(self, lsn: int, n: int) -> dict[int, bytes]:
        """Every copy (a mirror's legs) of log bytes [lsn, lsn+n): leg -> bytes."""
        parts: dict[int, list[bytes]] = {}
        for dev_off, k, _ in self._spans(lsn, n):
            for leg, data in self.dev.read_copies(dev_off, k):
                parts.setdefault(leg, []).append(data)
        return {leg: b"".join(p) for leg, p in parts.items()}

    def _record_from_copies(self, lsn: int, epoch: int) -> LogRecord | None:
        """The record at ``lsn`` from another copy of the log when the copy read failed its
        check (a mirror whose leg is damaged there): the first copy that decodes, written over
        the copies that differ. None if there is no other copy or none decodes — the log's end."""
        heads = self._copies(lsn, HEADER_SIZE)
        if len(heads) < 2:  # one copy: the read that failed was the only one there is
            return None
        for leg, head in heads.items():
            need = peek_length(head[:8])
            if not HEADER_SIZE <= need <= self.size:
                continue
            copies = self._copies(lsn, need)
            rec = decode(copies.get(leg, b""), lsn, self.seed, epoch)
            if rec is None:
                continue
            for other, data in copies.items():
                if data != copies[leg]:
                    for dev_off, k, at in self._spans(lsn, need):
                        self.dev.repair_copy(other, dev_off, copies[leg][at : at + k])
                    log.warning("log record at LSN %d: leg %d held a damaged copy; rewritten from leg %d",
                                lsn, other, leg)
            return rec
        return None

    def scan(self, start: int) -> Iterator[LogRecord]:
        """Records from ``start`` up to the first gap (invalid, torn, stale or older-epoch record)."""
        lsn, epoch, limit = start, 0, start + self.size
        buf, buf_lsn = b"", start
        while lsn < limit:
            rel = lsn - buf_lsn
            if len(buf) - rel < HEADER_SIZE or len(buf) - rel < peek_length(buf[rel : rel + 8].ljust(8, b"\0")):
                buf_lsn, rel = lsn, 0
                buf = self.read(lsn, min(SCAN_CHUNK, limit - lsn))
                need = peek_length(buf[:8]) if len(buf) >= 8 else 0
                if HEADER_SIZE <= need <= limit - lsn and need > len(buf):
                    buf = self.read(lsn, need)
            rec = decode(memoryview(buf)[rel:], lsn, self.seed, epoch)
            if rec is None:
                rec = self._record_from_copies(lsn, epoch)
            if rec is None:
                self.scan_stop = f"LSN {lsn}: {why_invalid(memoryview(buf)[rel:], lsn, self.seed, epoch)}"
                return
            yield rec
            epoch = rec.epoch
            lsn = rec.end

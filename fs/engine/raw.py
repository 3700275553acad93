"""Raw pages: the engine's page area used without page headers, for bytes written outside the log.

File data lives in engine pages used raw: the allocation of a region is logged (and so are the
records that make it reachable), its bytes are not. The filesystem's data path reads, writes,
checks and repairs those bytes through this object (``engine.raw``), never through the device
itself, so where the page area sits on the device stays the engine's business.

Positions are byte offsets into the page area: page ``p`` starts at ``p * PAGE_SIZE``. Every
access must stay inside the page area.

Quadrangles. On a volume with Atropos quadrangles a page has *equivalents*: the pages at the same
place in the other blocks of its quadrangle column, one track apart, which the disk reads one
after another with only a head switch between them (``DeviceContract.equivalent``); several
ranges read together go to the device as one batch (``read_batch``). On any other device a page
is its only equivalent and a batch is the reads one after another — the same calls, no gain.

Ordering is the caller's: a write here is durable only after :meth:`flush`, and a caller whose
log records describe these bytes flushes them first (a log barrier, ``Engine.add_log_barrier``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ...volume.contract import Bytes, DeviceContract
from .copies import good_copy
from .page import PAGE_SIZE


class QuadRows(NamedTuple):
    """The track rows of a quadrangle volume in page-area pages: a row (one track on each of
    the p disks) is ``pages`` pages and starts at a page ``q`` with ``q % pages == phase``; the
    same place of ``depth`` consecutive rows is one semi-sequential set."""

    depth: int
    pages: int
    phase: int


class RawPages:
    def __init__(self, dev: DeviceContract, pages_offset: int, page_count: int, claim: Callable[[int, int], None],
                 name: str):
        self._dev, self._base, self._claim, self.name = dev, pages_offset, claim, name
        self._end = page_count * PAGE_SIZE
        self.track_pages = _track_pages(dev, pages_offset)
        self.quad_rows = _quad_rows(dev, pages_offset)

    def _at(self, pos: int, length: int) -> int:
        """The device offset of page-area bytes ``[pos, pos+length)``, refusing any outside it."""
        if pos < 0 or length < 0 or pos + length > self._end:
            raise ValueError(f"{self.name}: raw access [{pos}, {pos + length}) outside the page area "
                             f"(0..{self._end})")
        return self._base + pos

    def claim(self, first: int, count: int) -> None:
        """Pages ``first .. first+count-1``, just allocated by the caller's transaction, are
        about to receive raw bytes: the engine drops their frames and logs that redo must
        forget their history (a RAW_CLAIM record), so no older structure page is ever written
        back over the raw bytes."""
        self._claim(first, count)

    def read(self, pos: int, length: int) -> bytes:
        return self._dev.read(self._at(pos, length), length)

    def readinto(self, pos: int, views: list[memoryview]) -> None:
        """Fill ``views`` from consecutive bytes starting at ``pos``."""
        self._dev.readinto(self._at(pos, sum(len(v) for v in views)), views)

    def read_batch(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of each (pos, length) range of the page area, read as one batch (on a
        quadrangle volume: one semi-sequential batch per disk for a page's equivalents)."""
        return self._dev.read_batch([(self._at(pos, n), n) for pos, n in ranges])

    def equivalents(self, page: int) -> list[int]:
        """The pages whose bytes lie at the same place in the blocks of ``page``'s quadrangle
        column (``page`` among them), ascending: reading one of each is one semi-sequential
        batch. ``[page]`` where the device has no quadrangles, or where the page does not lie
        whole inside one block at a page-aligned place of each of them."""
        at = self._at(page * PAGE_SIZE, PAGE_SIZE)
        first = self._dev.equivalent(at // 512)
        last = self._dev.equivalent((at + PAGE_SIZE) // 512 - 1)
        span = PAGE_SIZE // 512 - 1
        if len(first) < 2 or tuple(x + span for x in first) != last:
            return [page]
        out = []
        for lbn in first:
            pos = lbn * 512 - self._base
            if pos % PAGE_SIZE or not 0 <= pos <= self._end - PAGE_SIZE:
                return [page]
            out.append(pos // PAGE_SIZE)
        return out

    def write(self, pos: int, data: Bytes) -> None:
        self._dev.write(self._at(pos, len(data)), data)

    def writev(self, pos: int, views: list[memoryview]) -> None:
        """Write ``views`` to consecutive bytes starting at ``pos``."""
        self._dev.writev(self._at(pos, sum(len(v) for v in views)), views)

    def locate(self, pos: int, length: int) -> tuple[str, int, list[tuple[int, str, int, int, int]]]:
        """Where page-area bytes live: the volume's name, their offset on it, and the device
        pieces (``DeviceContract.locate``)."""
        at = self._at(pos, length)
        return self._dev.path, at, self._dev.locate(at, length)

    def track(self, pos: int) -> int | None:
        """The volume's track (stripe unit) holding page-area byte ``pos``; None on a volume
        without geometry (``boundaries`` answers single sectors)."""
        first, count = self._dev.boundaries(self._at(pos, 1) // 512)
        return first // count if count > 1 else None

    def flush(self) -> None:
        """Make every raw write completed so far durable (flushes the device)."""
        self._dev.flush()

    def copies(self, pos: int, length: int) -> list[tuple[int, bytes]]:
        """Every copy of the bytes (one per in-sync leg of a mirror; one otherwise)."""
        return self._dev.read_copies(self._at(pos, length), length)

    def repair_copy(self, leg: int, pos: int, data: Bytes) -> None:
        """Rewrite copy ``leg`` only, with bytes another copy holds."""
        self._dev.repair_copy(leg, self._at(pos, len(data)), data)

    def good_copy(self, pos: int, length: int, ok: Callable[[bytes], bool],
                  what: str) -> tuple[bytes, list[int]] | None:
        """A copy of the bytes that passes ``ok`` (the copies that differ rewritten with it) and
        the legs rewritten; None if no copy passes (``traxfs.fs.engine.copies``)."""
        return good_copy(self._dev, self._at(pos, length), length, ok, what)


def _track_pages(dev: DeviceContract, pages_offset: int) -> int:
    """Pages per track (stripe unit) when tracks are page-aligned in the page area, else 1: an
    allocation of at least this many pages starts on a track boundary."""
    _, count = dev.boundaries(0)
    unit = count * 512
    if unit % PAGE_SIZE or pages_offset % unit:
        return 1
    return unit // PAGE_SIZE


def _quad_rows(dev: DeviceContract, pages_offset: int) -> QuadRows | None:
    """The device's quadrangle rows in pages, when it has quadrangles and its rows start on page
    boundaries of the page area; None otherwise (a flat device, a traxtent volume)."""
    eq = dev.equivalent(pages_offset // 512)
    if len(eq) < 2 or pages_offset % 512:
        return None
    row = (eq[1] - eq[0]) * 512  # bytes of one row (p·w blocks): the set's spacing
    phase = -pages_offset % row
    if row % PAGE_SIZE or phase % PAGE_SIZE:
        return None
    return QuadRows(len(eq), row // PAGE_SIZE, phase // PAGE_SIZE)

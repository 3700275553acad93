"""Mapping a logical byte range of one leg to device pieces.

A leg is a list of segments; a segment stripes its logical extents over ``k`` areas in units of
``stripe_unit`` bytes: unit ``c`` of the segment lives in area ``c % k`` at row ``c // k``.
With ``k = 1`` this is concatenation (linear). Pieces that continue one another on the same
device are merged, so a large request becomes one I/O per device per segment. Zoned volumes
map through :mod:`~traxfs.volume.layout.quadrangle` instead, into the same pieces and runs.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from ..model import Segment


@dataclass(frozen=True)
class Run:
    """Pieces that are contiguous on one device: one vectored I/O (preadv/pwritev)."""

    pv: str
    dev_offset: int
    parts: list[tuple[int, int]]  # (buf_offset, length), in device order


@dataclass(frozen=True)
class Piece:
    pv: str  # device (PV uuid)
    dev_offset: int  # byte offset on the device
    buf_offset: int  # byte offset inside the request
    length: int


class LegMap:
    def __init__(self, segments: list[Segment], extent_size: int, stripe_unit: int,
                 pe_start: dict[str, int]):
        self.segments = segments
        self.extent_size = extent_size
        self.unit = stripe_unit
        self.pe_start = pe_start
        self.starts = [s.le * extent_size for s in segments]
        self.size = sum(s.count for s in segments) * extent_size

    def segment_at(self, offset: int) -> tuple[Segment, int]:
        i = bisect.bisect_right(self.starts, offset) - 1
        return self.segments[i], self.starts[i]

    def pieces(self, offset: int, length: int) -> list[Piece]:
        out: list[Piece] = []
        pos, end = offset, offset + length
        while pos < end:
            seg, seg_start = self.segment_at(pos)
            seg_end = seg_start + seg.count * self.extent_size
            k, unit = seg.stripes, self.unit
            rel = pos - seg_start
            if k == 1:
                n = min(end, seg_end) - pos
                area = seg.areas[0]
                dev = self.pe_start[area.pv] + area.pe * self.extent_size + rel
            else:
                chunk, within = divmod(rel, unit)
                row, col = divmod(chunk, k)
                area = seg.areas[col]
                n = min(unit - within, end - pos)
                dev = self.pe_start[area.pv] + area.pe * self.extent_size + row * unit + within
            last = out[-1] if out else None
            if last and last.pv == area.pv and last.dev_offset + last.length == dev \
                    and last.buf_offset + last.length == pos - offset:
                out[-1] = Piece(area.pv, last.dev_offset, last.buf_offset, last.length + n)
            else:
                out.append(Piece(area.pv, dev, pos - offset, n))
            pos += n
        return out

    def runs(self, offset: int, length: int) -> list[Run]:
        """The per-device runs of [offset, offset+length), built column by column (no object
        per stripe unit): what I/O uses. Equal to ``runs(self.pieces(...))`` within a segment;
        runs are not merged across segments."""
        out: list[Run] = []
        pos, end = offset, offset + length
        es, unit = self.extent_size, self.unit
        while pos < end:
            seg, seg_start = self.segment_at(pos)
            seg_end = min(end, seg_start + seg.count * es)
            if seg.stripes == 1:
                a = seg.areas[0]
                out.append(Run(a.pv, self.pe_start[a.pv] + a.pe * es + pos - seg_start, [(pos - offset, seg_end - pos)]))
                pos = seg_end
                continue
            cols: dict[int, Run] = {}
            rel, rel_end = pos - seg_start, seg_end - seg_start
            while rel < rel_end:
                chunk, within = divmod(rel, unit)
                row, col = divmod(chunk, seg.stripes)
                n = min(unit - within, rel_end - rel)
                run = cols.get(col)
                if run is None:
                    a = seg.areas[col]
                    run = cols[col] = Run(a.pv, self.pe_start[a.pv] + a.pe * es + row * unit + within, [])
                    out.append(run)
                run.parts.append((seg_start + rel - offset, n))
                rel += n
            pos = seg_end
        return out

    def row(self, offset: int) -> tuple[int, int]:
        """The stripe row (one unit on every stripe) around ``offset``: (start, length) in bytes."""
        seg, seg_start = self.segment_at(offset)
        width = self.unit * seg.stripes
        start = seg_start + (offset - seg_start) // width * width
        return start, width


def runs(pieces: list[Piece]) -> list[Run]:
    """Group pieces into per-device runs that are contiguous on the device."""
    open_runs: dict[tuple[str, int], Run] = {}  # (pv, next device offset) -> run
    out: list[Run] = []
    for p in pieces:
        run = open_runs.pop((p.pv, p.dev_offset), None)
        if run is None:
            run = Run(p.pv, p.dev_offset, [])
            out.append(run)
        run.parts.append((p.buf_offset, p.length))
        open_runs[(p.pv, p.dev_offset + p.length)] = run
    return out

"""The quadrangle mapping: logical blocks (VLBNs) of a zoned volume → (disk, DLBN) (Atropos §3).

A VLBN is ``b`` sectors. A **quadrangle** is ``d`` track rows of ``w = N // b`` VLBNs on one disk;
a **quadrangle stripe** is one quadrangle on each of the ``p`` disks, ``G = p·w·d`` VLBNs:

    s = v // G          stripe;   r = v % G
    i = r // (p·w)      row (track) inside the quadrangle
    k, j = divmod(r % (p·w), w)     quadrangle (disk column) and column inside the row
    disk = (k + s) % p  quadrangles rotate over the disks from stripe to stripe
    DLBN = row_start(disk, s, i) + ((i + j) % w)·b

Contiguous VLBNs fill one row (track) on each disk in turn — the traxtent stripe unit — so a
large request becomes parallel track-sized I/Os. VLBNs ``p·w`` apart (the other major order) go
down the rows of one quadrangle, each shifted one block further along its track: with the track
skew H, block ``i`` sits ``i·(b + H)`` sectors of rotation after block 0 (R more past the point
where ``i + j`` wraps around ``w``; the cylinder skew instead of H where the quadrangle crosses a
cylinder), so the ``d`` of them are read one after another with only a head switch between them
(semi-sequential).

``row_start`` comes from the disk's **usable** tracks of the volume's zone inside the allocated
extents: whole tracks that hold at least ``w·b`` LBNs (at most R slipped defects). A track with
more defects, or one cut by an extent boundary, is skipped, so row starts are looked up in a
list (computed from the PV's disk description, never stored) instead of being ``Q + i·N``. A
zoned ``traxtent`` volume is the case ``d = 1, b = 1``: rows are whole tracks of N sectors, and
any defect makes a track unusable.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass

from ..disk.geometry import SECTOR, DiskGeometry
from ..model import Quadrangle, Segment, VolumeGroupMeta
from .mapping import Piece, Run


def geometries(vg: VolumeGroupMeta, pvs: set[str] | list[str]) -> dict[str, DiskGeometry]:
    """Each device's tracks, from the disk description its PV carries."""
    return {p: DiskGeometry(vg.pv(p).geometry.disk_spec()) for p in pvs}


def usable_rows(geometry: DiskGeometry, zone: int, first_lbn: int, end_lbn: int, row_sectors: int,
                depth: int = 1) -> list[int]:
    """First LBNs of the tracks of ``zone`` that lie wholly inside ``[first_lbn, end_lbn)`` and
    hold at least ``row_sectors`` LBNs, ascending, in groups of ``depth``: entry ``s·d + i`` is
    row ``i`` of the ``s``-th quadrangle.

    A group is ``depth`` physically consecutive tracks — the diagonal rides on one head switch
    (skew H) from each row to the next, so a skipped track inside a group would cost a second
    skew — and, when a cylinder has room for it (``depth`` ≤ surfaces), tracks of one cylinder:
    a cylinder switch costs more than H (its larger skew), and a diagonal that crossed one would
    miss its next block by the difference and lose a revolution. Tracks that cannot complete a
    group are left unused."""
    tracks = geometry.zone_tracks(zone)
    lo = max(first_lbn, geometry.track_start(tracks.start))
    hi = min(end_lbn, geometry.track_start(tracks.stop))
    if lo >= hi:
        return []
    t = geometry.track_of(lo)
    if geometry.track_start(t) < lo:
        t += 1
    in_cylinder = depth <= geometry.surfaces
    out: list[int] = []
    group: list[int] = []
    while t < tracks.stop and geometry.track_start(t + 1) <= hi:
        if in_cylinder and geometry.surface(t) == 0:
            group = []
        if geometry.track_lbns(t) >= row_sectors:
            group.append(geometry.track_start(t))
            if len(group) == depth:
                out += group
                group = []
        else:
            group = []
        t += 1
    return out


@dataclass(frozen=True)
class _Part:
    """The quadrangle stripes one segment holds: ``stripes`` of them from VLBN ``first``
    (global stripe index ``first_stripe``), row starts per area (disk) of the segment."""

    first: int
    first_stripe: int
    stripes: int
    pvs: tuple[str, ...]
    rows: tuple[list[int], ...]


class QuadLegMap:
    """One leg of a zoned volume: byte ranges → device pieces through the quadrangle mapping.

    Each segment's areas are its ``p`` disks; the segment holds as many quadrangle stripes as
    its disk with the fewest usable tracks allows (``min // d``). ``size`` is the bytes the leg
    can hold; the volume's size is that of its smallest leg.
    """

    def __init__(self, segments: list[Segment], extent_size: int, quad: Quadrangle,
                 pe_start: dict[str, int], geometries: dict[str, DiskGeometry]):
        self.quad = quad
        self.p = len(segments[0].areas) if segments else 1
        self.pw = self.p * quad.width
        self.group = self.pw * quad.depth  # G
        self.block_bytes = quad.block * SECTOR
        parts: list[_Part] = []
        v = stripe = 0
        for seg in segments:
            per = seg.count // seg.stripes * extent_size
            rows = tuple(
                usable_rows(geometries[a.pv], quad.zone, (pe_start[a.pv] + a.pe * extent_size) // SECTOR,
                            (pe_start[a.pv] + a.pe * extent_size + per) // SECTOR, quad.row_sectors,
                            quad.depth)
                for a in seg.areas)
            n = min(len(r) for r in rows) // quad.depth
            if n:
                parts.append(_Part(v, stripe, n, tuple(a.pv for a in seg.areas), rows))
                v += n * self.group
                stripe += n
        self.parts = parts
        self.firsts = [pt.first for pt in parts]
        self.vlbns = v
        self.size = v * self.block_bytes

    def _place(self, v: int) -> tuple[str, int, int, int]:
        """(pv, row start LBN, row i, column j) of VLBN ``v``."""
        pt = self.parts[bisect.bisect_right(self.firsts, v) - 1]
        local, r = divmod(v - pt.first, self.group)
        i, c = divmod(r, self.pw)
        k, j = divmod(c, self.quad.width)
        disk = (k + pt.first_stripe + local) % self.p
        return pt.pvs[disk], pt.rows[disk][local * self.quad.depth + i], i, j

    def locate(self, v: int) -> tuple[str, int]:
        """(pv, DLBN) of the first sector of VLBN ``v``."""
        if not 0 <= v < self.vlbns:
            raise ValueError(f"VLBN {v} outside the leg ({self.vlbns} blocks)")
        pv, start, i, j = self._place(v)
        return pv, start + (i + j) % self.quad.width * self.quad.block

    def pieces(self, offset: int, length: int) -> list[Piece]:
        """Device pieces of the byte range, in request order: at most two per track row touched
        (a row's blocks are rotated by its row index, so a row wraps around once)."""
        if offset < 0 or offset + length > self.size:
            raise ValueError(f"[{offset}, +{length}) outside the leg ({self.size} bytes)")
        w, bb = self.quad.width, self.block_bytes
        out: list[Piece] = []
        pos, end = offset, offset + length
        while pos < end:
            v, within = divmod(pos, bb)
            pv, start, i, j = self._place(v)
            n_row = min(end - pos, (w - j) * bb - within)
            col = (i + j) % w
            n1 = min(n_row, (w - col) * bb - within)
            out.append(Piece(pv, start * SECTOR + col * bb + within, pos - offset, n1))
            if n1 < n_row:
                out.append(Piece(pv, start * SECTOR, pos + n1 - offset, n_row - n1))
            pos += n_row
        return out

    def runs(self, offset: int, length: int) -> list[Run]:
        """Per-device runs: the pieces of each device in device order, contiguous ones merged
        (a whole row is one I/O; rows of adjacent tracks merge when no sector lies between)."""
        per_pv: dict[str, list[Piece]] = defaultdict(list)
        for p in self.pieces(offset, length):
            per_pv[p.pv].append(p)
        out: list[Run] = []
        for pv, pieces in per_pv.items():
            pieces.sort(key=lambda p: p.dev_offset)
            run, run_end = None, -1
            for p in pieces:
                if p.dev_offset != run_end:
                    run = Run(pv, p.dev_offset, [])
                    out.append(run)
                run.parts.append((p.buf_offset, p.length))
                run_end = p.dev_offset + p.length
        return out

    def row(self, offset: int) -> tuple[int, int]:
        """The rectangle around ``offset``: one track row on every disk, (start, length) bytes."""
        width = self.pw * self.block_bytes
        return offset // width * width, width

    def equivalent(self, v: int) -> list[int]:
        """The semi-sequential set of VLBN ``v``: the ``d`` VLBNs of its column in its quadrangle,
        ``p·w`` apart, ascending (``v`` among them)."""
        i = v % self.group // self.pw
        return [v + (m - i) * self.pw for m in range(self.quad.depth)]

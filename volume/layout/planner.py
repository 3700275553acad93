"""Choosing stripes, stripe unit and physical extents for a new or growing logical volume.

Flat layouts size a volume in extents. Zoned layouts (``quadrangle``, and ``traxtent`` on devices
with tracks) size it in whole usable tracks of one zone: extents are taken inside that zone on
every disk and the volume holds what the usable tracks inside them hold (see
:mod:`traxfs.volume.layout.quadrangle`).
"""

from __future__ import annotations

import math

from ..disk.geometry import SECTOR, DiskGeometry
from ..errors import NoSpaceError, UsageError
from ..model import (
    LAYOUTS,
    Area,
    LogicalVolume,
    PhysicalVolume,
    Quadrangle,
    Segment,
    VolumeGroupMeta,
)
from .params import dimensions
from .quadrangle import QuadLegMap, geometries

# Default VLBN of a quadrangle volume: 8 sectors = 4 KiB, the page engine's page (fs/engine/page.py),
# so a page is one block, one contiguous device I/O that never straddles tracks or disks, and the
# semi-sequential set of a block is d pages. On the Atlas 10K III outer zone (N = 686, H = 139)
# it gives w = 85, R = 6 sectors (0.9 %) and D = 4 (cyclic form; 5 in the paper's linear form).
DEFAULT_BLOCK = 8


def stripe_plan(vg: VolumeGroupMeta, layout: str, stripes: int | None, stripe_unit: int | None,
                pvs: list[str]) -> tuple[int, int]:
    """Return (stripes, stripe_unit in bytes) for ``layout`` over the candidate ``pvs``.

    * linear: one stripe; the unit reported to upper layers is the devices' flat unit.
    * striped: the caller's unit (default 64 KiB, the conventional baseline), power of two.
    * traxtent: the devices' track size. On flat devices that is their configured unit, which
      ``stripe_unit`` may override; it must still divide the extent size so every stripe unit
      starts on a unit boundary of its device ("aligned").
    """
    if layout not in LAYOUTS:
        raise UsageError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    units = {vg.pv(p).geometry.unit for p in pvs}
    if layout == "linear":
        if stripes not in (None, 1):
            raise UsageError("a linear volume has exactly one stripe")
        return 1, 1 << (min(units).bit_length() - 1)  # a zoned track (686 sectors) rounds down
    n = stripes if stripes is not None else len(pvs)
    if n < 1 or n > len(pvs):
        raise UsageError(f"{n} stripes need {n} devices; the group has {len(pvs)} usable")
    if layout == "striped":
        unit = stripe_unit if stripe_unit is not None else 64 * 1024
    else:
        if stripe_unit is None and len(units) != 1:
            raise UsageError("traxtent over devices with different track sizes; give --stripe-unit")
        unit = stripe_unit if stripe_unit is not None else units.pop()
    if unit < 4096 or unit & (unit - 1):
        raise UsageError(f"stripe unit {unit} must be a power of two of at least 4096 bytes")
    if vg.extent_size % unit:
        raise UsageError(f"stripe unit {unit} does not divide the extent size {vg.extent_size}")
    return n, unit


def allocate(vg: VolumeGroupMeta, first_le: int, extents: int, stripes: int, pvs: list[str],
             limits: dict[str, tuple[int, int]] | None = None) -> list[Segment]:
    """Take ``extents`` logical extents' worth of physical extents from ``pvs``.

    Each segment uses ``stripes`` distinct devices, each contributing one contiguous run of equal
    length; the biggest free runs are taken first so segments stay few. ``limits`` confines a
    device to the extents ``[first, end)`` (a zone). Nothing in ``vg`` changes: the caller adds
    the segments to a volume and commits.
    """
    if extents % stripes:
        raise UsageError(f"{extents} extents cannot be split over {stripes} stripes")
    free = {p: _clip(runs, limits.get(p) if limits else None) for p, runs in vg.free_runs().items() if p in pvs}
    segments, le, left = [], first_le, extents // stripes
    while left:
        best = sorted(((max((n for _, n in runs), default=0), p) for p, runs in free.items()), reverse=True)
        best = [(n, p) for n, p in best if n > 0][:stripes]
        if len(best) < stripes:
            raise NoSpaceError(
                f"volume group {vg.name}: not enough free extents on {stripes} distinct devices "
                f"for {extents} extents ({vg.free_extents()} free in all)"
            )
        take = min(left, min(n for n, _ in best))
        areas = []
        for _, p in best:
            runs = free[p]
            i = max(range(len(runs)), key=lambda k: runs[k][1])
            first, n = runs[i]
            areas.append(Area(p, first))
            runs[i] = (first + take, n - take)
        segments.append(Segment(le, take * stripes, areas))
        le += take * stripes
        left -= take
    return segments


def _clip(runs: list[tuple[int, int]], window: tuple[int, int] | None) -> list[tuple[int, int]]:
    if window is None:
        return list(runs)
    lo, hi = window
    out = [(max(f, lo), min(f + n, hi) - max(f, lo)) for f, n in runs]
    return [(f, n) for f, n in out if n > 0]


def zoned_plan(vg: VolumeGroupMeta, layout: str, pvs: list[str], stripes: int | None, *,
               zone: int | None = None, block: int | None = None, depth: int | None = None,
               linear: bool = False) -> tuple[int, Quadrangle]:
    """Return (p, track parameters) of a ``quadrangle`` volume, or of a ``traxtent`` one on
    devices with tracks (``d = 1``, ``b = 1``: whole tracks of N sectors).

    All devices must have tracks, and the chosen zone (default 0, the outermost and fastest)
    must have the same N and H on all of them: a quadrangle's shape depends on both. ``block``
    (b, sectors) and ``depth`` (d) follow :func:`~traxfs.volume.layout.params.dimensions`: b
    defaults to :data:`DEFAULT_BLOCK` and d to the deepest that meets the one-revolution
    constraint in its cyclic form ``d·(b+H) ≤ N``, under which a batch takes one revolution
    whichever block the disk serves first — or, with ``linear``, the paper's form
    ``d·b + (d−1)·H ≤ N``, one deeper at best, whose batches lose a revolution on the model when
    the disk starts mid-diagonal. A d given past either is taken as given.
    """
    flat = [vg.pv(p).path for p in pvs if vg.pv(p).geometry.kind != "zoned"]
    if flat:
        raise UsageError(f"the {layout} layout needs devices with tracks (trax pv create --model, or extracted "
                         f"geometry); {', '.join(flat)} {'is' if len(flat) == 1 else 'are'} flat: no track "
                         "skew to exploit")
    zone = 0 if zone is None else zone
    shapes = {}
    for p in pvs:
        spec = vg.pv(p).geometry.disk_spec()
        if not 0 <= zone < len(spec.zones):
            raise UsageError(f"{vg.pv(p).path} has {len(spec.zones)} zones; there is no zone {zone}")
        z = spec.zones[zone]
        shapes.setdefault((z.sectors_per_track, z.track_skew), []).append(vg.pv(p).path)
    if len(shapes) > 1:
        raise UsageError(f"zone {zone} differs between the devices (N, H: "
                         + "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(shapes.items()))
                         + "); a volume uses disks of one model, or choose them with --pv")
    ((n_sectors, skew),) = shapes
    p = stripes if stripes is not None else len(pvs)
    if p < 1 or p > len(pvs):
        raise UsageError(f"{p} stripes need {p} devices; the group has {len(pvs)} usable")
    if layout == "traxtent":
        if block is not None or depth is not None or linear:
            raise UsageError("a traxtent volume's unit is a whole track: block size and depth are for quadrangles")
        return p, Quadrangle(zone, n_sectors, skew, 1, 1, n_sectors)
    try:
        dims = dimensions(n_sectors, skew, b=DEFAULT_BLOCK if block is None and depth is None else block, d=depth,
                          cyclic=not linear)
    except ValueError as e:
        raise UsageError(f"zone {zone}: {e}") from None
    return p, Quadrangle(zone, n_sectors, skew, dims.d, dims.b, dims.w)


def zone_limits(vg: VolumeGroupMeta, pvs: list[str], zone: int,
                geometries: dict[str, DiskGeometry]) -> dict[str, tuple[int, int]]:
    """Per device, the extents ``[first, end)`` that overlap ``zone``."""
    out = {}
    for p in pvs:
        pv, g = vg.pv(p), geometries[p]
        tracks = g.zone_tracks(zone)
        lo, hi = g.track_start(tracks.start) * SECTOR, g.track_start(tracks.stop) * SECTOR
        out[p] = (max(0, (lo - pv.pe_start) // vg.extent_size),
                  min(pv.pe_count, max(0, -(-(hi - pv.pe_start) // vg.extent_size))))
    return out


def allocate_tracks(vg: VolumeGroupMeta, quad: Quadrangle, stripes: int, pools: list[list[str]], size: int,
                    existing: list[list[Segment]], first_le: int) -> tuple[int, list[list[Segment]], int]:
    """Extents for a zoned volume of at least ``size`` bytes on every leg.

    ``existing`` are the legs' segments so far (empty for a new volume), ``pools`` the devices
    each leg may use. Usable tracks are only known once the extents are placed (defects, track
    boundaries), so the estimate grows until every leg holds ``size``. Returns (extents added per
    leg, new segments per leg, the volume's size: its smallest leg's capacity).
    """
    pools = [[p for p in pool if vg.pv(p).geometry.has_zone(quad.zone, quad.sectors, quad.skew)] for pool in pools]
    geos = geometries(vg, {p for pool in pools for p in pool} | {a.pv for segs in existing for s in segs for a in s.areas})
    limits = zone_limits(vg, list(geos), quad.zone, geos)
    pe_start = {p: vg.pv(p).pe_start for p in geos}

    def capacity(segs: list[Segment]) -> int:
        return QuadLegMap(segs, vg.extent_size, quad, pe_start, geos).size

    have = min(capacity(segs) for segs in existing)
    if have >= size:
        return 0, [[] for _ in pools], have
    stripe_bytes = stripes * quad.width * quad.depth * quad.block * SECTOR
    tracks = math.ceil((size - have) / stripe_bytes) * quad.depth
    per = math.ceil(tracks * quad.sectors * SECTOR / vg.extent_size) + 1
    while True:
        try:
            new = [allocate(vg, first_le, per * stripes, stripes, pool, limits) for pool in pools]
        except NoSpaceError as e:
            raise NoSpaceError(f"zone {quad.zone} cannot hold {size} bytes as {quad.depth}-track quadrangles "
                               f"on {stripes} device(s) per copy: {e}") from None
        got = min(capacity(old + add) for old, add in zip(existing, new, strict=True))
        if got >= size:
            return per * stripes, new, got
        per += max(1, per // 8)


def replacement_holds(vg: VolumeGroupMeta, lv: LogicalVolume, old: str, new: PhysicalVolume) -> str | None:
    """Why ``new`` cannot take the place of device ``old`` under the zoned volume ``lv`` (its
    zone differs, or its defects leave a leg fewer usable tracks than the volume's size), or None."""
    quad = lv.quadrangle
    if not new.geometry.has_zone(quad.zone, quad.sectors, quad.skew):
        return f"it has no zone {quad.zone} with N = {quad.sectors}, H = {quad.skew} for {lv.name}"
    geos = geometries(vg, lv.pvs() - {old})
    geos[new.uuid] = DiskGeometry(new.geometry.disk_spec())
    pe_start = {p.uuid: p.pe_start for p in vg.pvs} | {new.uuid: new.pe_start}
    for leg in lv.legs:
        segs = [Segment(s.le, s.count, [Area(new.uuid if a.pv == old else a.pv, a.pe) for a in s.areas])
                for s in leg.segments]
        if QuadLegMap(segs, vg.extent_size, quad, pe_start, geos).size < lv.size:
            return f"its usable tracks in the same extents hold less than {lv.name}'s {lv.size} bytes"
    return None

"""Choosing stripes, stripe unit and physical extents for a new or growing logical volume."""

from __future__ import annotations

from traxfs.volume.errors import NoSpaceError, UsageError
from traxfs.volume.model import LAYOUTS, Area, Segment, VolumeGroupMeta


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
        return 1, min(units)
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


def allocate(vg: VolumeGroupMeta, first_le: int, extents: int, stripes: int, pvs: list[str]) -> list[Segment]:
    """Take ``extents`` logical extents' worth of physical extents from ``pvs``.

    Each segment uses ``stripes`` distinct devices, each contributing one contiguous run of equal
    length; the biggest free runs are taken first so segments stay few. Nothing in ``vg`` changes:
    the caller adds the segments to a volume and commits.
    """
    if extents % stripes:
        raise UsageError(f"{extents} extents cannot be split over {stripes} stripes")
    free = {p: list(runs) for p, runs in vg.free_runs().items() if p in pvs}
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

"""Extraction of a disk's mechanics — command overhead, head switch, seek curve — from probes.

The positioning time between two sectors A and B (overhead plus seek or head switch) is hidden by
rotation in any single response time, since a zero-latency read simply waits for B to come round.
It shows as a threshold instead: read A, then read B ``delay`` later. While the head is ready before
B's slot arrives, B completes on the same pass; one step later it costs a whole revolution more.
Bisecting the delay to that step gives ``positioning = (time from A's end to B's slot) - delay``,
to a few nanoseconds after 32 steps (reported to 10 ns). The geometry must be known first (it names the sectors on
the wanted tracks and cylinders).

Seek times are measured from cylinder 0 to cylinders 1, 2, 4, ... of the outer zone and to the
last cylinder; the outer zone's average seek is the mean over random pairs of distinct cylinders,
taken over the measured curve interpolated linearly in the square root of the distance (exact
where the curve is ``a + b*sqrt(d)``, as drive seek curves are for short distances).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .extract_zone import ExtractionError
from .geometry import DiskGeometry
from .probe import Probes

BISECTIONS = 32


@dataclass(frozen=True)
class MeasuredMechanics:
    overhead_ms: float
    head_switch_ms: float
    track_to_track_ms: float
    average_seek_ms: float
    full_stroke_ms: float
    seek_curve: tuple[tuple[int, float], ...]  # (cylinders, ms) as measured


def positioning_ms(probes: Probes, a: int, b: int, sector_ms: float) -> float:
    """Overhead plus head movement from sector ``a`` to sector ``b`` (``sector_ms``: one of b's)."""
    rev = probes.revolution_ms
    ca = probes.done(a)
    base = probes.done(b) - ca  # delay 0: the first pass of b the head can make
    lo, hi = 0.0, rev
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        ca = probes.done(a)
        if probes.done(b, mid) - ca < base + rev / 2:
            lo = mid
        else:
            hi = mid
    return base - sector_ms - lo


def _middle(g: DiskGeometry, track: int) -> int:
    return g.track_start(track) + g.track_lbns(track) // 2


def measure_mechanics(probes: Probes, g: DiskGeometry) -> MeasuredMechanics:
    """Overhead, head switch and seek curve of the disk whose geometry ``g`` was extracted."""
    s = g.surfaces
    z0 = g.spec.zones[0]
    sector = probes.revolution_ms / z0.sectors_per_track
    clean = next((t for t in g.zone_tracks(0) if not g.defects_on(t) and g.track_lbns(t) >= 3), None)
    if clean is None:
        raise ExtractionError("no defect-free track in the outer zone to time the command overhead on")
    a = g.track_start(clean) + 1
    overhead = positioning_ms(probes, a, a + 1, sector)
    head_switch = positioning_ms(probes, _middle(g, 0), _middle(g, 1), sector) - overhead if s > 1 else 0.0

    def seek(cyls: int) -> float:
        to = cyls * s
        return positioning_ms(probes, _middle(g, 0), _middle(g, to),
                              probes.revolution_ms / g.sectors_per_track(to)) - overhead

    width = z0.cylinders
    distances = sorted({1 << i for i in range(width.bit_length()) if 1 << i < width} | {width - 1} - {0})
    full = g.spec.cylinders - 1
    if full > 0 and full not in distances:
        distances.append(full)
    curve = [(d, round(seek(d), 5)) for d in distances]
    measured = dict(curve)
    return MeasuredMechanics(
        overhead_ms=round(overhead, 5), head_switch_ms=round(head_switch, 5),
        track_to_track_ms=measured.get(1, 0.0), average_seek_ms=round(_mean_seek(curve, width), 5),
        full_stroke_ms=measured.get(full, 0.0), seek_curve=tuple(curve),
    )


def _mean_seek(curve: list[tuple[int, float]], width: int) -> float:
    """Mean seek over ordered pairs of distinct cylinders of a ``width``-cylinder zone."""
    if width < 2:
        return 0.0
    total = 0.0
    for d in range(1, width):
        total += 2.0 * (width - d) / (width * (width - 1)) * _interpolate(curve, d)
    return total


def _interpolate(curve: list[tuple[int, float]], d: int) -> float:
    for (d0, t0), (d1, t1) in zip(curve, curve[1:], strict=False):
        if d0 <= d <= d1:
            r0, r1 = math.sqrt(d0), math.sqrt(d1)
            return t0 + (t1 - t0) * (math.sqrt(d) - r0) / (r1 - r0)
    return curve[-1][1] if d >= curve[-1][0] else curve[0][1]

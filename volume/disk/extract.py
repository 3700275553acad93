"""Black-box geometry extraction (DIXtrac / traxtent style): a disk's layout from read timings.

Atropos needs each disk's exact track boundaries, sectors per track and skews (the geometry
source that needs no vendor data); a disk only offers reads and their completion times. :func:`extract` recovers, from
nothing but :class:`~traxfs.volume.disk.probe.Prober` probes and the capacity:

1. **Rotation.** Re-reading one sector back to back costs exactly one revolution each time. A
   device whose re-reads are fast or irregular has no rotational structure: it is ``flat``.
2. **Zones, in LBN order** (:mod:`.extract_zone`): N from the angle step between neighbouring
   sectors; the zone's end; H, the cylinder skew and the number of surfaces from the track starts;
   every slipped defect, by bisection on the slip count (about ``log2`` of the zone's size in
   probes per defect), down to its physical slot.
3. **Mechanics** (:mod:`.extract_mech`): command overhead, head switch and the seek curve, by
   bisecting the delay at which a second read loses a revolution.
4. **Verification.** The finished geometry predicts the completion angle of every sector; random
   sectors and every zone's first and last are read again, and any miss refuses the result.

The result is a :class:`~traxfs.volume.disk.geometry.DiskSpec` named ``extracted`` whose geometry
(zones, skews, surfaces, defect slots) equals the disk's on simulated disks.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .extract_mech import MeasuredMechanics, measure_mechanics
from .extract_zone import ExtractionError, local_n, solve_zone, zone_end
from .geometry import DiskGeometry, DiskSpec, Zone
from .probe import Prober, Probes

__all__ = ["Extraction", "ExtractionError", "extract"]

REREADS = 6
MIN_REVOLUTION_MS = 2.0  # 30,000 RPM: anything faster is not a platter
MAX_REVOLUTION_MS = 100.0
VERIFY_SECTORS = 48


@dataclass
class Extraction:
    """What extraction found: ``kind`` ``zoned`` (with ``spec``) or ``flat``, and its cost."""

    kind: str
    probes: int
    seconds: float
    spec: DiskSpec | None = None
    mechanics: MeasuredMechanics | None = None
    zone_first_lbns: list[int] = field(default_factory=list)

    def to_doc(self) -> dict:
        doc: dict = {"kind": self.kind, "probes": self.probes, "seconds": round(self.seconds, 3)}
        if self.spec is not None:
            g = DiskGeometry(self.spec)
            doc.update({
                "rpm": self.spec.rpm, "revolution_ms": self.spec.revolution_ms, "surfaces": self.spec.surfaces,
                "zones": [{"first_lbn": lbn, "first_track": g.zone_first_track[i], "sectors_per_track":
                           z.sectors_per_track, "tracks": z.cylinders * g.surfaces, "cylinders": z.cylinders,
                           "track_skew": z.track_skew, "cylinder_skew": z.cylinder_skew}
                          for i, (z, lbn) in enumerate(zip(self.spec.zones, self.zone_first_lbns, strict=True))],
                "defects": len(self.spec.defects), "capacity": g.capacity,
                "head_switch_ms": self.spec.head_switch_ms, "overhead_ms": self.spec.overhead_ms,
                "track_to_track_ms": self.spec.track_to_track_ms, "average_seek_ms": self.spec.average_seek_ms,
                "full_stroke_ms": self.spec.full_stroke_ms,
                "seek_curve": [list(p) for p in self.mechanics.seek_curve] if self.mechanics else [],
            })
        return doc


def extract(prober: Prober, capacity: int, *, seed: int = 0,
            progress: Callable[[int, int], None] | None = None) -> Extraction:
    """Extract the geometry of the ``capacity``-sector device behind ``prober``.

    ``progress(lbn, capacity)`` is called as zones are completed. Raises
    :class:`ExtractionError` when the timings do not fit one consistent geometry."""
    started = time.perf_counter()
    probes = Probes(prober, capacity)
    rev = _revolution(probes)
    if rev is None:
        return Extraction("flat", probes.count, time.perf_counter() - started)
    probes.revolution_ms = rev
    zones, firsts, defects, surfaces = _zones(probes, progress)
    rpm = round(60_000.0 / rev)
    layout = DiskSpec("extracted", rpm, surfaces, tuple(zones), 0.0, 0.0, 0.0, 0.0, 0.0, tuple(defects))
    geometry = DiskGeometry(layout)
    if geometry.capacity != capacity:
        raise ExtractionError(f"the zones found hold {geometry.capacity} sectors, the device {capacity}")
    mech = measure_mechanics(probes, geometry)
    spec = DiskSpec("extracted", rpm, surfaces, tuple(zones), mech.head_switch_ms, mech.track_to_track_ms,
                    mech.average_seek_ms, mech.full_stroke_ms, mech.overhead_ms, tuple(defects))
    _verify(probes, DiskGeometry(spec), firsts, seed)
    return Extraction("zoned", probes.count, time.perf_counter() - started, spec, mech, firsts)


def _revolution(probes: Probes) -> float | None:
    """The revolution time, or None when re-reading a sector shows no steady rotation."""
    ends = [probes.done(0) for _ in range(REREADS)]
    gaps = [b - a for a, b in zip(ends[1:], ends[2:], strict=False)]  # the first read came from anywhere
    g = gaps[0]
    if not MIN_REVOLUTION_MS <= g <= MAX_REVOLUTION_MS or any(abs(x - g) > 1e-3 * g for x in gaps):
        return None
    if any(abs(x - g) > 1e-9 * g for x in gaps):
        raise ExtractionError(f"re-reads take {min(gaps):.4f}..{max(gaps):.4f} ms: a rotating disk, but "
                              "too noisy for exact extraction")
    rpm = round(60_000.0 / g)
    return 60_000.0 / rpm if abs(60_000.0 / rpm - g) <= 1e-9 * g else g


def _zones(probes: Probes, progress: Callable[[int, int], None] | None
           ) -> tuple[list[Zone], list[int], list[tuple[int, int, int]], int]:
    """Every zone in LBN order: (zones, their first LBNs, slipped defects, surfaces).

    The surfaces show where a zone's track and cylinder skews differ; a zone whose two skews are
    equal looks the same for any number of surfaces, so it is solved as one-surface and named in
    cylinders once another zone (or none: then one surface) has shown the number."""
    found: list[tuple[int, int, int, int]] = []  # (N, H, cylinder skew, tracks)
    firsts: list[int] = []
    slips: list[tuple[int, int]] = []  # (track, slot)
    surfaces: int | None = None
    first, first_track = 0, 0
    while first < probes.capacity:
        n = local_n(probes, first)
        if n is None:
            raise ExtractionError(f"LBN {first}: no steady sectors-per-track")
        if found and n == found[-1][0]:
            raise ExtractionError(f"LBN {first}: a zone change without a change of sectors per track")
        end = zone_end(probes, first, n)
        zone = solve_zone(probes, first, end, n, surfaces)
        m, tracks = zone.model, zone.tracks
        if m.surfaces > 1:
            surfaces = m.surfaces
        slips += [(first_track + p // n, p % n) for p in zone.slipped]
        found.append((n, m.h, m.c, tracks))
        firsts.append(first)
        first, first_track = end, first_track + tracks
        if progress:
            progress(first, probes.capacity)
    s = surfaces or 1
    if any(tracks % s for *_, tracks in found):
        raise ExtractionError(f"zone track counts {[t for *_, t in found]} are not whole {s}-surface cylinders")
    zones = [Zone(tracks // s, n, h, c) for n, h, c, tracks in found]
    return zones, firsts, [(*divmod(t, s), slot) for t, slot in slips], s


def _verify(probes: Probes, g: DiskGeometry, firsts: list[int], seed: int) -> None:
    """Every sector the geometry predicts must complete where it says; refuse it otherwise."""
    rng = random.Random(seed)
    ends = [f - 1 for f in firsts[1:]] + [g.capacity - 1]
    for lbn in sorted({*firsts, *ends, *(rng.randrange(g.capacity) for _ in range(VERIFY_SECTORS))}):
        track, slot = g.slot_of(lbn)
        n = g.sectors_per_track(track)
        seen = probes.slot_end(lbn, n)
        if seen != (slot + g.skew_offset(track) + 1) % n:
            raise ExtractionError(f"verification: LBN {lbn} completes at sector {seen} of its track, "
                                  f"the extracted geometry says {(slot + g.skew_offset(track) + 1) % n}")

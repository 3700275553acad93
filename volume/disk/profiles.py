"""Named disk models.

The Maxtor Atlas 10K III is the paper's disk and is calibrated to the paper's numbers: outer zone
N = 686 sectors (343 KB per track), track skew H = 139, 10,000 RPM (6 ms per revolution), a 2.46 ms
average seek inside the outer zone, and a command overhead fitted so that a random 8 KB read
costs 5.93 ms. Zone tables, surfaces and the other two disks are approximations from public data
sheets of the period (stated as such in the README of the reproduction); what the experiments
depend on is each zone's N and H and the seek curve.

Each zone's skews follow from the switch times: ``H = ceil(head_switch / revolution * N)`` and the
cylinder skew likewise from the track-to-track seek, so a sequential stream never loses a
revolution at a switch.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from .geometry import DiskSpec, Zone


def _zones(rpm: int, head_switch_ms: float, cyl_switch_ms: float, table: list[tuple[int, int]]) -> tuple[Zone, ...]:
    rev = 60_000.0 / rpm
    return tuple(Zone(cyls, n, math.ceil(head_switch_ms / rev * n - 1e-9), math.ceil(cyl_switch_ms / rev * n - 1e-9))
                 for cyls, n in table)


def atlas10k3() -> DiskSpec:
    """Maxtor Atlas 10K III, 36 GB (the paper's disk)."""
    hs = 139 * 6.0 / 686  # 1.2157 ms: H = 139 in the outer zone
    return DiskSpec(
        name="atlas10k3", rpm=10_000, surfaces=4,
        zones=_zones(10_000, hs, 1.4, [(3200, 686), (3800, 658), (4000, 630), (4000, 602),
                                       (4000, 574), (4000, 546), (4000, 518), (4000, 490)]),
        head_switch_ms=hs, track_to_track_ms=1.4, average_seek_ms=2.46, full_stroke_ms=10.5,
        overhead_ms=0.304,  # random 8 KB read in the outer zone = 5.93 ms (analytic.random_fetch_ms)
    )


def cheetah36es() -> DiskSpec:
    """Seagate Cheetah 36ES, 36 GB, with 404 slipped defects (the paper's per-disk average)."""
    spec = DiskSpec(
        name="cheetah36es", rpm=10_000, surfaces=2,
        zones=_zones(10_000, 0.5, 0.9, [(6000, 738), (7000, 704), (7500, 672), (7500, 640),
                                        (8000, 608), (8000, 576), (8000, 544), (8000, 512)]),
        head_switch_ms=0.5, track_to_track_ms=0.9, average_seek_ms=2.6, full_stroke_ms=10.0,
        overhead_ms=0.3,
    )
    return with_random_defects(spec, 404, seed=36)


def cheetah15k3() -> DiskSpec:
    """Seagate Cheetah 15K.3, 73 GB, 15,000 RPM (4 ms per revolution)."""
    return DiskSpec(
        name="cheetah15k3", rpm=15_000, surfaces=8,
        zones=_zones(15_000, 0.4, 0.6, [(4000, 680), (4500, 648), (5000, 616), (5000, 584),
                                        (5000, 552), (5000, 520), (5000, 488), (4500, 456)]),
        head_switch_ms=0.4, track_to_track_ms=0.6, average_seek_ms=1.9, full_stroke_ms=7.4,
        overhead_ms=0.25,
    )


PROFILES = {"atlas10k3": atlas10k3, "cheetah36es": cheetah36es, "cheetah15k3": cheetah15k3}


def profile(name: str) -> DiskSpec:
    try:
        return PROFILES[name]()
    except KeyError:
        raise ValueError(f"unknown disk model {name!r}; choose one of {', '.join(PROFILES)}") from None


def with_random_defects(spec: DiskSpec, count: int, seed: int) -> DiskSpec:
    """``spec`` with ``count`` slipped defects at seeded random physical slots."""
    rng = random.Random(seed)
    zone_of_cyl = [zi for zi, z in enumerate(spec.zones) for _ in range(z.cylinders)]
    defects: set[tuple[int, int, int]] = set()
    while len(defects) < count:
        cyl = rng.randrange(len(zone_of_cyl))
        n = spec.zones[zone_of_cyl[cyl]].sectors_per_track
        defects.add((cyl, rng.randrange(spec.surfaces), rng.randrange(n)))
    return spec.with_defects(tuple(defects))


def scaled(spec: DiskSpec, cylinders_per_zone: int, zones: int | None = None) -> DiskSpec:
    """A smaller disk of the same model: every zone keeps its N and skews but has
    ``cylinders_per_zone`` cylinders (defects outside the smaller disk are dropped). For tests and
    demonstrations whose images should stay small."""
    kept = spec.zones[: zones or len(spec.zones)]
    new_zones = tuple(replace(z, cylinders=cylinders_per_zone) for z in kept)
    # a defect keeps its zone and surface; its cylinder is folded into the smaller zone
    old_first, new_defects = 0, set()
    for zi, z in enumerate(spec.zones):
        if zi < len(kept):
            for cyl, surf, slot in spec.defects:
                if old_first <= cyl < old_first + z.cylinders and cyl - old_first < cylinders_per_zone:
                    new_defects.add((zi * cylinders_per_zone + cyl - old_first, surf, slot))
        old_first += z.cylinders
    return replace(spec, zones=new_zones, defects=tuple(sorted(new_defects)))

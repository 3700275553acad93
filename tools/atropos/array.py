"""p modelled disks on their own simulated clocks, driven through the volume layer's mappings.

The timing experiments do not move data, so they skip image files and threads: a logical
request is mapped to device pieces by the same code a real volume uses
(:class:`~traxfs.volume.layout.quadrangle.QuadLegMap` for traxtent and quadrangle volumes,
:class:`~traxfs.volume.layout.mapping.LegMap` for fixed stripe units), and each device's share
goes to its :class:`~traxfs.volume.disk.simulator.SimulatedDisk`. Every disk keeps its own time,
so p disks work in parallel in simulated time and a request completes when its last piece does.

A batch is pre-scheduled on the host as Atropos does (a
:class:`~traxfs.volume.disk.scheduler.HeadPredictor` per disk picks the request to send first);
``prescheduled=False`` leaves the order to the disk, whose idle firmware starts the first
request it receives.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ...volume.disk.geometry import SECTOR, DiskGeometry, DiskSpec
from ...volume.disk.mechanics import Breakdown
from ...volume.disk.scheduler import HeadPredictor
from ...volume.disk.simulator import SimulatedDisk
from ...volume.layout.mapping import LegMap
from ...volume.layout.quadrangle import QuadLegMap
from ...volume.model import Area, Quadrangle, Segment

Piece = tuple[int, int, int]  # (disk index, DLBN, sectors)


def _names(p: int) -> list[str]:
    return [f"disk{k}" for k in range(p)]


def quadrangle_map(spec: DiskSpec, p: int, quad: Quadrangle, tracks: int) -> QuadLegMap:
    """The mapping of a zoned volume of ``tracks`` tracks per disk from the start of zone 0
    (``Quadrangle(0, N, H, 1, 1, N)`` is a traxtent volume)."""
    names = _names(p)
    geometry = DiskGeometry(spec)
    extent = geometry.track_start(tracks) * SECTOR
    seg = Segment(0, p, [Area(n, 0) for n in names])
    return QuadLegMap([seg], extent, quad, dict.fromkeys(names, 0), dict.fromkeys(names, geometry))


def striped_map(p: int, unit_sectors: int, sectors_per_disk: int) -> LegMap:
    """The mapping of a RAID-0 volume with a fixed stripe unit, from LBN 0 of every disk."""
    names = _names(p)
    seg = Segment(0, p, [Area(n, 0) for n in names])
    return LegMap([seg], sectors_per_disk * SECTOR, unit_sectors * SECTOR, dict.fromkeys(names, 0))


def pieces(leg: QuadLegMap | LegMap, lbn: int, count: int) -> list[Piece]:
    """Device pieces of ``count`` volume sectors from volume sector ``lbn``, merged per disk."""
    return [(int(r.pv[4:]), r.dev_offset // SECTOR, sum(n for _, n in r.parts) // SECTOR)
            for r in leg.runs(lbn * SECTOR, count * SECTOR)]


class DiskArray:
    """``p`` simulated disks of one model, each with the host's predictor of its head."""

    def __init__(self, spec: DiskSpec, p: int, *, prescheduled: bool = True):
        self.disks = [SimulatedDisk(spec) for _ in range(p)]
        self.predictors = [HeadPredictor(spec) for _ in range(p)]
        self.prescheduled = prescheduled

    def reset(self) -> None:
        """Idle disks, heads on track 0, clocks at 0: a fresh run without rebuilding the models."""
        for disk, pred in zip(self.disks, self.predictors, strict=True):
            disk.free_at, disk.head_track = 0.0, 0
            pred.head_track, pred.completed_at = 0, 0.0

    def submit(self, batch: Sequence[Piece], at: float) -> list[Breakdown]:
        """Issue ``batch`` at ``at``: each disk gets its pieces together (in the host's order if
        pre-scheduled). Returns the breakdowns in batch order."""
        per_disk: dict[int, list[int]] = defaultdict(list)
        for i, (k, _, _) in enumerate(batch):
            per_disk[k].append(i)
        out: list[Breakdown | None] = [None] * len(batch)
        for k, idx in per_disk.items():
            reqs = [batch[i][1:] for i in idx]
            order = self.predictors[k].order(reqs, at) if self.prescheduled else list(range(len(reqs)))
            done = self.disks[k].submit([reqs[o] for o in order], at)
            for o, b in zip(order, done, strict=True):
                out[idx[o]] = b
            last = max(done, key=lambda b: b.end)
            self.predictors[k].observe(last.lbn, last.count, last.end)
        return out  # type: ignore[return-value]

    def run(self, batch: Sequence[Piece], at: float) -> float:
        """Issue ``batch`` at ``at`` and return when its last piece completes."""
        return max(b.end for b in self.submit(batch, at))

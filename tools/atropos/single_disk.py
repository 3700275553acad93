"""Figures 7, 8 and 9: access efficiency and response times of one disk's outer zone.

All three time requests to randomly chosen places of the Atlas 10K III outer zone, as the
paper's measurements did. Each sample goes to a place chosen at random (a fixed seed makes the
run repeatable), from wherever the previous one left the head, so the seek distance is random;
it is issued when the disk is idle, timed so that the head lands at evenly spread angles ahead
of the target (:meth:`Sampler._arrival`). Requests go through the volume
layer's mapping code (:mod:`.array`): a track-aligned access is a traxtent row, a
semi-sequential one the ``d`` VLBNs of one quadrangle column, issued as one batch that the host
pre-schedules.

Layouts of the other-major access, for ``d`` blocks of ``b`` sectors:

* *semi-sequential*: the quadrangle's diagonal, one batch;
* *naïve* (a conventional array, or DSM): ``d`` separate ``b``-sector I/Os on ``d``
  consecutive tracks at unrelated angles, each issued when the previous completes, so each
  pays its own command overhead and rotational latency ("nearly half of a revolution ... for
  each of the d accesses", §5.2.2).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from ...volume.disk import analytic
from ...volume.disk.geometry import DiskSpec
from ...volume.disk.mechanics import Breakdown
from ...volume.layout.params import max_block, max_depth
from ...volume.layout.quadrangle import QuadLegMap
from ...volume.model import Quadrangle
from .array import DiskArray, pieces, quadrangle_map
from .report import Check, between, near, shown


@dataclass
class Result:
    checks: list[Check]
    data: dict = field(default_factory=dict)


@dataclass
class Sample:
    """Sums over the requests of one sampled access."""

    total: float  # arrival to last completion
    transfer: float
    seek: float  # of the first request served
    overhead: float
    rotation: float
    switches: float


class Sampler:
    """One disk; each access starts from where the previous one left the head."""

    def __init__(self, spec: DiskSpec, seed: int):
        self.spec = spec
        self.n = spec.zones[0].sectors_per_track
        self.h = spec.zones[0].track_skew
        self.tracks = spec.zones[0].cylinders * spec.surfaces  # outer zone
        self.rng = random.Random(seed)
        self._phase = self.rng.random()
        self.array = DiskArray(spec, 1)
        self.traxtent = quadrangle_map(spec, 1, Quadrangle(0, self.n, self.h, 1, 1, self.n), self.tracks)
        self._quads: dict[tuple[int, int], QuadLegMap] = {}

    def quad(self, d: int, b: int) -> QuadLegMap:
        key = (d, b)
        if key not in self._quads:
            self._quads[key] = quadrangle_map(self.spec, 1, Quadrangle(0, self.n, self.h, d, b, self.n // b), self.tracks)
        return self._quads[key]

    def _arrival(self, lbn: int) -> float:
        """When to issue a request for ``lbn`` so the head lands on its track the next step of a
        low-discrepancy sequence (golden-ratio steps) ahead of ``lbn``'s sector: the landing
        angle is what an access costs most, and covering it evenly makes a few hundred samples
        as good as many thousand random ones."""
        self._phase = (self._phase + 0.6180339887498949) % 1.0
        disk, rev = self.array.disks[0], self.spec.revolution_ms
        track, slot = disk.geometry.slot_of(lbn)
        seek = disk.mechanics.move_ms(disk.head_track, track)
        land = disk.free_at + self.spec.overhead_ms + seek
        target = (disk.geometry.slot_angle(track, slot) + self._phase) * rev
        return disk.free_at + (target - land) % rev

    def batch(self, reqs: list[tuple[int, int]]) -> Sample:
        """One batch issued together (pre-scheduled by the host)."""
        at = self._arrival(reqs[0][0])
        done = self.array.submit([(0, lbn, n) for lbn, n in reqs], at)
        return _sum(done, at)

    def chain(self, reqs: list[tuple[int, int]]) -> Sample:
        """Requests issued one after another, each when the previous completes."""
        at = t = self._arrival(reqs[0][0])
        done = []
        for lbn, n in reqs:
            b = self.array.submit([(0, lbn, n)], t)[0]
            done.append(b)
            t = b.end
        return _sum(done, at)

    # ----- the access patterns ------------------------------------------------------------------
    def aligned(self, size: int) -> Sample:
        """``size`` sectors from a random track start (traxtent)."""
        t = self.rng.randrange(self.tracks - size // self.n - 1)
        return self.batch([p[1:] for p in pieces(self.traxtent, t * self.n, size)])

    def primary(self, size: int, d: int, b: int) -> Sample:
        """``size`` sectors of consecutive VLBNs from the start of a random quadrangle row."""
        m = self.quad(d, b)
        row = self.rng.randrange(m.vlbns // m.quad.width - size // (b * m.quad.width) - 1)
        return self.batch([p[1:] for p in pieces(m, row * m.quad.width * b, size)])

    def unaligned(self, size: int) -> Sample:
        lbn = self.rng.randrange((self.tracks - size // self.n - 1) * self.n)
        return self.batch([(lbn, size)])

    def semi_sequential(self, d: int, b: int) -> Sample:
        """The ``d`` blocks of a random quadrangle column, one batch."""
        m = self.quad(d, b)
        v = self.rng.randrange(m.vlbns // m.group) * m.group + self.rng.randrange(m.quad.width)
        return self.batch([(m.locate(x)[1], b) for x in m.equivalent(v)])

    def naive(self, d: int, b: int) -> Sample:
        """``d`` blocks at random places of ``d`` consecutive tracks, one I/O after another."""
        t = self.rng.randrange(self.tracks - d)
        return self.chain([((t + i) * self.n + self.rng.randrange(self.n - b + 1), b) for i in range(d)])

    def contiguous(self, size: int) -> Sample:
        """``size`` sectors at a random page-aligned place of the zone."""
        lbn = self.rng.randrange((self.tracks - 1) * self.n // size) * size
        return self.batch([(lbn, size)])


def _sum(done: list[Breakdown], at: float) -> Sample:
    first = min(done, key=lambda b: b.start)
    return Sample(max(b.end for b in done) - at, sum(b.transfer for b in done), first.seek,
                  sum(b.overhead for b in done), sum(b.rotation for b in done),
                  sum(b.switches + (b.seek if b is not first else 0.0) for b in done))


def mean(samples: list[Sample], f: Callable[[Sample], float]) -> float:
    return sum(f(s) for s in samples) / len(samples)


def efficiency(samples: list[Sample]) -> float:
    """Media-transfer time over total time, over all samples."""
    return sum(s.transfer for s in samples) / sum(s.total for s in samples)


# ----- Figure 7 ----------------------------------------------------------------------------------
FIG7_KB = (8, 16, 32, 48, 64, 96, 124, 134, 160, 192, 256, 300, 336, 343, 352, 384, 448, 512, 576, 640, 686)


def fig7(spec: DiskSpec, samples: int, seed: int = 7, d: int = 4) -> Result:
    """Access efficiency vs I/O size (single disk)."""
    s = Sampler(spec, seed)
    n = s.n
    one_rev = d * max_block(n, s.h, d)  # sectors: the largest d-deep diagonal in one revolution
    one_rev_cyc = d * max_block(n, s.h, d, cyclic=True)  # ... whichever block is read first
    lines: dict[str, list[tuple[float, float]]] = {k: [] for k in
                                                   ("traxtent", "quadrangle primary", "semi-sequential", "naive", "unaligned")}
    unaligned_track: list[Sample] = []
    aligned_track: list[Sample] = []
    for kb in FIG7_KB:
        size = 2 * kb
        b = max(1, size // d)
        runs = {
            "traxtent": [s.aligned(size) for _ in range(samples)],
            "quadrangle primary": [s.primary(size, d, 1) for _ in range(samples)],
            "semi-sequential": [s.semi_sequential(d, b) for _ in range(samples)],
            "naive": [s.naive(d, b) for _ in range(samples)],
            "unaligned": [s.unaligned(size) for _ in range(samples)],
        }
        for name, got in runs.items():
            x = (d * b if name in ("semi-sequential", "naive") else size) / 2
            lines[name].append((x, efficiency(got)))
        if size == n:
            unaligned_track, aligned_track = runs["unaligned"], runs["traxtent"]
    eff = {k: dict(v) for k, v in lines.items()}
    track_kb = n / 2
    gap = max(abs(a - b) for (_, a), (_, b) in zip(lines["traxtent"], lines["quadrangle primary"], strict=True))
    dip = eff["traxtent"][track_kb] - eff["traxtent"][352]

    def ratios(num: str, den: str, upto: float) -> list[float]:
        return [e / eff[den][x] for x, e in lines[num] if x <= upto and x in eff[den]]

    semi = ratios("semi-sequential", "traxtent", one_rev_cyc / 2)
    naive = ratios("naive", "semi-sequential", one_rev_cyc / 2)
    at_124 = eff["semi-sequential"][124] / eff["traxtent"][124]
    share = sum(x.rotation + x.switches for x in unaligned_track) / sum(x.total for x in unaligned_track)
    aligned_rot = mean(aligned_track, lambda x: x.rotation)
    checks = [
        between("fig7", "full-track aligned read: mean rotational latency", "≈ 0 (zero-latency)", aligned_rot,
                "ms", None, 0.05),
        between("fig7", "unaligned track-sized read: (latency + switches) / total", "over a third",
                100 * share, "%", 30, None),
        between("fig7", "quadrangle primary vs traxtent: largest efficiency gap", "≈ equal", gap, "",
                None, 0.02),
        between("fig7", f"traxtent efficiency drop from {track_kb:g} KB to 352 KB", "a dip just past 343 KB",
                dip, "", 0.05, None),
        between("fig7", f"semi-sequential / traxtent efficiency, up to {one_rev_cyc / 2:g} KB (min)",
                "slightly below", min(semi), "x", 0.7, 1.0),
        shown("fig7", "semi-sequential / traxtent efficiency at 124 KB", "slightly below", at_124, "x",
              "not held: past the cyclic bound a mid-diagonal start loses a revolution"),
        between("fig7", f"naive / semi-sequential efficiency, up to {one_rev_cyc / 2:g} KB (max)", "far lower",
                max(naive), "x", None, 0.5),
        shown("fig7", f"one-revolution size at d = {d}, linear / cyclic form", "124 KB (text)",
              one_rev / 2, "KB", f"not held: linear b <= {one_rev // d}; cyclic {one_rev_cyc / 2:g} KB"),
    ]
    return Result(checks, {"efficiency": lines, "one_revolution_kb": one_rev / 2,
                           "one_revolution_cyclic_kb": one_rev_cyc / 2, "track_kb": track_kb,
                           "d": d, "samples": samples})


# ----- Figure 8 ----------------------------------------------------------------------------------
def fig8(spec: DiskSpec, samples: int, seed: int = 8, chunk: int = 16) -> Result:
    """A random 8 KB chunk: contiguous, quadrangle (d = 2, 4) and naïve layouts."""
    s = Sampler(spec, seed)
    contiguous = mean([s.contiguous(chunk) for _ in range(samples)], lambda x: x.total)
    bars: dict[str, float] = {"contiguous": contiguous}
    checks = [near("fig8", "contiguous 8 KB", 5.93, contiguous, "ms", 0.15)]
    paper = {2: 16.0, 4: 38.0}
    for d in (2, 4):
        b = chunk // d
        quad = mean([s.semi_sequential(d, b) for _ in range(samples)], lambda x: x.total)
        s.array.prescheduled = False
        firmware = mean([s.semi_sequential(d, b) for _ in range(samples)], lambda x: x.total)
        s.array.prescheduled = True
        naive = mean([s.naive(d, b) for _ in range(samples)], lambda x: x.total)
        model = analytic.diagonal_fetch_ms(spec, b, d) / analytic.random_fetch_ms(spec, chunk)
        bars[f"quadrangle d={d}"] = quad
        bars[f"naive d={d}"] = naive
        checks += [
            near("fig8", f"quadrangle d={d} (b={b}): penalty over contiguous", paper[d],
                 100 * (quad / contiguous - 1), "%", 4),
            shown("fig8", f"quadrangle d={d}, firmware order (no host pre-scheduling)", None,
                  100 * (firmware / contiguous - 1), "%", "not in the paper: why Atropos pre-schedules"),
            shown("fig8", f"quadrangle d={d}: analytic model (Appendix A)", paper[d], 100 * (model - 1), "%",
                  "shown: the model's expectation"),
            shown("fig8", f"naive d={d}", None, naive, "ms", "model estimate only"),
        ]
    return Result(checks, {"bars_ms": bars, "samples": samples})


# ----- Figure 9 ----------------------------------------------------------------------------------
def fig9(spec: DiskSpec, samples: int, seed: int = 9, depths: tuple[int, ...] = (1, 2, 3, 4, 5, 6)) -> Result:
    """Response time (seek and command overhead subtracted) vs I/O size S = d·b, simulated and
    analytic (Appendix A/B)."""
    s = Sampler(spec, seed)
    n, h, rev = s.n, s.h, spec.revolution_ms
    switch = spec.head_switch_ms * n / rev
    d_lin, d_cyc = max_depth(n, h, 1), max_depth(n, h, 1, cyclic=True)
    curves: dict[int, dict[str, list[tuple[float, float]]]] = {}
    gaps: list[float] = []
    for d in depths:
        sizes = sorted({max(1, round(kb * 2 / d)) for kb in (0.5, 8, 16, 32, 48, 64, 96, 128, 192, 256, 343)})
        sim, model = [], []
        for b in sizes:
            if d * b > 2 * n:
                continue
            got = [s.semi_sequential(d, b) for _ in range(samples)]
            t_sim = mean(got, lambda x: x.total - x.seek - x.overhead)
            t_model = analytic.semi_sequential_ms(n, h, b, d, rev, switch)
            sim.append((d * b / 2, t_sim))
            model.append((d * b / 2, t_model))
            gaps.append(abs(t_sim / t_model - 1))
        curves[d] = {"simulated": sim, "analytic": model}
    d1 = curves[1]["simulated"]
    smallest = {d: c["simulated"][0][1] for d, c in curves.items()}
    model_d = max(d for d, t in smallest.items() if t <= rev)  # deepest diagonal read in one revolution
    step = smallest[d_cyc + 1] / smallest[d_cyc]
    checks = [
        near("fig9", "d = 1, smallest I/O", 3.0, d1[0][1], "ms", 0.2),
        near("fig9", "d = 1, full track (343 KB)", 6.0, d1[-1][1], "ms", 0.3),
        between("fig9", "analytic vs simulated: median relative gap", "close match", 100 * statistics.median(gaps),
                "%", None, 3),
        shown("fig9", "analytic vs simulated: largest relative gap", "small differences", 100 * max(gaps), "%",
              "not held: the analytic model leaves out cylinder crossings and the R wrap"),
        between("fig9", f"smallest I/O at d <= {d_cyc} (cyclic D): slowest", "at most ~6 ms",
                max(smallest[d] for d in depths if d <= d_cyc), "ms", None, rev),
        between("fig9", f"step: smallest I/O at d = {d_cyc + 1} over d = {d_cyc}", "6 ms -> 10-12 ms", step, "x",
                1.5, None),
        shown("fig9", "deepest d read in one revolution (simulated)", f"D = {d_lin} (linear form)", model_d, "",
              f"not held: the cyclic form gives D = {d_cyc}"),
        shown("fig9", f"d = {d_lin + 1} (first past the paper's D = {d_lin}): smallest I/O", ">= 10.8 ms",
              smallest.get(d_lin + 1, float("nan")), "ms", "not held: SPTF starts mid-diagonal, ~1.6 revolutions"),
    ]
    return Result(checks, {"curves": {str(d): c for d, c in curves.items()}, "D_linear": d_lin, "D_cyclic": d_cyc,
                           "samples": samples})

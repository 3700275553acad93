"""How long a modelled disk takes to serve one request: seek curve, rotation, switches, transfer.

This is the reference (pure Python) service-time model of the Atropos reproduction; the
simulator, the host-side SPTF predictor and the extraction tests all time requests through it, so
its rules are the disk's ground truth:

* a request pays the fixed command overhead first, unless the firmware processed the command
  while the previous request was still being served (the simulator passes the part of the
  overhead that is not hidden that way: a queued request pays none);
* the head moves to the request's first track: same track is free, same cylinder is a head
  switch, another cylinder is a seek (which already includes settle; a seek and a head switch
  overlap, so the longer one counts);
* on each track the request touches, the firmware reads on arrival ("zero-latency"): landing
  ``g`` sectors before the track's portion costs ``g + k`` sectors of rotation, landing inside it
  costs one revolution (plus the rest of a partly passed sector), whatever the portion's size;
* consecutive tracks are joined by a head switch (same cylinder) or a one-cylinder seek.

Slipped defect slots pass under the head like any other slot but carry no LBN: they count as
rotation, not transfer. Time is in milliseconds; the platter is at angle ``(t / T_rev) mod 1`` at
time ``t`` (geometry.py). A landing that is within ``EPS`` sectors of a portion's first slot
counts as on time: the profiles make the skews exactly match the switch times, and floating-point
noise must not turn that into a lost revolution.
"""

from __future__ import annotations

import functools
import math
from array import array
from dataclasses import dataclass

from .geometry import DiskGeometry, DiskSpec

EPS = 1e-4  # sectors: landing closer than this to a slot boundary counts as on the boundary


@dataclass(slots=True)
class Breakdown:
    """Where one request's service time went (ms). ``start`` is when service began (after any
    queueing, which ``queued`` records), ``end`` when the last sector was transferred;
    ``overhead + seek + rotation + switches + transfer == end - start``."""

    lbn: int
    count: int
    start: float
    end: float
    overhead: float
    seek: float
    rotation: float
    switches: float
    transfer: float
    end_track: int
    queued: float = 0.0

    @property
    def total(self) -> float:
        return self.end - self.start

    @property
    def efficiency(self) -> float:
        """Access efficiency: the share of the service time spent transferring data."""
        return self.transfer / self.total if self.total > 0 else 0.0

    @property
    def positioning(self) -> float:
        """Seek plus rotational latency: what SPTF schedulers minimise."""
        return self.seek + self.rotation


class SeekCurve:
    """``seek(d) = a + b*sqrt(d)`` up to ``knee`` cylinders, then a straight line to the full stroke.

    Fitted to three data-sheet numbers: ``seek(1)`` is the track-to-track time, the mean over
    random pairs of distinct cylinders inside the outer zone is the average seek, and
    ``seek(cylinders - 1)`` is the full stroke. The knee is where the line is tangent to the
    square-root part (slope-continuous). When the square-root part fitted to the outer zone would
    overshoot the full stroke (no tangent exists), the knee is the outer zone's width and the line
    after it is flatter than the curve (still concave). On tiny scaled disks the fit can leave the
    full stroke unmet; the line then never slopes down.
    """

    def __init__(self, spec: DiskSpec):
        self.max_distance = max(spec.cylinders - 1, 1)
        self._t2t, self._full = spec.track_to_track_ms, spec.full_stroke_ms
        c = spec.zones[0].cylinders
        # weight of distance d among ordered pairs of distinct cylinders of the outer zone
        self._weights = [(d, 2.0 * (c - d) / (c * (c - 1))) for d in range(1, c)] if c > 1 else []
        self._zone_width = max(c - 1, 2)
        self._avg = spec.average_seek_ms
        self.knee = self._fit_knee()
        self.b = self._fit_b(self.knee)
        self.a = self._t2t - self.b
        dmax, k = self.max_distance, self.knee
        self._knee_ms = self.a + self.b * math.sqrt(k)
        self._slope = max((self._full - self._knee_ms) / (dmax - k), 0.0) if dmax > k else 0.0
        self.table = [0.0] + [self._eval(d) for d in range(1, dmax + 1)]

    def _eval(self, d: float) -> float:
        if d <= self.knee:
            return self.a + self.b * math.sqrt(d)
        return self._knee_ms + self._slope * (d - self.knee)

    def _fit_b(self, knee: float) -> float:
        """The b that meets the average-seek constraint for a given knee (a = t2t - b)."""
        if not self._weights:
            return 0.0
        dmax, t2t, full = self.max_distance, self._t2t, self._full
        const = coef = 0.0  # mean seek = const + coef * b
        for d, w in self._weights:
            if d <= knee or dmax <= knee:
                const += w * t2t
                coef += w * (math.sqrt(d) - 1.0)
            else:
                f = (d - knee) / (dmax - knee)
                const += w * (t2t * (1 - f) + full * f)
                coef += w * (math.sqrt(knee) - 1.0) * (1 - f)
        return (self._avg - const) / coef if coef > 0 else 0.0

    def _mismatch(self, knee: float) -> float:
        """Slope of the square-root part minus slope of the line, at the knee."""
        b = self._fit_b(knee)
        y = self._t2t + b * (math.sqrt(knee) - 1.0)
        return b / (2 * math.sqrt(knee)) - (self._full - y) / (self.max_distance - knee)

    def _fit_knee(self) -> float:
        dmax = self.max_distance
        if dmax < 3:
            return float(dmax)
        lo = 2.0  # at 1 the square-root part is a single point: b is undetermined
        if self._mismatch(lo) <= 0:
            return float(dmax)
        # scan geometrically for the first sign change, then bisect
        hi = lo
        while True:
            nxt = min(hi * 1.25 + 1, dmax - 1e-6)
            if self._mismatch(nxt) <= 0:
                lo, hi = hi, nxt
                break
            if nxt >= dmax - 1e-6:
                return float(min(self._zone_width, dmax))
            hi = nxt
        for _ in range(60):
            mid = (lo + hi) / 2
            if self._mismatch(mid) > 0:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    def __call__(self, distance: int) -> float:
        return self.table[distance]


def _kernel(geometry: DiskGeometry, seek: list[float]) -> object | None:
    """The compiled service loop (``traxfs.ext.diskmodel``) for ``geometry``, if it is built."""
    try:
        from ...ext.diskmodel import ServiceKernel
    except ImportError:
        return None
    spec = geometry.spec
    defective = sorted(geometry.defective_tracks().items())
    ptr = [0]
    for _, slots in defective:
        ptr.append(ptr[-1] + len(slots))

    def q(values: list[int]) -> array:
        return array("q", values)

    return ServiceKernel(
        q([geometry.track_start(t) for t in range(geometry.tracks + 1)]), q(geometry.zone_first_track),
        q([z.sectors_per_track for z in spec.zones]), q([z.track_skew for z in spec.zones]),
        q([z.cylinder_skew for z in spec.zones]), q([t for t, _ in defective]), q(ptr),
        q([s for _, slots in defective for s in slots]), array("d", seek), spec.surfaces,
        spec.head_switch_ms, spec.revolution_ms)


@functools.lru_cache(maxsize=32)
def mechanics_of(spec: DiskSpec) -> Mechanics:
    """The (compiled) model of a disk description, built once and shared: a disk and the host's
    predictor of its head need the same one, and building it — fitting the seek curve, laying out
    the compiled loop's tables — costs ~0.1 s for a full-size disk. A :class:`Mechanics` never
    changes after it is built, so every holder may share it."""
    return Mechanics(DiskGeometry(spec))


class Mechanics:
    """The service-time model of one disk (see the module docstring for the rules).

    ``service`` runs the compiled loop of ``traxfs.ext.diskmodel`` when it is built (``fast``);
    :meth:`reference_service` is the Python definition it must match exactly.
    """

    def __init__(self, geometry: DiskGeometry, *, fast: bool = True):
        self.geometry = geometry
        spec = self.spec = geometry.spec
        self.revolution_ms = spec.revolution_ms
        self.seek_curve = SeekCurve(spec)
        self._seek = self.seek_curve.table
        self._surfaces = spec.surfaces
        self._kernel = _kernel(geometry, self._seek) if fast else None

    def seek_ms(self, from_cyl: int, to_cyl: int) -> float:
        """Seek time between two cylinders (settle included; 0 for the same cylinder)."""
        return self._seek[abs(to_cyl - from_cyl)]

    def move_ms(self, from_track: int, to_track: int) -> float:
        """Time to bring the head from one track onto another (seek and/or head switch)."""
        if from_track == to_track:
            return 0.0
        cf, sf = divmod(from_track, self._surfaces)
        ct, st = divmod(to_track, self._surfaces)
        if cf == ct:
            return self.spec.head_switch_ms
        seek = self._seek[abs(ct - cf)]
        return max(seek, self.spec.head_switch_ms) if sf != st else seek

    def read_track_ms(self, track: int, first_slot: int, slots: int, at: float) -> float:
        """Zero-latency time (ms) to read ``slots`` consecutive physical slots of ``track``,
        starting at ``first_slot``, when the head arrives on the track at time ``at``."""
        g = self.geometry
        n = g.sectors_per_track(track)
        rev = self.revolution_ms
        start = (first_slot + g.skew_offset(track)) % n
        x = ((at % rev) * n / rev - start) % n  # sectors past the portion's first slot
        if x < EPS or n - x < EPS:
            cost = float(slots)
        elif x < slots:  # inside: wait for the next slot, read to the end, wrap for the rest
            cost = n + math.ceil(x - EPS) - x
        else:
            cost = n - x + slots
        return cost * rev / n

    def service(self, lbn: int, count: int, start: float, head_track: int,
                overhead: float | None = None) -> Breakdown:
        """Serve ``count`` sectors from ``lbn`` beginning at ``start`` with the head on ``head_track``.

        ``overhead`` is the command overhead still to pay (default: all of ``spec.overhead_ms``).
        """
        if overhead is None:
            overhead = self.spec.overhead_ms
        if self._kernel is None:
            return self.reference_service(lbn, count, start, head_track, overhead)
        end, seek, rotation, switches, transfer, track = self._kernel.service(lbn, count, start, head_track, overhead)
        return Breakdown(lbn, count, start, end, overhead, seek, rotation, switches, transfer, track)

    def reference_service(self, lbn: int, count: int, start: float, head_track: int, overhead: float) -> Breakdown:
        """The Python definition of :meth:`service` (the compiled loop mirrors it operation by operation)."""
        g = self.geometry
        if count <= 0 or lbn < 0 or lbn + count > g.capacity:
            raise ValueError(f"request [{lbn}, {lbn + count}) is outside the disk (capacity {g.capacity})")
        track = g.track_of(lbn)
        seek = self.move_ms(head_track, track)
        t = start + overhead + seek
        rotation = switches = transfer = 0.0
        pos, end = lbn, lbn + count
        rev = self.revolution_ms
        while True:
            here = min(end, g.track_start(track + 1)) - pos
            if here > 0:
                _, s0 = g.slot_of(pos)
                _, s1 = g.slot_of(pos + here - 1)
                dur = self.read_track_ms(track, s0, s1 - s0 + 1, t)
                xfer = here * rev / g.sectors_per_track(track)
                transfer += xfer
                rotation += dur - xfer
                t += dur
                pos += here
            if pos >= end:
                break
            sw = self.move_ms(track, track + 1)
            switches += sw
            t += sw
            track += 1
        return Breakdown(lbn, count, start, t, overhead, seek, rotation, switches, transfer, track)

    def positioning_ms(self, lbn: int, count: int, start: float, head_track: int,
                       overhead: float | None = None) -> float:
        """Predicted seek + rotational latency of a request started at ``start``."""
        if self._kernel is not None:
            _, seek, rotation, _, _, _ = self._kernel.service(
                lbn, count, start, head_track, self.spec.overhead_ms if overhead is None else overhead)
            return seek + rotation
        return self.service(lbn, count, start, head_track, overhead).positioning

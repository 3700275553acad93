"""The Atropos paper's analytic model (Appendices A and B) as functions, to check the simulator.

The paper argues that quadrangle parameters can be computed rather than tuned because a simple
model of rotation, head switches and zero-latency access predicts measured response times
(Figure 9). These functions are that model, in milliseconds. Expectations are over a uniformly
random landing angle after the seek and are computed exactly, not sampled: every cost below is
linear in the landing angle between consecutive sector boundaries (all breakpoints — block edges,
the end of a partly passed sector — fall on whole sectors), so averaging the cost at the N
mid-sector landings is the exact integral.

One refinement over the paper's text is kept so that the model and the simulator can agree to
the last digit: landing inside a run costs one revolution *plus the rest of the sector the head
landed in* (a sector is transferred whole), half a sector on average.
"""

from __future__ import annotations

import math

from .geometry import DiskSpec

EPS = 1e-4  # sectors; as in mechanics.py, a landing this close to a boundary is on it


def track_access_ms(n: int, k: int, revolution_ms: float, zero_latency: bool = True) -> float:
    """Expected time to read ``k`` sectors of one track (seek excluded), Appendix A.

    Without zero-latency: T(k) = T_rot (N-1)/(2N) + T_rot k/N. With it, landing inside the run
    costs one revolution (+ half a sector), landing g sectors before it costs g + k.
    """
    if not 0 < k <= n:
        raise ValueError(f"a track access reads 1..{n} sectors (got {k})")
    sector = revolution_ms / n
    if not zero_latency:
        return revolution_ms * (n - 1) / (2 * n) + k * sector
    outside = (n - k) / n * ((n - k) / 2 + k)
    inside = k / n * (n + 0.5)
    return (outside + inside) * sector


def streaming_efficiency(n: int, h: int) -> float:
    """Limit of access efficiency when streaming many tracks: N / (N + H)."""
    return n / (n + h)


def _zl(pos: float, b: int, n: int) -> tuple[float, float]:
    """Zero-latency read of a ``b``-sector run when the head arrives ``pos`` sectors past the
    run's start: (sectors of rotation besides the transfer, where the read ends as an offset from
    the run's start). Landing inside, the read ends where it began, on the next sector boundary."""
    pos %= n
    if pos < EPS or n - pos < EPS:
        return 0.0, b
    if pos < b:
        c = math.ceil(pos - EPS)
        return n - b + c - pos, c
    return n - pos, b


def semi_sequential_ms(n: int, h: int, b: int, d: int, revolution_ms: float,
                       switch: float | None = None) -> float:
    """Expected time (seek and overhead excluded) to read a ``d``-deep diagonal of ``b``-sector
    blocks, block ``i`` on the ``i``-th track at angle ``i*(b+h)``, issued as one batch.

    Service is SPTF: the host sends first the block the head reaches soonest, then the firmware
    repeatedly takes the cheapest of the rest. ``switch`` is the time of a move between two tracks
    of the quadrangle, in sectors of rotation (default ``h``: a head switch that the skew exactly
    covers). When the one-revolution constraint ``d*b + (d-1)*h <= n`` fails (Appendix B) a head
    that lands mid-diagonal reads to the end and then waits for the first block to come round.
    """
    if d < 1 or not 0 < b <= n:
        raise ValueError(f"a diagonal needs d >= 1 and 1 <= b <= {n} (got d={d}, b={b})")
    sw = h if switch is None else switch
    angles = [i * (b + h) for i in range(d)]
    total = 0.0
    for slot in range(n):
        x = slot + 0.5
        reads = [_zl(x - a, b, n) for a in angles]
        first = min(range(d), key=lambda i: reads[i][0])
        wait, end = reads[first]
        t = wait + b
        angle = angles[first] + end
        left = [i for i in range(d) if i != first]
        while left:
            arrive = angle + sw
            nxt = min(left, key=lambda i: _zl(arrive - angles[i], b, n)[0])
            wait, end = _zl(arrive - angles[nxt], b, n)
            t += sw + wait + b
            angle = angles[nxt] + end
            left.remove(nxt)
        total += t
    return total / n * revolution_ms / n


def random_fetch_ms(spec: DiskSpec, k: int, zone: int = 0) -> float:
    """Expected time of a random ``k``-sector read inside ``zone`` from another cylinder of it:
    overhead + average seek + zero-latency rotation and transfer, including the runs that
    straddle a track boundary and pay a switch (head switch, or cylinder switch on the last
    surface). Assumes the track-to-track seek is at least the head switch, as in every profile."""
    z = spec.zones[zone]
    n, rev = z.sectors_per_track, spec.revolution_ms
    if not 0 < k <= n:
        raise ValueError(f"a random fetch reads 1..{n} sectors (got {k})")
    sector = rev / n
    single = track_access_ms(n, k, rev) / sector  # sectors; start offsets 0..n-k
    straddle = 0.0
    for skew, switch_ms, weight in ((z.track_skew, spec.head_switch_ms, (spec.surfaces - 1) / spec.surfaces),
                                    (z.cylinder_skew, max(spec.track_to_track_ms, spec.head_switch_ms),
                                     1 / spec.surfaces)):
        sw = switch_ms / sector
        for first in range(1, k):  # sectors left on the first track
            cost = 0.0
            for slot in range(n):  # the first run starts at angle 0; the head lands at x
                w, end = _zl(slot + 0.5, first, n)
                arrive = end + sw  # the next track's first slot is at angle first + skew
                cost += w + first + sw + _zl(arrive - first - skew, k - first, n)[0] + k - first
            straddle += weight * cost / n
    mean = ((n - k + 1) * single + straddle) / n
    return spec.overhead_ms + spec.average_seek_ms + mean * sector


def paper_random_fetch_ms(spec: DiskSpec, k: int, zone: int = 0) -> float:
    """The paper's back-of-envelope form: average seek + half a revolution + transfer + overhead
    (5.93 ms for 8 KB on the Atlas 10K III)."""
    n = spec.zones[zone].sectors_per_track
    rev = spec.revolution_ms
    return spec.average_seek_ms + rev / 2 + k * rev / n + spec.overhead_ms


def diagonal_fetch_ms(spec: DiskSpec, b: int, d: int, zone: int = 0) -> float:
    """Expected time of a random semi-sequential batch (``d`` blocks of ``b`` sectors on one
    quadrangle of ``zone``): overhead + average seek + :func:`semi_sequential_ms` with the
    disk's head switch."""
    z = spec.zones[zone]
    rev = spec.revolution_ms
    switch = spec.head_switch_ms * z.sectors_per_track / rev
    return (spec.overhead_ms + spec.average_seek_ms
            + semi_sequential_ms(z.sectors_per_track, z.track_skew, b, d, rev, switch))

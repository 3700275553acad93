"""The Appendix A/B analytic model against the simulator, and the paper's headline numbers.

The simulator is sampled at landing angles spread evenly over a revolution (a golden-ratio
sequence of start times), so the sample means converge fast and the checks are deterministic.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import replace

import pytest

from traxfs.volume.disk.analytic import (
    diagonal_fetch_ms,
    paper_random_fetch_ms,
    random_fetch_ms,
    semi_sequential_ms,
    streaming_efficiency,
    track_access_ms,
)
from traxfs.volume.disk.profiles import atlas10k3
from traxfs.volume.disk.scheduler import HeadPredictor
from traxfs.volume.disk.simulator import SimulatedDisk

pytestmark = pytest.mark.timeout(60)

ATLAS = atlas10k3()
REV = ATLAS.revolution_ms
N, H = 686, 139
GOLDEN = (math.sqrt(5) - 1) / 2


def spread(i: int) -> float:
    """The i-th of a low-discrepancy sequence of start times (uniform landing angles)."""
    return 1000.0 + 20 * REV * i + (i * GOLDEN % 1.0) * REV


@pytest.fixture(scope="module")
def atlas() -> SimulatedDisk:
    return SimulatedDisk(ATLAS)


def test_paper_numbers() -> None:
    assert paper_random_fetch_ms(ATLAS, 16) == pytest.approx(5.93, abs=0.03)
    assert random_fetch_ms(ATLAS, 16) == pytest.approx(5.93, abs=0.002)  # the calibration
    assert streaming_efficiency(N, H) == pytest.approx(0.83, abs=0.005)
    assert track_access_ms(N, 1, REV, zero_latency=False) == pytest.approx(REV / 2, abs=0.01)
    assert track_access_ms(N, N, REV) == pytest.approx(REV, abs=REV / N)  # zero-latency full track
    # zero-latency only ever helps
    assert all(track_access_ms(N, k, REV) <= track_access_ms(N, k, REV, zero_latency=False) + REV / N
               for k in range(1, N + 1, 5))


@pytest.mark.parametrize("k", [1, 16, 100, 343, 600, 686])
def test_track_aligned_access_matches_the_simulator(atlas: SimulatedDisk, k: int) -> None:
    g, m = atlas.geometry, atlas.mechanics
    track = 1000
    media = [m.service(g.track_start(track), k, spread(i), track).total - ATLAS.overhead_ms for i in range(1500)]
    assert statistics.mean(media) == pytest.approx(track_access_ms(N, k, REV), rel=0.01)


def test_streaming_efficiency_approaches_n_over_n_plus_h(atlas: SimulatedDisk) -> None:
    g, m = atlas.geometry, atlas.mechanics
    b = m.service(g.track_start(400), 200 * N, 0.0, 400)
    # cylinder switches (every 4th track) cost a little more than head switches
    assert b.efficiency == pytest.approx(streaming_efficiency(N, H), rel=0.015)
    assert b.efficiency < streaming_efficiency(N, H)


def test_random_fetch_matches_the_simulator(atlas: SimulatedDisk) -> None:
    g, m = atlas.geometry, atlas.mechanics
    zone = g.zone_tracks(0)
    first = g.track_start(zone.start)
    rng = random.Random(8)
    times = []
    for i in range(6000):
        lbn = first + rng.randrange(g.track_start(zone.stop) - first - 16)
        cyl = g.cylinder(g.track_of(lbn))
        head = rng.randrange(zone.start, zone.stop)
        while g.cylinder(head) == cyl:
            head = rng.randrange(zone.start, zone.stop)
        times.append(m.service(lbn, 16, spread(i), head).total)
    assert statistics.mean(times) == pytest.approx(random_fetch_ms(ATLAS, 16), rel=0.02)


def diagonal_media_ms(disk: SimulatedDisk, d: int, b: int, samples: int = 700) -> float:
    """Mean time after the seek of a host-prescheduled diagonal batch {Q + i(N+b)} on one cylinder."""
    g = disk.geometry
    host = HeadPredictor(disk.spec)
    cyl_tracks = disk.spec.surfaces
    track = 40 * cyl_tracks  # first track of a cylinder: the diagonal stays inside it
    q = g.track_start(track) + 3 * b
    reqs = [(q + i * (N + b), b) for i in range(d)]
    out = []
    for i in range(samples):
        at = spread(i)
        disk.head_track = host.head_track = 200 * cyl_tracks + 1  # another cylinder
        disk.free_at = host.completed_at = at - 5.0
        order = host.order(reqs, at)
        done = disk.submit([reqs[j] for j in order], at)
        first = done[0]
        out.append(max(x.end for x in done) - at - first.overhead - first.seek)
    return statistics.mean(out)


@pytest.mark.parametrize(("d", "b"), [(1, 16), (2, 8), (3, 26), (4, 4), (4, 26), (5, 8), (6, 1), (6, 8)])
def test_semi_sequential_matches_the_simulator(d: int, b: int) -> None:
    """d within and beyond the one-revolution constraint (D = 5 by the linear form for b <= 26,
    4 by the cyclic form), on an 8-surface Atlas so that a diagonal never crosses a cylinder."""
    disk = SimulatedDisk(replace(ATLAS, surfaces=8))
    assert diagonal_media_ms(disk, d, b) == pytest.approx(semi_sequential_ms(N, H, b, d, REV), rel=0.02)


def test_one_revolution_step() -> None:
    """Within the cyclic constraint d(b+H) <= N a diagonal costs at most about a revolution;
    past it the head that lands mid-diagonal waits for the first block to come round."""
    for b in (1, 8, 26):
        within = [semi_sequential_ms(N, H, b, d, REV) for d in range(1, 5)]
        assert within == sorted(within) and within[-1] < REV
        beyond = semi_sequential_ms(N, H, b, 6, REV)
        assert beyond > 1.5 * REV
    assert semi_sequential_ms(N, H, 67, 4, REV) > 1.4 * REV  # d(b+H) = 824 > N


def test_quadrangle_row_fetch_costs_16_and_38_percent_more() -> None:
    """Figure 8: a random 8 KB row read as a diagonal of d blocks of 16/d sectors, pre-scheduled
    on the host, against the contiguous 8 KB read (paper: +16% for d = 2, +38% for d = 4)."""
    base = random_fetch_ms(ATLAS, 16)
    assert diagonal_fetch_ms(ATLAS, 8, 2) / base - 1 == pytest.approx(0.16, abs=0.02)
    assert diagonal_fetch_ms(ATLAS, 4, 4) / base - 1 == pytest.approx(0.37, abs=0.03)

    disk = SimulatedDisk(ATLAS)
    host = HeadPredictor(ATLAS)
    g = disk.geometry
    rng = random.Random(16)
    zone = g.zone_tracks(0)
    for d, expect in ((2, 0.16), (4, 0.37)):
        b = 16 // d
        times = []
        for i in range(3000):
            cyl = rng.randrange(zone.start, zone.stop) // 4
            track = cyl * 4 + rng.randrange(0, 5 - d)
            q = g.track_start(track) + rng.randrange(N // b - d) * b
            reqs = [(q + j * (N + b), b) for j in range(d)]
            head = rng.randrange(zone.start, zone.stop)
            while head // 4 == cyl:
                head = rng.randrange(zone.start, zone.stop)
            at = spread(i)
            disk.head_track = host.head_track = head
            disk.free_at = host.completed_at = at - 1.0
            order = host.order(reqs, at)
            times.append(max(x.end for x in disk.submit([reqs[j] for j in order], at)) - at)
        assert statistics.mean(times) / base - 1 == pytest.approx(expect, abs=0.03)

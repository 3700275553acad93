"""The mechanical disk model and its firmware: breakdowns, zero-latency, switches, SPTF, calibration.

All times are simulated milliseconds, so every assertion is exact or statistical over a fixed
seed; nothing depends on the machine's speed.
"""

from __future__ import annotations

import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traxfs.volume.disk.geometry import DiskGeometry
from traxfs.volume.disk.mechanics import Mechanics
from traxfs.volume.disk.profiles import atlas10k3, cheetah15k3, scaled, with_random_defects
from traxfs.volume.disk.scheduler import HeadPredictor
from traxfs.volume.disk.simulator import SimulatedDisk

pytestmark = pytest.mark.timeout(60)

ATLAS = atlas10k3()
REV = ATLAS.revolution_ms
N = 686
SECTOR_MS = REV / N
SMALL = with_random_defects(scaled(atlas10k3(), 20), 40, seed=5)  # 640 tracks, 40 slipped defects
SMALL_MECH = Mechanics(DiskGeometry(SMALL))


@pytest.fixture(scope="module")
def atlas() -> SimulatedDisk:
    return SimulatedDisk(ATLAS)


def start_on_slot(geometry: DiskGeometry, track: int, slot: int, overhead: float, after: float = 0.0) -> float:
    """A request start time at which, after ``overhead``, the head is exactly at ``slot``'s start."""
    angle = geometry.slot_angle(track, slot) * REV
    t = angle - overhead
    while t < after:
        t += REV
    return t


# ----- breakdown invariants -----------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(lbn=st.integers(0, 10**9), count=st.integers(1, 3000), start=st.floats(0, 1e7), head=st.integers(0, 10**6))
def test_breakdown_sums_to_total(lbn: int, count: int, start: float, head: int) -> None:
    g = SMALL_MECH.geometry
    lbn %= g.capacity - count
    head %= g.tracks
    b = SMALL_MECH.service(lbn, count, start, head)
    parts = b.overhead + b.seek + b.rotation + b.switches + b.transfer
    assert parts == pytest.approx(b.total, abs=1e-6)
    assert min(b.seek, b.rotation, b.switches, b.transfer) >= -1e-9
    assert b.end_track == g.track_of(lbn + count - 1)
    per_track = sum(min(lbn + count, g.track_start(t + 1)) - max(lbn, g.track_start(t))
                    for t in range(g.track_of(lbn), b.end_track + 1))
    assert per_track == count
    # transfer is the sectors' own time; every track touched costs at most one revolution + a sector
    assert b.transfer == pytest.approx(sum(
        (min(lbn + count, g.track_start(t + 1)) - max(lbn, g.track_start(t))) * REV / g.sectors_per_track(t)
        for t in range(g.track_of(lbn), b.end_track + 1)), rel=1e-9)
    tracks = b.end_track - g.track_of(lbn) + 1
    assert b.rotation + b.transfer <= tracks * (REV + REV / 490) + 1e-9
    assert 0 < b.efficiency < 1


def test_seek_curve_fits_the_data_sheet() -> None:
    curve = Mechanics(DiskGeometry(ATLAS)).seek_curve
    c = ATLAS.zones[0].cylinders
    pairs = [(i, j) for i in range(0, c, 7) for j in range(0, c, 7) if i != j]
    assert curve(0) == 0 and curve(1) == pytest.approx(ATLAS.track_to_track_ms)
    assert curve(ATLAS.cylinders - 1) == pytest.approx(ATLAS.full_stroke_ms)
    assert statistics.mean(curve(abs(i - j)) for i, j in pairs) == pytest.approx(ATLAS.average_seek_ms, abs=0.01)
    assert all(a <= b for a, b in zip(curve.table[1:], curve.table[2:], strict=False))  # monotone


# ----- zero-latency, switches, skews --------------------------------------------------------------
def test_sequential_read_across_tracks_and_a_cylinder_never_loses_a_revolution(atlas: SimulatedDisk) -> None:
    g, m = atlas.geometry, atlas.mechanics
    first, tracks = 2, 9  # tracks 2..10: head switches and two cylinder switches (4 surfaces)
    lbn = g.track_start(first)
    start = start_on_slot(g, first, 0, ATLAS.overhead_ms)
    b = m.service(lbn, tracks * N, start, head_track=first)
    cyl_switches = sum(1 for t in range(first, first + tracks - 1) if g.cylinder(t) != g.cylinder(t + 1))
    head_switches = tracks - 1 - cyl_switches
    assert cyl_switches == 2
    assert b.seek == 0 and b.transfer == pytest.approx(tracks * REV)
    assert b.switches == pytest.approx(head_switches * ATLAS.head_switch_ms + cyl_switches * ATLAS.track_to_track_ms)
    # the skews cover the switches exactly (head) or up to the ceiling's slack (cylinder): no revolution lost
    slack = ATLAS.zones[0].cylinder_skew - ATLAS.track_to_track_ms / SECTOR_MS
    assert b.rotation == pytest.approx(cyl_switches * slack * SECTOR_MS, abs=1e-6)
    assert b.total == pytest.approx(b.overhead + b.transfer + b.switches + b.rotation)


def test_full_track_read_takes_one_revolution_whatever_the_angle(atlas: SimulatedDisk) -> None:
    g, m = atlas.geometry, atlas.mechanics
    lbn = g.track_start(400)
    for i in range(50):
        b = m.service(lbn, N, start=i * 0.137, head_track=1200)
        media = b.total - b.overhead - b.seek
        assert REV <= media <= REV + SECTOR_MS + 1e-9
        assert b.seek == pytest.approx(m.move_ms(1200, 400))


def test_unaligned_track_sized_reads_lose_over_a_third_to_positioning(atlas: SimulatedDisk) -> None:
    g, m = atlas.geometry, atlas.mechanics
    rng = random.Random(11)
    zone = g.zone_tracks(0)
    positioning = media = 0.0
    for _ in range(2000):
        t = rng.randrange(zone.start, zone.stop - 1)
        b = m.service(g.track_start(t) + rng.randrange(1, N), N, rng.uniform(0, 1e5), rng.randrange(zone.start, zone.stop))
        positioning += b.rotation + b.switches
        media += b.rotation + b.switches + b.transfer
    assert positioning / media > 1 / 3  # the traxtent effect (rotational latency + head switch)


def test_landing_before_a_run_costs_the_gap_plus_the_run(atlas: SimulatedDisk) -> None:
    g, m = atlas.geometry, atlas.mechanics
    track, gap, k = 300, 40, 16
    lbn = g.track_start(track) + 100
    start = start_on_slot(g, track, 100 - gap, ATLAS.overhead_ms)
    b = m.service(lbn, k, start, head_track=track)
    assert b.rotation == pytest.approx(gap * SECTOR_MS) and b.transfer == pytest.approx(k * SECTOR_MS)
    inside = m.service(lbn, k, start_on_slot(g, track, 105, ATLAS.overhead_ms), head_track=track)
    assert inside.rotation + inside.transfer == pytest.approx(REV)


def test_slipped_defects_shorten_a_track_but_not_its_revolution() -> None:
    clean = scaled(atlas10k3(), 20)
    spec = clean.with_defects(((3, 1, 10), (3, 1, 300), (3, 1, 685)))
    g = DiskGeometry(spec)
    m = Mechanics(g)
    t = 3 * spec.surfaces + 1
    assert g.track_lbns(t) == N - 3 and g.track_start(t + 1) - g.track_start(t) == N - 3
    for i in range(20):
        b = m.service(g.track_start(t), N - 3, start=i * 0.31, head_track=t)
        assert b.transfer == pytest.approx((N - 3) * SECTOR_MS)
        assert REV <= b.rotation + b.transfer <= REV + SECTOR_MS + 1e-9
    # the LBNs after the defective track moved by three slots
    assert g.track_start(t + 1) == DiskGeometry(clean).track_start(t + 1) - 3


# ----- the firmware queue -------------------------------------------------------------------------
def _spread_requests(g: DiskGeometry, track: int) -> list[tuple[int, int]]:
    return [(g.track_start(track) + s, 8) for s in (600, 50, 300, 450)]


def test_idle_disk_dispatches_the_first_request_of_a_batch() -> None:
    disk = SimulatedDisk(ATLAS)
    g = disk.geometry
    reqs = _spread_requests(g, 500)
    at = 1000.0
    disk.head_track, disk.free_at = 500, 0.0
    costs = [disk.positioning_ms(lbn, n, at) for lbn, n in reqs]
    assert min(costs) < costs[0]  # the first is not the cheapest...
    done = disk.submit(reqs, at)
    assert done[0].start == at and done[0].queued == 0  # ...yet it is served first
    assert all(b.start >= done[0].end for b in done[1:])
    assert all(b.overhead == 0 for b in done[1:])  # their commands were processed meanwhile


def test_queued_requests_are_served_shortest_positioning_first() -> None:
    disk = SimulatedDisk(ATLAS)
    reqs = _spread_requests(disk.geometry, 500)
    disk.head_track, disk.free_at = 500, 50.0  # busy until 50: the whole batch waits in the queue
    ref = SimulatedDisk(ATLAS)
    ref.head_track, ref.free_at = 500, 50.0
    done = disk.submit(reqs, at=10.0)
    served = sorted(range(len(reqs)), key=lambda i: done[i].start)
    pending = list(range(len(reqs)))
    for i in served:  # each choice is the cheapest from where the previous one left the head
        costs = {j: ref.positioning_ms(*reqs[j], 10.0) for j in pending}
        assert costs[i] == min(costs.values())
        ref.access(*reqs[i], 10.0)
        pending.remove(i)
    assert ref.free_at == disk.free_at and ref.head_track == disk.head_track


def test_wait_for_batch_firmware_starts_with_the_cheapest() -> None:
    disk = SimulatedDisk(ATLAS, wait_for_batch=True)
    reqs = _spread_requests(disk.geometry, 500)
    disk.head_track = 500
    costs = [disk.positioning_ms(lbn, n, 1000.0) for lbn, n in reqs]
    done = disk.submit(reqs, 1000.0)
    first = min(range(len(reqs)), key=lambda i: done[i].start)
    assert costs[first] == min(costs) and done[first].start == 1000.0


def test_access_queues_behind_the_previous_request() -> None:
    disk = SimulatedDisk(ATLAS)
    a = disk.access(1000, 16, at=0.0)
    b = disk.access(500_000, 16, at=0.0)
    assert b.start == a.end and b.queued == a.end
    assert disk.free_at == b.end and disk.head_track == disk.geometry.track_of(500_015)


def test_probe_is_closed_loop() -> None:
    disk = SimulatedDisk(ATLAS)
    i1, c1 = disk.probe(0, 1)
    i2, c2 = disk.probe(686, 1, delay_ms=0.5)
    assert i1 == 0.0 and c1 > i1 and i2 == pytest.approx(c1 + 0.5) and c2 > i2
    with pytest.raises(ValueError):
        disk.probe(0, 1, delay_ms=-1)


def test_requests_outside_the_disk_are_refused() -> None:
    disk = SimulatedDisk(SMALL)
    with pytest.raises(ValueError):
        disk.access(disk.capacity - 4, 8, 0.0)
    with pytest.raises(ValueError):
        disk.access(0, 0, 0.0)


# ----- host pre-scheduling ------------------------------------------------------------------------
def test_head_predictor_sends_the_cheapest_first_and_matches_the_disk() -> None:
    disk, host = SimulatedDisk(ATLAS), HeadPredictor(ATLAS)
    g = disk.geometry
    rng = random.Random(3)
    for _ in range(30):
        b = disk.access(rng.randrange(g.capacity - 16), 16, disk.free_at + rng.uniform(0, 5))
        host.observe(b.lbn, b.count, b.end)
        at = b.end + rng.uniform(0, 3)
        t = rng.randrange(g.tracks - 4)
        reqs = [(g.track_start(t + i) + rng.randrange(600), 8) for i in range(4)]
        order = host.order(reqs, at)
        assert sorted(order) == [0, 1, 2, 3]
        costs = [disk.positioning_ms(lbn, n, at) for lbn, n in reqs]
        assert costs[order[0]] == min(costs)  # the host's model predicts the disk exactly
        done = disk.submit([reqs[i] for i in order], at)
        last = max(done, key=lambda x: x.end)
        host.observe(last.lbn, last.count, last.end)
        assert (host.head_track, host.completed_at) == (disk.head_track, disk.free_at)


# ----- calibration ----------------------------------------------------------------------------------
def test_random_8k_read_in_the_outer_zone_averages_5_93_ms(atlas: SimulatedDisk) -> None:
    g, m = atlas.geometry, atlas.mechanics
    rng = random.Random(593)
    zone = g.zone_tracks(0)
    first, last = g.track_start(zone.start), g.track_start(zone.stop) - 16
    times = []
    for _ in range(20_000):
        lbn = rng.randrange(first, last)
        cyl = g.cylinder(g.track_of(lbn))
        head = rng.randrange(zone.start, zone.stop)
        while g.cylinder(head) == cyl:
            head = rng.randrange(zone.start, zone.stop)
        times.append(m.service(lbn, 16, rng.uniform(0, 1e6), head).total)
    assert statistics.mean(times) == pytest.approx(5.93, abs=0.03)


def test_other_profiles_stream_without_losing_revolutions() -> None:
    spec = scaled(cheetah15k3(), 10)
    g = DiskGeometry(spec)
    m = Mechanics(g)
    n = spec.zones[0].sectors_per_track
    start = g.slot_angle(0, 0) * spec.revolution_ms - spec.overhead_ms + spec.revolution_ms
    b = m.service(0, 20 * n, start, 0)
    assert b.rotation < 20 * spec.revolution_ms / n  # under a sector per switch


# ----- the compiled loop ---------------------------------------------------------------------------
def test_compiled_loop_gives_identical_breakdowns() -> None:
    """traxfs.ext.diskmodel mirrors Mechanics.reference_service operation by operation."""
    from traxfs.ext.diskmodel import ServiceKernel  # noqa: F401  (the extension must be built)

    for spec in (SMALL, ATLAS):
        g = DiskGeometry(spec)
        fast, ref = Mechanics(g), Mechanics(g, fast=False)
        rng = random.Random(77)
        zone_ends = [g.track_start(z.start) for z in (g.zone_tracks(i) for i in range(1, len(spec.zones)))]
        for i in range(5000):
            count = rng.choice((1, 8, 16, 700, 3000))
            lbn = rng.randrange(g.capacity - count) if i % 5 else max(0, rng.choice(zone_ends) - count // 2)
            args = (lbn, count, rng.uniform(0, 1e8), rng.randrange(g.tracks), rng.choice((0.0, spec.overhead_ms)))
            assert fast.service(*args) == ref.service(*args)
            assert fast.positioning_ms(*args) == ref.positioning_ms(*args)
        with pytest.raises(ValueError):
            fast.service(g.capacity, 1, 0.0, 0)

"""The quadrangle layout (and zoned traxtent): the VLBN → (disk, DLBN) mapping, volumes on devices
with tracks, the Atropos interface on them, and their metadata.

The pure-mapping properties are checked against a reference written straight from the rule in
``layout/quadrangle.py`` (and digest §3), with the usable tracks found by brute force over every
track of the zone. The volume tests then store data through the layout on image files labelled
with a disk description (scaled-down profiles so images stay small) and compare with a model.
"""

from __future__ import annotations

import copy
import json
import os
import random
from dataclasses import replace

import pytest
from conftest import MiB, head_hash
from hypothesis import given, settings
from hypothesis import strategies as st

from traxfs.tools.cli import main as cli_main
from traxfs.volume.disk.geometry import SECTOR, DiskGeometry, DiskSpec, Zone
from traxfs.volume.disk.profiles import atlas10k3, scaled, with_random_defects
from traxfs.volume.disk.simulator import SimulatedDisk
from traxfs.volume.errors import MetadataError, NoSpaceError, UsageError
from traxfs.volume.group import VolumeGroup, list_groups
from traxfs.volume.layout.quadrangle import QuadLegMap, usable_rows
from traxfs.volume.logical import Request
from traxfs.volume.metadata_area import write_slots
from traxfs.volume.model import Area, Quadrangle, Segment, VolumeGroupMeta
from traxfs.volume.scan import pv_create, scan_one
from traxfs.volume.simdevice import SimulatedDevice

pytestmark = pytest.mark.timeout(120)


# ----- pure mapping: generated disks and legs ------------------------------------------------------

def small_spec(n: int, h: int, surfaces: int, cylinders: int, defects: set[tuple[int, int, int]],
               cyl_skew: int | None = None) -> DiskSpec:
    """A two-zone disk: zone 0 has tracks of ``n`` sectors (the one the volumes use)."""
    zones = (Zone(cylinders, n, h, h if cyl_skew is None else cyl_skew), Zone(cylinders, n - 4, h, h))
    spec = DiskSpec("tiny", 10_000, surfaces, zones, 1.0, 1.2, 2.0, 8.0, 0.3)
    return spec.with_defects(tuple(defects))


@st.composite
def quad_legs(draw):
    """A leg of 1-3 segments over p disks of one model (own defects), with its parameters."""
    n = draw(st.integers(12, 80))
    h = draw(st.integers(0, n - 1))
    b = draw(st.integers(1, max(1, n // 3)))
    d = draw(st.integers(1, 4))
    w = n // b
    surfaces = draw(st.integers(1, 4))
    cylinders = 12
    p = draw(st.integers(1, 4))
    extent = 4096 * draw(st.integers(1, 4))  # 8-32 sectors: extents and tracks cut each other
    pvs = [f"pv{k}" for k in range(p)]
    geos, cursor, pe_start = {}, {}, {}
    for pv in pvs:
        defects = draw(st.sets(st.tuples(st.integers(0, cylinders - 1), st.integers(0, surfaces - 1),
                                          st.integers(0, n - 5)), max_size=8))
        geos[pv] = DiskGeometry(small_spec(n, h, surfaces, cylinders, defects))
        pe_start[pv] = SECTOR * draw(st.integers(0, 30))
        cursor[pv] = draw(st.integers(0, 2))
    segments, le = [], 0
    for _ in range(draw(st.integers(1, 3))):
        per = draw(st.integers(1, 6))
        areas = []
        for pv in draw(st.permutations(pvs)):
            cursor[pv] += draw(st.integers(0, 2))
            areas.append(Area(pv, cursor[pv]))
            cursor[pv] += per
        segments.append(Segment(le, per * p, areas))
        le += per * p
    quad = Quadrangle(0, n, h, d, b, w)
    return QuadLegMap(segments, extent, quad, pe_start, geos), segments, extent, pe_start, geos


def brute_rows(geo: DiskGeometry, lo: int, hi: int, need: int, d: int) -> list[int]:
    """Usable tracks of zone 0 inside [lo, hi), no cleverness: every run of d physically
    consecutive usable tracks (inside one cylinder when d fits one), taken greedily from the left."""
    usable = [t for t in geo.zone_tracks(0)
              if lo <= geo.track_start(t) and geo.track_start(t) + geo.track_lbns(t) <= hi
              and geo.track_lbns(t) >= need]
    ok, out = set(usable), []
    t = usable[0] if usable else 0
    while usable and t <= usable[-1]:
        run = list(range(t, t + d))
        if all(x in ok for x in run) and (d > geo.surfaces or geo.cylinder(run[0]) == geo.cylinder(run[-1])):
            out += [geo.track_start(x) for x in run]
            t += d
        else:
            t += 1
    return out


def reference(segments, extent, pe_start, geos, quad: Quadrangle) -> list[tuple[str, int]]:
    """(pv, DLBN) of every VLBN of the leg, in order, from the rule as the digest writes it."""
    out = []
    s_global = 0
    for seg in segments:
        per = seg.count // seg.stripes * extent
        rows = [brute_rows(geos[a.pv], (pe_start[a.pv] + a.pe * extent) // SECTOR,
                           (pe_start[a.pv] + a.pe * extent + per) // SECTOR, quad.row_sectors, quad.depth)
                for a in seg.areas]
        p, w, d = len(seg.areas), quad.width, quad.depth
        for s_local in range(min(map(len, rows)) // d):
            s = s_global + s_local
            for r in range(p * w * d):
                i, c = divmod(r, p * w)
                k, j = divmod(c, w)
                disk = (k + s) % p
                out.append((seg.areas[disk].pv, rows[disk][s_local * d + i] + (i + j) % w * quad.block))
        s_global += min(map(len, rows)) // d
    return out


@settings(max_examples=150)
@given(leg=quad_legs())
def test_mapping_is_a_bijection_onto_the_usable_rows(leg):
    lm, segments, extent, pe_start, geos = leg
    q = lm.quad
    ref = reference(segments, extent, pe_start, geos, q)
    assert lm.vlbns == len(ref) and lm.size == len(ref) * q.block * SECTOR
    assert [lm.locate(v) for v in range(lm.vlbns)] == ref
    # every sector of the used rows is hit exactly once
    hit: dict[str, list[int]] = {}
    for pv, dlbn in ref:
        hit.setdefault(pv, []).extend(range(dlbn, dlbn + q.block))
    for pv, sectors in hit.items():
        assert len(sectors) == len(set(sectors)), "two VLBNs share a sector"
        rows = {geos[pv].track_start(geos[pv].track_of(s)) for s in sectors}  # rows: [start, start + w·b)
        assert set(sectors) == {r + x for r in rows for x in range(q.row_sectors)}, "a used row is not fully used"
        for r in rows:
            assert geos[pv].track_lbns(geos[pv].track_of(r)) >= q.row_sectors  # no track with > R defects


@settings(max_examples=100)
@given(leg=quad_legs(), data=st.data())
def test_pieces_and_runs_follow_the_mapping(leg, data):
    lm = leg[0]
    if not lm.size:
        return
    bb = lm.quad.block * SECTOR
    offset = data.draw(st.integers(0, lm.size - 1))
    length = data.draw(st.integers(0, min(lm.size - offset, 6 * lm.pw * bb)))

    def where(x: int) -> tuple[str, int]:
        pv, dlbn = lm.locate(x // bb)
        return pv, dlbn * SECTOR + x % bb

    got = {}
    for p in lm.pieces(offset, length):
        for k in range(p.length):
            got[offset + p.buf_offset + k] = (p.pv, p.dev_offset + k)
    assert got == {x: where(x) for x in range(offset, offset + length)}
    via_runs = {}
    for run in lm.runs(offset, length):
        dev = run.dev_offset
        for buf_off, n in run.parts:  # parts are in device order and contiguous on the device
            for k in range(n):
                via_runs[offset + buf_off + k] = (run.pv, dev + k)
            dev += n
    assert via_runs == got


def test_a_full_row_is_one_device_io():
    spec = small_spec(40, 7, 2, 20, set())
    geos = {"a": DiskGeometry(spec), "b": DiskGeometry(spec)}
    quad = Quadrangle(0, 40, 7, 3, 4, 10)
    lm = QuadLegMap([Segment(0, 8, [Area("a", 0), Area("b", 0)])], 4096 * 4, quad, {"a": 0, "b": 0}, geos)
    row = quad.row_sectors * SECTOR
    for i in range(quad.depth):  # row i is rotated by i blocks but still one contiguous run
        runs = lm.runs(i * 2 * row, row)
        assert len(runs) == 1 and runs[0].dev_offset == i * 40 * SECTOR and sum(n for _, n in runs[0].parts) == row
    # a rectangle (one row on every disk) is one I/O per disk
    assert sorted(r.pv for r in lm.runs(0, 2 * row)) == ["a", "b"]


def test_zoned_traxtent_rows_are_whole_tracks_and_merge():
    spec = small_spec(40, 7, 2, 20, {(0, 1, 5)})
    geo = DiskGeometry(spec)
    quad = Quadrangle(0, 40, 7, 1, 1, 40)
    lm = QuadLegMap([Segment(0, 4, [Area("a", 0)])], 4096 * 4, quad, {"a": 0}, {"a": geo})
    # track 1 has a slipped defect (39 LBNs): skipped; track 2 starts at LBN 79; track 3 ends past
    # the 4 extents (128 sectors)
    assert usable_rows(geo, 0, 0, 4 * 32, 40) == [0, 79]
    assert lm.locate(40) == ("a", 79)
    runs = lm.runs(0, 2 * 40 * SECTOR)
    assert [(r.dev_offset, sum(n for _, n in r.parts)) for r in runs] == [(0, 40 * SECTOR), (79 * SECTOR, 40 * SECTOR)]
    lm = QuadLegMap([Segment(0, 8, [Area("a", 8)])], 4096 * 4, quad, {"a": 0}, {"a": geo})
    runs = lm.runs(0, 3 * 40 * SECTOR)  # area from LBN 256; adjacent defect-free tracks: one I/O
    assert [(r.dev_offset, sum(n for _, n in r.parts)) for r in runs] == [(279 * SECTOR, 120 * SECTOR)]


def test_equivalent_blocks_lie_on_the_diagonal():
    """Without defects the d blocks of a column are at {Q + i·(N + b)}; in angle each starts b + H
    sectors after the previous one (R more where the column wraps past w)."""
    n, h, b, d = 60, 9, 7, 4
    spec = small_spec(n, h, 8, 10, set())  # 8 surfaces: a 4-track quadrangle may cross a cylinder
    geo = DiskGeometry(spec)
    quad = Quadrangle(0, n, h, d, b, n // b)
    w, r = quad.width, n - quad.width * b
    lm = QuadLegMap([Segment(0, 20, [Area("a", 0)])], 4096 * 3, quad, {"a": 0}, {"a": geo})
    for v0 in range(0, lm.vlbns, lm.pw):  # column 0 of every row 0: j = 0
        if v0 % lm.group:
            continue
        q0 = lm.locate(v0)[1]
        assert [lm.locate(v)[1] for v in lm.equivalent(v0)] == [q0 + i * (n + b) for i in range(d)]
    for v in range(0, lm.vlbns, 5):
        col = lm.equivalent(v)
        assert v in col and len(col) == d and all(y - x == lm.pw for x, y in zip(col, col[1:], strict=False))
        angles = [geo.slot_angle(*geo.slot_of(lm.locate(u)[1])) for u in col]
        j = v % w
        for i in range(d - 1):
            wrapped = (i + j) % w == w - 1
            step = (angles[i + 1] - angles[i]) * n % n
            assert step == pytest.approx((b + h + (r if wrapped else 0)) % n), (v, i)


def test_quadrangles_rotate_over_the_disks():
    spec = small_spec(40, 7, 2, 30, set())
    geos = {k: DiskGeometry(spec) for k in "abc"}
    quad = Quadrangle(0, 40, 7, 2, 8, 5)
    lm = QuadLegMap([Segment(0, 12, [Area("a", 0), Area("b", 0), Area("c", 0)])], 4096 * 4, quad,
                    dict.fromkeys("abc", 0), geos)
    for s in range(lm.vlbns // lm.group):
        for k in range(3):
            assert lm.locate(s * lm.group + k * quad.width)[0] == "abc"[(k + s) % 3]


# ----- volumes on devices with tracks ----------------------------------------------------------------

VG = "zvg"
SPEC = scaled(atlas10k3(), 40, zones=2)  # zone 0: N = 686, H = 139, 160 tracks; 110 MB images


def zoned_pvs(registry, tmp_path, n: int, spec: DiskSpec = SPEC, prefix: str = "disk") -> list[str]:
    """Simulated disks (``trax pv create --model``): image files whose PVs carry the disk model as
    their geometry. With the default model, every other disk has a few slipped defects."""
    paths = []
    for k in range(n):
        path = str(tmp_path / f"{prefix}{k}.img")
        pv_create(registry, path, model=with_random_defects(spec, 6, seed=k) if spec is SPEC and k % 2 else spec)
        paths.append(path)
    return paths


@pytest.fixture
def zoned_vg(registry, tmp_path):
    paths = zoned_pvs(registry, tmp_path, 4)
    VolumeGroup.create(registry, VG, paths, extent_size=MiB)
    return registry, paths


def check_data(olv, rng: random.Random, rounds: int = 25) -> None:
    """Random writes and reads against a bytearray model, some crossing rows and disks."""
    model = bytearray(olv.read(0, olv.size))
    for _ in range(rounds):
        off = rng.randrange(olv.size)
        n = min(olv.size - off, rng.choice([1, 511, 4096, 50_000, 700_000]))
        if rng.random() < 0.6:
            data = rng.randbytes(n)
            olv.write(off, data)
            model[off : off + n] = data
        else:
            assert olv.read(off, n) == bytes(model[off : off + n])
    assert olv.read(0, olv.size) == bytes(model)


@pytest.mark.parametrize("layout, kw", [("quadrangle", {}), ("quadrangle", {"block": 26, "depth": 5}),
                                        ("quadrangle", {"mirror": True}), ("traxtent", {})])
def test_zoned_volume_stores_data(zoned_vg, layout, kw):
    registry, _ = zoned_vg
    with VolumeGroup.open(registry, VG) as vg:
        lv = vg.create_lv("v", 12 * MiB, layout, **kw)
        q = lv.quadrangle
        assert q.zone == 0 and q.sectors == 686 and q.skew == 139
        assert lv.size >= 12 * MiB and lv.size % (q.block * SECTOR) == 0
        assert lv.stripe_unit == q.row_sectors * SECTOR
        if layout == "traxtent":
            assert (q.depth, q.block, q.width) == (1, 1, 686)
        elif "block" in kw:
            assert (q.depth, q.block, q.width) == (5, 26, 26)
        else:
            assert (q.depth, q.block, q.width) == (4, 8, 85)  # the default: cyclic D for 4 KiB blocks
        assert lv.stripes == (2 if kw.get("mirror") else 4)
        olv = vg.open_lv("v")
        check_data(olv, random.Random(7))
        olv.flush()
        want = olv.read(0, olv.size)
    with VolumeGroup.open(registry, VG) as vg:  # what the document says maps the same way again
        assert vg.open_lv("v").read(0, len(want)) == want


def test_mirror_legs_are_disjoint_and_both_hold_the_data(zoned_vg):
    registry, _ = zoned_vg
    with VolumeGroup.open(registry, VG) as vg:
        lv = vg.create_lv("m", 6 * MiB, "quadrangle", mirror=True)
        a, b = ({x.pv for s in leg.segments for x in s.areas} for leg in lv.legs)
        assert not a & b and len(a) == len(b) == 2
        olv = vg.open_lv("m")
        data = random.Random(3).randbytes(olv.size)
        olv.write(0, data)
        for leg in range(2):  # read each copy on its own
            buf = bytearray(olv.size)
            olv._run_io(leg, olv.legs[leg].runs(0, olv.size), memoryview(buf), write=False)
            assert bytes(buf) == data


def test_mirror_survives_a_lost_disk_and_resyncs_onto_a_replacement(zoned_vg, registry, tmp_path):
    _, paths = zoned_vg
    rng = random.Random(9)
    with VolumeGroup.open(registry, VG) as vg:
        lv = vg.create_lv("m", 6 * MiB, "quadrangle", mirror=True)
        olv = vg.open_lv("m")
        data = bytearray(rng.randbytes(olv.size))
        olv.write(0, data)
        olv.flush()
        gone = vg.meta.pv(lv.legs[1].segments[0].areas[0].pv).path
    os.remove(gone)
    with VolumeGroup.open(registry, VG, partial=True) as vg:
        olv = vg.open_lv("m")
        assert olv.readable_legs() == [0] and olv.read(0, olv.size) == data
        olv.write(1000, b"degraded" * 100)
        data[1000:1800] = b"degraded" * 100
        flat = str(tmp_path / "flat.img")
        pv_create(registry, flat, size=64 * MiB)
        with pytest.raises(UsageError, match="cannot replace.*no zone 0"):
            vg.replace_pv(gone, flat)
    with VolumeGroup.open(registry, VG, partial=True) as vg:
        (new,) = zoned_pvs(registry, tmp_path, 1, prefix="spare")
        assert vg.replace_pv(gone, new) == ["m"]
        assert vg.resync_lv("m") == len(data)  # the stale leg, copied once
        olv = vg.open_lv("m")
        for leg in range(2):
            buf = bytearray(olv.size)
            olv._run_io(leg, olv.legs[leg].runs(0, olv.size), memoryview(buf), write=False)
            assert buf == data, f"leg {leg} after resync"


def test_atropos_interface_on_a_quadrangle_volume(zoned_vg):
    registry, _ = zoned_vg
    with VolumeGroup.open(registry, VG) as vg:
        lv = vg.create_lv("q", 8 * MiB, "quadrangle", block=4)
        q = lv.quadrangle
        olv = vg.open_lv("q")
        p, w, b, d = 4, q.width, q.block, q.depth
        assert olv.parallelism() == p and olv.mode_sense() == (p, w * b)
        for lbn in (0, 3, w * b - 1, w * b, 7 * w * b + 5, olv.size // SECTOR - 1):
            first, count = olv.boundaries(lbn)
            assert count == w * b and first <= lbn < first + count and first % (w * b) == 0
            r_first, r_count = olv.rectangle(lbn)
            assert r_count == p * w * b and r_first <= lbn < r_first + r_count
            eq = olv.equivalent(lbn)
            assert len(eq) == d and lbn in eq and all(y - x == p * w * b for x, y in zip(eq, eq[1:], strict=False))
            # the set is one quadrangle: one disk, d consecutive usable rows
            places = [olv.legs[0].locate(x // b) for x in eq]
            assert len({pv for pv, _ in places}) == 1
        # one rectangle = one I/O per disk; one row = one I/O on one disk
        assert sorted(r.pv for r in olv.legs[0].runs(0, p * w * b * SECTOR)) == sorted(lv.pvs())
        assert len(olv.legs[0].runs(w * b * SECTOR, w * b * SECTOR)) == 1
        assert olv.align_up(1) == w * b * SECTOR


def test_batch_equals_one_by_one_on_a_quadrangle_volume(zoned_vg):
    registry, _ = zoned_vg
    rng = random.Random(11)
    with VolumeGroup.open(registry, VG) as vg:
        vg.create_lv("q", 8 * MiB, "quadrangle")
        olv = vg.open_lv("q")
        olv.write(0, rng.randbytes(olv.size))
        bb = olv.meta.quadrangle.block * SECTOR
        # a semi-sequential batch (a whole column of every quadrangle of one stripe) and random reads
        col = [Request(lbn * SECTOR, length=bb) for lbn in olv.equivalent(0)]
        rand = [Request(k * 100_003, length=9_000) for k in range(1, 20)]
        for reqs in (col, rand):
            assert olv.batch(reqs) == [olv.read(r.offset, r.length) for r in reqs]
        writes = [Request(k * 7 * bb, data=rng.randbytes(bb)) for k in range(30)]
        assert olv.batch(writes) == [None] * 30
        assert [olv.read(r.offset, bb) for r in writes] == [r.data for r in writes]


def test_flat_devices_refuse_quadrangle_and_nothing_changes(registry, make_pvs):
    paths = make_pvs(2, size=16 * MiB)
    VolumeGroup.create(registry, "flat", paths, extent_size=MiB)
    before = ({n: m.to_doc() for n, m in list_groups(registry).items()}, [head_hash(p) for p in paths])
    with VolumeGroup.open(registry, "flat") as vg:
        with pytest.raises(UsageError, match="needs devices with tracks.*no track skew"):
            vg.create_lv("q", MiB, "quadrangle")
        with pytest.raises(UsageError, match="quadrangle and zoned traxtent volumes only"):
            vg.create_lv("t", MiB, "traxtent", depth=2)
        lv = vg.create_lv("t", 2 * MiB, "traxtent")  # flat traxtent: as before
        assert lv.quadrangle is None and lv.stripe_unit == 256 * 1024
        vg.remove_lv("t")
    after = ({n: m.to_doc() for n, m in list_groups(registry).items()}, [head_hash(p) for p in paths])
    assert after[0]["flat"]["seq"] == before[0]["flat"]["seq"] + 2
    after[0]["flat"]["seq"] = before[0]["flat"]["seq"]
    assert after[0] == before[0]


@pytest.mark.parametrize("kw, match", [
    ({"zone": 5}, "no zone 5"),
    ({"block": 700}, "does not fit a track"),
    ({"depth": 6}, "no block fits 6 tracks"),
    ({"stripe_unit": 65536}, "--stripe-unit does not apply"),
    ({"stripes": 5}, "5 stripes need 5 devices"),
])
def test_bad_quadrangle_requests_change_nothing(zoned_vg, kw, match):
    registry, paths = zoned_vg
    before = (list_groups(registry)[VG].to_doc(), [head_hash(p) for p in paths])
    with VolumeGroup.open(registry, VG) as vg, pytest.raises(UsageError, match=match):
        vg.create_lv("q", MiB, "quadrangle", **kw)
    assert (list_groups(registry)[VG].to_doc(), [head_hash(p) for p in paths]) == before


def test_disks_of_another_model_are_refused(registry, tmp_path):
    other = replace(SPEC, zones=(Zone(40, 600, 120, 140), Zone(40, 560, 110, 130)))
    paths = zoned_pvs(registry, tmp_path, 1) + zoned_pvs(registry, tmp_path, 1, spec=other, prefix="other")
    VolumeGroup.create(registry, VG, paths, extent_size=MiB)
    with VolumeGroup.open(registry, VG) as vg:
        with pytest.raises(UsageError, match="zone 0 differs between the devices"):
            vg.create_lv("q", MiB, "quadrangle")
        lv = vg.create_lv("q", MiB, "quadrangle", stripes=1, pvs=[paths[1]])  # one model: fine
        assert lv.quadrangle.sectors == 600


def test_volume_stays_in_its_zone_and_grows_in_it(zoned_vg):
    registry, _ = zoned_vg
    with VolumeGroup.open(registry, VG) as vg:
        lv = vg.create_lv("z1", 4 * MiB, "quadrangle", zone=1, stripes=2)
        assert lv.quadrangle.sectors == 658
        olv = vg.open_lv("z1")
        data = random.Random(5).randbytes(olv.size)
        olv.write(0, data)
        old = olv.size
        vg.extend_lv("z1", old + 3 * MiB)
        assert olv.size == lv.size >= old + 3 * MiB
        assert olv.read(0, old) == data, "growing moved existing blocks"
        olv.write(old, b"\x5a" * (olv.size - old))
        geos = {p: DiskGeometry(vg.meta.pv(p).geometry.disk_spec()) for p in lv.pvs()}
        for pv, dlbn in (olv.legs[0].locate(v) for v in range(0, olv.legs[0].vlbns, 7)):
            assert geos[pv].zone_of_track(geos[pv].track_of(dlbn)) == 1
        with pytest.raises(UsageError, match="shrinking"):
            vg.extend_lv("z1", old)


def test_a_full_zone_is_refused_by_name(zoned_vg):
    registry, _ = zoned_vg
    with VolumeGroup.open(registry, VG) as vg:
        with pytest.raises(NoSpaceError, match="zone 0 cannot hold"):
            vg.create_lv("big", 400 * MiB, "quadrangle")


def test_cli_creates_and_shows_a_quadrangle_volume(zoned_vg, capsys):
    registry, _ = zoned_vg
    home = str(registry.home)
    assert cli_main(["--home", home, "lv", "create", f"{VG}/q", "--size", "4M", "--layout", "quadrangle",
                     "--vlbn-sectors", "26", "--stripes", "2"]) == 0
    assert cli_main(["--home", home, "lv", "show", f"{VG}/q"]) == 0
    out = capsys.readouterr().out
    assert "zone 0 (N = 686, H = 139): p = 2, w = 26, d = 4, b = 26 sectors, D = 4 (linear form 5), R = 10 (1.5%)" in out
    assert cli_main(["--home", home, "--json", "lv", "show", f"{VG}/q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tracks"]["w"] == 26 and doc["size"] == list_groups(registry)[VG].lv("q").size
    assert cli_main(["--home", home, "lv", "create", f"{VG}/r", "--size", "4M", "--layout", "quadrangle",
                     "--block-size", "1000"]) == 1
    assert "not a positive multiple of 512" in capsys.readouterr().err


# ----- simulated time ------------------------------------------------------------------------------

REV = SPEC.revolution_ms


def semi_sequential_batches(olv, rng: random.Random, n: int):
    """``n`` random semi-sequential sets, each as one batch of d whole-block reads."""
    bb = olv.meta.quadrangle.block * SECTOR
    for _ in range(n):
        lbn = rng.randrange(olv.size // SECTOR)
        yield [Request(x // (bb // SECTOR) * bb, length=bb) for x in olv.equivalent(lbn)]


def one_disk_volume(registry, tmp_path, **kw):
    (path,) = zoned_pvs(registry, tmp_path, 1)
    VolumeGroup.create(registry, VG, [path], extent_size=MiB)
    return path


@pytest.mark.parametrize("kw, within_one_revolution", [
    ({}, True),  # the default: b = 8, d = D(cyclic) = 4
    ({"block": 8, "depth": 2}, True),
    ({"block": 8, "depth": 6}, False),  # d > D: Fig. 9's step
    ({"linear": True}, False),  # d = D(linear) = 5: a batch the disk starts mid-diagonal loses a revolution
])
def test_semi_sequential_batch_time(registry, tmp_path, kw, within_one_revolution):
    """Atropos Fig. 9 on the model: with d ≤ D (the cyclic form) a semi-sequential batch costs,
    beyond its seek and command overhead, one revolution on average and never more than one
    revolution, a head switch and a block (quadrangles never cross a cylinder), and
    the request the host sends first is the one the head reaches soonest. Past the cyclic D —
    including the linear form's D, which the paper's numbers fit — it steps up: once the disk
    starts mid-diagonal it cannot switch back to the first track in the same revolution."""
    one_disk_volume(registry, tmp_path)
    with VolumeGroup.open(registry, VG) as vg:
        lv = vg.create_lv("q", 8 * MiB, "quadrangle", **kw)
        olv = vg.open_lv("q")
        (dev,) = (vg.devices[p] for p in lv.pvs())
        assert isinstance(dev, SimulatedDevice) and dev.clock is olv.clock
        scratch = SimulatedDisk(dev.spec)  # the same disk, to price each possible first request
        beyond = []
        for reqs in semi_sequential_batches(olv, random.Random(4), 60):
            state, t0 = (dev.disk.free_at, dev.disk.head_track), olv.clock.now
            olv.batch(reqs)
            served = sorted(dev.last, key=lambda b: b.start)
            assert len(served) == lv.quadrangle.depth
            positioning = {}
            for b in served:
                scratch.free_at, scratch.head_track = state
                positioning[b.lbn] = scratch.access(b.lbn, b.count, t0).positioning
            assert positioning[served[0].lbn] <= min(positioning.values()) + 1e-9, "the host sent a costlier one first"
            beyond.append(max(b.end for b in served) - t0 - served[0].seek - served[0].overhead)
    mean = sum(beyond) / len(beyond)
    if within_one_revolution:
        # at worst one revolution plus one head switch and one block: the head lands just too
        # late to switch to the nearest block of another track and takes the next on its own
        q = lv.quadrangle
        bound = REV + SPEC.head_switch_ms + q.block / q.sectors * REV + 1e-6
        assert mean <= REV and max(beyond) <= bound, (mean, max(beyond), bound)
    else:
        assert mean > 1.2 * REV, mean


def test_disks_of_a_volume_run_in_parallel_in_simulated_time(zoned_vg):
    registry, _ = zoned_vg
    with VolumeGroup.open(registry, VG) as vg:
        lv = vg.create_lv("q", 8 * MiB, "quadrangle")
        olv = vg.open_lv("q")
        devs = [vg.devices[p] for p in sorted(lv.pvs())]
        assert all(d.clock is olv.clock for d in devs)
        row = lv.stripe_unit
        t0 = olv.clock.now
        olv.read(0, 4 * row)  # a rectangle: one full row on each of the 4 disks
        elapsed = olv.clock.now - t0
        busy = [sum(b.end - b.start for b in d.last) for d in devs]
        assert elapsed == pytest.approx(max(b.end for d in devs for b in d.last) - t0)
        assert elapsed < 0.5 * sum(busy) and elapsed >= max(busy)
        t0 = olv.clock.now
        olv.batch([Request(0, length=row), Request(row, length=row)])  # rows on two disks
        served = [b for d in devs for b in d.last if b.start >= t0]
        assert len(served) == 2
        assert olv.clock.now - t0 == pytest.approx(max(b.end for b in served) - t0)
        assert olv.clock.now - t0 < sum(b.end - b.start for b in served)


# ----- metadata -----------------------------------------------------------------------------------

def test_format_1_documents_still_open_and_are_rewritten_as_2(registry, make_pvs):
    paths = make_pvs(2, size=16 * MiB)
    VolumeGroup.create(registry, "old", paths, extent_size=MiB)
    with VolumeGroup.open(registry, "old") as vg:
        vg.create_lv("s", 4 * MiB, "striped", stripes=2)
        vg.open_lv("s").write(0, b"kept" * 1000)
        doc = vg.meta.to_doc()
    # what format 1 wrote: no sizes, no track parameters, flat geometry without source or disk
    old = copy.deepcopy(doc)
    old["format"] = "traxfs-vg/1"
    for lv in old["lvs"]:
        del lv["size"], lv["quadrangle"]
    for pv in old["pvs"]:
        pv["geometry"] = {"kind": "flat", "unit": pv["geometry"]["unit"]}
    old["seq"] += 1
    for p in paths:
        sd = scan_one(p)
        try:
            write_slots(sd.device, sd.label, old["seq"], old)
        finally:
            sd.close()
    with VolumeGroup.open(registry, "old") as vg:
        assert vg.meta.lv("s").size == 4 * MiB and vg.meta.lv("s").quadrangle is None
        assert vg.open_lv("s").read(0, 4000) == b"kept" * 1000
        vg.commit()
    sd = scan_one(paths[0])
    try:
        assert sd.copy.doc["format"] == "traxfs-vg/2" and sd.copy.doc["lvs"][0]["size"] == 4 * MiB
    finally:
        sd.close()


def test_zoned_documents_are_validated(zoned_vg):
    registry, paths = zoned_vg
    with VolumeGroup.open(registry, VG) as vg:
        vg.create_lv("q", 2 * MiB, "quadrangle")
        doc = vg.meta.to_doc()
    VolumeGroupMeta.from_doc(json.loads(json.dumps(doc)), "here")
    for mutate, match in [
        (lambda lv: lv["quadrangle"].update(width=3), "width"),
        (lambda lv: lv["quadrangle"].update(skew=100), "no zone 0 with N = 686, H = 100"),
        (lambda lv: lv.update(stripe_unit=4096), "not a track row"),
        (lambda lv: lv.update(size=lv["size"] + 1), "whole blocks"),
        (lambda lv: lv.update(quadrangle=None), "without its track parameters"),
        (lambda lv: lv.update(layout="striped"), "has no track parameters"),
    ]:
        bad = copy.deepcopy(doc)
        mutate(bad["lvs"][0])
        with pytest.raises(MetadataError, match=match):
            VolumeGroupMeta.from_doc(bad, "here")


@pytest.mark.parametrize("seed", [1, 2])
def test_defective_disks_store_data(registry, tmp_path, seed):
    """Disks with many slipped defects: tracks with more than R are skipped, the rest used."""
    spec = with_random_defects(scaled(atlas10k3(), 20, zones=1), 300, seed=seed)
    paths = zoned_pvs(registry, tmp_path, 2, spec=spec)
    VolumeGroup.create(registry, VG, paths, extent_size=MiB)
    with VolumeGroup.open(registry, VG) as vg:
        lv = vg.create_lv("q", 6 * MiB, "quadrangle", block=26)
        olv = vg.open_lv("q")
        geo = DiskGeometry(spec)
        for _, dlbn in (olv.legs[0].locate(v) for v in range(olv.legs[0].vlbns)):
            t = geo.track_of(dlbn)
            assert len(geo.defects_on(t)) <= 686 - lv.quadrangle.row_sectors
        check_data(olv, random.Random(seed), rounds=10)

"""Black-box geometry extraction (volume/disk/extract*.py, ``trax pv extract``).

On simulated disks the extracted geometry must equal the model's ground truth exactly — every
track's first LBN, every skew offset, every slipped slot — including zone changes, defects next to
track and zone boundaries and several defects on one track; devices without rotation must come
out flat; the command must store what it found and refuse, changing nothing, when it should.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import file_hash
from hypothesis import example, given, settings
from hypothesis import strategies as st

from traxfs.tools.cli import main
from traxfs.volume.device import ImageFileDevice
from traxfs.volume.disk import profiles
from traxfs.volume.disk.extract import ExtractionError, extract
from traxfs.volume.disk.geometry import SECTOR, DiskGeometry, DiskSpec
from traxfs.volume.disk.probe import prober_for
from traxfs.volume.disk.simulator import SimulatedDisk
from traxfs.volume.group import USE, VolumeGroup
from traxfs.volume.open_device import open_device
from traxfs.volume.registry import Registry
from traxfs.volume.scan import pv_create
from traxfs.volume.simdevice import create_simulated, sidecar_path

pytestmark = pytest.mark.timeout(120)


def run(spec: DiskSpec):
    disk = SimulatedDisk(spec)
    return extract(disk, disk.capacity)


def assert_same_geometry(found: DiskSpec, truth: DiskSpec) -> None:
    assert (found.rpm, found.surfaces, found.zones) == (truth.rpm, truth.surfaces, truth.zones)
    assert found.defects == truth.defects
    a, b = DiskGeometry(found), DiskGeometry(truth)
    assert a.tracks == b.tracks and a.capacity == b.capacity
    for t in range(b.tracks + 1):
        assert a.track_start(t) == b.track_start(t)
    for t in range(b.tracks):
        assert a.skew_offset(t) == b.skew_offset(t) and a.defects_on(t) == b.defects_on(t)


def assert_mechanics_close(found: DiskSpec, truth: DiskSpec) -> None:
    for f in ("head_switch_ms", "track_to_track_ms", "full_stroke_ms", "overhead_ms"):
        assert getattr(found, f) == pytest.approx(getattr(truth, f), abs=1e-5), f
    assert found.average_seek_ms == pytest.approx(truth.average_seek_ms, abs=1e-3)


def edge_defects(spec: DiskSpec) -> tuple[tuple[int, int, int], ...]:
    """Slipped slots where extraction is easiest to get wrong: first/second slot of every zone,
    last two slots of every zone, a pair across a track boundary, consecutive slots, two far apart
    on one track, and the last slot of a cylinder's last track."""
    g = DiskGeometry(spec)
    s = spec.surfaces
    out = []

    def at(track: int, slot: int) -> None:
        out.append((track // s, track % s, slot))

    for zi, z in enumerate(spec.zones):
        n, tracks = z.sectors_per_track, g.zone_tracks(zi)
        at(tracks[0], 0)
        at(tracks[0], 1)
        at(tracks[-1], n - 1)
        at(tracks[-1], n - 2)
        t = tracks[0] + 5
        at(t, n - 1)
        at(t + 1, 0)
        at(t + 1, 7)
        at(t + 1, 8)
        at(t + 3, 3)
        at(t + 3, n // 2)
        at(tracks[0] + 2 * s - 1, n - 1)
    return tuple(sorted(set(out)))


@pytest.mark.parametrize("name, cylinders", [("atlas10k3", 40), ("cheetah36es", 60), ("cheetah15k3", 40)])
def test_scaled_profiles_recovered_exactly(name: str, cylinders: int) -> None:
    truth = profiles.scaled(profiles.profile(name), cylinders)
    ex = run(truth)
    assert ex.kind == "zoned" and ex.spec.name == "extracted"
    assert_same_geometry(ex.spec, truth)
    assert_mechanics_close(ex.spec, truth)
    g = DiskGeometry(truth)
    assert ex.zone_first_lbns == [g.track_start(t) for t in g.zone_first_track]


def test_defects_at_track_and_zone_edges() -> None:
    base = profiles.scaled(profiles.atlas10k3(), 20)
    truth = base.with_defects(edge_defects(base))
    ex = run(truth)
    assert_same_geometry(ex.spec, truth)
    assert len(ex.spec.defects) == len(truth.defects) > 80


def test_cheetah36es_defects_recovered() -> None:
    """The paper's defect density (404 per full disk) folded into a scaled disk, plus edges."""
    base = profiles.scaled(profiles.cheetah36es(), 100)
    scattered = profiles.with_random_defects(base, 150, seed=7).defects
    truth = base.with_defects(base.defects + edge_defects(base) + scattered)
    ex = run(truth)
    assert_same_geometry(ex.spec, truth)
    # about log2(zone size) probes per defect, not one per track
    assert ex.probes < 40 * len(truth.defects) + 3000


SMALL = replace(profiles.scaled(profiles.cheetah36es(), 6, zones=3), defects=())


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(0, DiskGeometry(SMALL).tracks - 1), st.integers(0, 600)), max_size=60))
# a slip in every sampled cylinder-switch window of a short (not the first) zone: the smallest
# cylinder step is one sector more than the skew; the defect search refutes that fit in the first
# example and accepts it in the second (only the final verification caught it)
@example([(12, 1), (14, 0), (16, 0), (17, 4), (19, 5), (21, 6)])
@example([(13, 1), (16, 0), (17, 3), (19, 4), (21, 5)])
def test_random_defect_sets(slots: list[tuple[int, int]]) -> None:
    """(track, slot) pairs of SMALL, slipped."""
    s = SMALL.surfaces
    truth = SMALL.with_defects(tuple((t // s, t % s, slot) for t, slot in slots))
    assert_same_geometry(run(truth).spec, truth)


def test_too_many_defects_is_refused_not_guessed() -> None:
    """A zone with more slipped slots than N minus its largest skew cannot be resolved from
    angles; extraction must say so rather than return a wrong geometry."""
    base = replace(profiles.scaled(profiles.cheetah15k3(), 40, zones=2), defects=())
    with pytest.raises(ExtractionError):
        run(profiles.with_random_defects(base, 1400, seed=1))


def test_image_file_is_flat(tmp_path: Path) -> None:
    dev = ImageFileDevice(str(tmp_path / "f.img"), size=16 << 20, create=True)
    try:
        ex = extract(prober_for(dev), dev.size // SECTOR)
    finally:
        dev.close()
    assert ex.kind == "flat" and ex.spec is None and ex.probes < 20


def test_loop_device_is_flat(tmp_path: Path, loop_attach) -> None:
    image = tmp_path / "l.img"
    ImageFileDevice(str(image), size=16 << 20, create=True).close()
    dev = open_device(loop_attach(image))
    try:
        assert extract(prober_for(dev), dev.size // SECTOR).kind == "flat"
    finally:
        dev.close()


# ----- trax pv extract ----------------------------------------------------------------------------
SIM = profiles.scaled(profiles.atlas10k3(), 10, zones=2).with_defects(((3, 1, 0), (12, 2, 600)))


def trax(capsys, home: Path, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["--home", str(home), *args])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def sim(tmp_path: Path) -> tuple[Path, str]:
    """An unused physical volume on a simulated disk, labelled with a flat geometry."""
    home, path = tmp_path / "home", str(tmp_path / "s0.img")
    create_simulated(path, SIM).close()
    pv_create(Registry(home), path)
    return home, path


def test_extract_stores_in_orphan_metadata(sim, capsys) -> None:
    home, path = sim
    rc, out, err = trax(capsys, home, "pv", "extract", path, "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["kind"] == "zoned" and doc["vg"] is None and doc["defects"] == 2
    assert [z["sectors_per_track"] for z in doc["zones"]] == [686, 658]
    (pv,) = json.loads(trax(capsys, home, "--json", "pv", "list")[1])
    assert pv["geometry"]["kind"] == "zoned" and pv["geometry"]["source"] == "extracted"
    assert_same_geometry(DiskSpec.from_doc(pv["geometry"]["disk"]), SIM)
    rc, out, _ = trax(capsys, home, "pv", "extract", path)  # text summary, and again is fine
    assert rc == 0 and "2 slipped defects" in out and "ZONE" in out


def test_extract_stores_in_group_metadata(sim, capsys) -> None:
    home, path = sim
    assert trax(capsys, home, "vg", "create", "vg0", path)[0] == 0
    rc, out, err = trax(capsys, home, "--json", "pv", "extract", path)
    assert rc == 0, err
    assert json.loads(out)["vg"] == "vg0"
    shown = json.loads(trax(capsys, home, "--json", "vg", "show", "vg0")[1])
    geo = shown["devices"][0]["geometry"]
    assert geo["kind"] == "zoned" and geo["source"] == "extracted" and shown["seq"] == 2
    assert_same_geometry(DiskSpec.from_doc(geo["disk"]), SIM)


def test_image_file_pv_extracts_flat(tmp_path: Path, capsys) -> None:
    home, path = tmp_path / "home", str(tmp_path / "f.img")
    pv_create(Registry(home), path, size=8 << 20, unit=64 << 10)
    rc, out, err = trax(capsys, home, "--json", "pv", "extract", path)
    assert rc == 0, err
    assert json.loads(out)["kind"] == "flat"
    (pv,) = json.loads(trax(capsys, home, "--json", "pv", "list")[1])
    assert pv["geometry"] == {"kind": "flat", "unit": 64 << 10, "source": "extracted", "disk": None}


def refused(capsys, home: Path, path: str, needle: str) -> None:
    before = file_hash(path)
    rc, _, err = trax(capsys, home, "pv", "extract", path)
    assert rc == 1 and needle in err, err
    assert file_hash(path) == before


def test_refuses_unlabelled_device(tmp_path: Path, capsys) -> None:
    path = str(tmp_path / "raw.img")
    create_simulated(path, SIM).close()
    refused(capsys, tmp_path / "home", path, "not a traxfs physical volume")


def test_refuses_group_in_use(sim, capsys) -> None:
    home, path = sim
    assert trax(capsys, home, "vg", "create", "vg0", path)[0] == 0
    assert trax(capsys, home, "lv", "create", "vg0/x", "--size", "4M")[0] == 0
    with VolumeGroup.open(Registry(home), "vg0", hold=USE) as vg:  # what a mounted or exposed volume holds
        vg.open_lv("x")
        refused(capsys, home, path, "volume group vg0: in use by pid")


def test_refuses_device_in_use(sim, capsys) -> None:
    import fcntl
    import os

    home, path = sim
    fd = os.open(path, os.O_RDONLY)  # what a filesystem mounted on the device itself holds
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        refused(capsys, home, path, "in use")
    finally:
        os.close(fd)


def test_refuses_inconsistent_timings(sim, capsys) -> None:
    home, path = sim
    noisy = profiles.with_random_defects(SIM, 1500, seed=3)  # beyond what angles can resolve
    Path(sidecar_path(path)).write_text(json.dumps(noisy.to_doc()))
    refused(capsys, home, path, "extraction failed")


def test_refuses_new_layout_under_zoned_volumes(tmp_path: Path, capsys) -> None:
    """A zoned volume's blocks are placed by the device's recorded track layout: a different
    layout would move its data, so it is refused."""
    home, path = tmp_path / "home", str(tmp_path / "m.img")
    reg = Registry(home)
    pv_create(reg, path, model=SIM)
    VolumeGroup.create(reg, "vg0", [path])
    with VolumeGroup.open(reg, "vg0") as vg:
        vg.create_lv("t", 4 << 20, "traxtent")
    changed = SIM.with_defects(SIM.defects + ((19, 3, 5),))  # the disk is not what was recorded
    Path(sidecar_path(path)).write_text(json.dumps(changed.to_doc()))
    refused(capsys, home, path, "placed by it")

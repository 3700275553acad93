"""Simulated devices: real data in a sparse image, timing from the disk model on a simulated clock."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from traxfs.tools.cli import main
from traxfs.volume.device import ImageFileDevice, create_image
from traxfs.volume.disk.clock import SimClock
from traxfs.volume.disk.geometry import DiskGeometry, DiskSpec
from traxfs.volume.disk.profiles import atlas10k3, scaled
from traxfs.volume.errors import DeviceError
from traxfs.volume.open_device import open_device
from traxfs.volume.simdevice import SimulatedDevice, create_simulated, sidecar_path

pytestmark = pytest.mark.timeout(60)

SPEC = scaled(atlas10k3(), 10)  # 8 zones x 10 cylinders x 4 surfaces: about 90 MB
TRACK = SPEC.zones[0].sectors_per_track * 512


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[SimulatedDevice]:
    d = create_simulated(str(tmp_path / "s0.img"), SPEC)
    yield d
    d.close()


def test_create_writes_a_sparse_image_and_its_model(tmp_path: Path, dev: SimulatedDevice) -> None:
    path = str(tmp_path / "s0.img")
    assert dev.size == DiskGeometry(SPEC).capacity * 512 == os.path.getsize(path)
    assert os.stat(path).st_blocks * 512 < dev.size // 100  # sparse
    with open(sidecar_path(path)) as f:
        assert DiskSpec.from_doc(json.load(f)) == SPEC


def test_data_round_trips_and_survives_reopening(tmp_path: Path, dev: SimulatedDevice) -> None:
    dev.write(1000, b"hello")
    dev.writev(TRACK - 3, [memoryview(b"abc"), memoryview(b"defg")])  # crosses a track boundary
    assert dev.read(1000, 5) == b"hello"
    bufs = [memoryview(bytearray(3)), memoryview(bytearray(4))]
    dev.readinto(TRACK - 3, bufs)
    assert b"".join(bytes(b) for b in bufs) == b"abcdefg"
    dev.flush()
    dev.close()
    again = open_device(str(tmp_path / "s0.img"))
    try:
        assert isinstance(again, SimulatedDevice) and again.spec == SPEC
        assert again.read(TRACK - 3, 7) == b"abcdefg"
    finally:
        again.close()


def test_a_plain_image_is_not_simulated(tmp_path: Path) -> None:
    create_image(str(tmp_path / "plain.img"), 4 << 20).close()
    d = open_device(str(tmp_path / "plain.img"))
    assert type(d) is ImageFileDevice
    d.close()


def test_a_damaged_model_file_is_named(tmp_path: Path, dev: SimulatedDevice) -> None:
    path = str(tmp_path / "s0.img")
    Path(sidecar_path(path)).write_text("{not json")
    with pytest.raises(DeviceError, match=r"s0\.img\.disk\.json"):
        open_device(path)


def test_standalone_device_is_a_synchronous_disk(dev: SimulatedDevice) -> None:
    dev.read(0, TRACK)
    first = dev.last[0]
    assert first.count == TRACK // 512 and dev.clock.now == first.end
    dev.read(50 * TRACK, 4096)
    second = dev.last[0]
    assert second.start == first.end and second.queued == 0  # issued when the first completed
    assert dev.clock.now == second.end
    dev.flush()
    assert dev.clock.now == second.end  # flush is free in simulated time
    s = dev.stats
    assert s.requests == 2 and s.transfer == pytest.approx(first.transfer + second.transfer)
    assert s.busy == pytest.approx(first.total + second.total) and 0 < s.efficiency < 1


def test_devices_sharing_a_clock_work_in_parallel(tmp_path: Path) -> None:
    devs = [create_simulated(str(tmp_path / f"p{i}.img"), SPEC) for i in range(3)]
    try:
        clock = SimClock(pace=0.0)
        for d in devs:
            d.clock = clock
        for i, d in enumerate(devs):
            d.read(i * 37 * TRACK, (i + 1) * TRACK)
        starts = [d.last[0].start for d in devs]
        ends = [d.last[0].end for d in devs]
        assert starts == [0.0, 0.0, 0.0] and clock.now == 0.0  # nobody settled the shared clock
        assert clock.settle() == max(ends)  # the volume's request finishes at the slowest disk
        devs[0].read(0, 512)
        assert devs[0].last[0].start == max(ends)
        clock.reset()
        assert clock.now == 0.0
    finally:
        for d in devs:
            d.close()


def test_batch_does_the_io_and_times_it_as_one_batch(dev: SimulatedDevice) -> None:
    n = SPEC.zones[0].sectors_per_track
    b = 8
    items = []
    for i in range(4):  # a diagonal: block i on track i, shifted by one block per track
        off = (i * (n + b) + 3 * b) * 512
        dev.write(off, bytes([i + 1]) * (b * 512))
        items.append((off, [memoryview(bytearray(b * 512))], False))
    before = dev.clock.now
    dev.batch(items)
    assert [bytes(views[0][:1]) for _, views, _ in items] == [b"\x01", b"\x02", b"\x03", b"\x04"]
    assert len(dev.last) == 4 and dev.last[0].start == before  # idle: the first given goes first
    assert dev.clock.now == max(x.end for x in dev.last)
    dev.batch([(0, [memoryview(b"z" * 512)], True), (TRACK, [memoryview(b"y" * 1024)], True)])
    assert dev.read(0, 1) == b"z" and dev.read(TRACK + 1023, 1) == b"y"


def test_probe_delegates_to_the_disk(dev: SimulatedDevice) -> None:
    issue, done = dev.probe(0, 1, delay_ms=1.0)
    assert issue == pytest.approx(1.0) and done > issue


def test_pacing_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAX_SIM_PACE", "0.5")
    assert SimClock().pace == 0.5
    assert SimClock(pace=0.0).pace == 0.0
    with pytest.raises(ValueError):
        SimClock(pace=-1)


def test_pv_create_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    imgs = [str(tmp_path / f"m{i}.img") for i in range(2)]
    assert main(["--home", home, "pv", "create", "--model", "atlas10k3", "--cylinders-per-zone", "10", *imgs]) == 0
    assert "simulated atlas10k3" in capsys.readouterr().out
    for p in imgs:
        d = open_device(p)
        assert isinstance(d, SimulatedDevice) and d.spec == SPEC
        d.close()
    assert main(["--home", home, "vg", "create", "vg0", *imgs]) == 0
    capsys.readouterr()
    assert main(["--home", home, "--json", "vg", "show", "vg0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    geo = doc["devices"][0]["geometry"]
    assert geo["kind"] == "zoned" and geo["unit"] == TRACK and DiskSpec.from_doc(geo["disk"]) == SPEC


def test_pv_create_model_refuses_bad_input_and_changes_nothing(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    img = str(tmp_path / "x.img")
    assert main(["--home", home, "pv", "create", "--model", "atlas10k3", "--size", "1G", img]) != 0
    assert main(["--home", home, "pv", "create", "--cylinders-per-zone", "5", img]) != 0
    assert main(["--home", home, "pv", "create", "--model", "atlas10k3", "--cylinders-per-zone", "0", img]) != 0
    assert main(["--home", home, "pv", "create", "--model", "nosuchdisk", img]) == 2  # argparse: unknown model
    assert not os.path.exists(img) and not os.path.exists(sidecar_path(img))
    Path(img).write_bytes(b"")
    assert main(["--home", home, "pv", "create", "--model", "atlas10k3", img]) != 0
    assert not os.path.exists(sidecar_path(img)) and os.path.getsize(img) == 0
    err = capsys.readouterr().err
    assert "already exists" in err and "--model" in err

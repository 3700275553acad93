"""A logical volume exposed as a file through FUSE (traxfs.tools.expose), driven by real tools.

fio writes checksummed blocks through the exposed file and verifies them for every layout
(linear, striped, traxtent, a mirror); dd writes a pattern that is then read back with
``OpenLogicalVolume.read`` after unmounting; ``losetup`` turns the file into a block device; SIGTERM to a serving process unmounts and
flushes.

``serve`` runs in a background thread of the test process (the volume stays open in the test,
so data can be checked after unmount). The ``exposed`` fixture always unmounts
(``fusermount3 -u``, lazily if busy, and by aborting the FUSE connection as a last resort) and
joins the server thread, whether the test passed or not.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from traxfs.tools.expose import serve
from traxfs.volume.group import VolumeGroup
from traxfs.volume.logical import OpenLogicalVolume
from traxfs.volume.registry import Registry
from traxfs.volume.scan import pv_create

MiB = 1024 * 1024
FIO_DIR = Path(__file__).resolve().parents[1] / "tools" / "fio"
LV_SIZE = 48 * MiB

# (layout, mirror, devices): a mirror of a 2-way stripe needs four devices
LAYOUTS = {
    "linear": ("linear", False, 1),
    "striped": ("striped", False, 3),
    "traxtent": ("traxtent", False, 2),
    "mirror": ("striped", True, 4),
}

needs = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None
    or shutil.which("fio") is None,
    reason="needs root, /dev/fuse, fusermount3 and fio",
)
pytestmark = needs


@dataclass
class Exposed:
    lv: OpenLogicalVolume
    mountpoint: str
    path: str
    thread: threading.Thread
    errors: list[BaseException] = field(default_factory=list)
    conn: int | None = None  # the FUSE connection number (minor of st_dev), for aborting

    def unmount(self) -> None:
        """Unmount and wait for ``serve`` to return; idempotent; re-raises a server error."""
        if os.path.ismount(self.mountpoint):
            for _ in range(20):  # a just-detached loop device may hold the file a moment longer
                if subprocess.run(["fusermount3", "-u", self.mountpoint], capture_output=True).returncode == 0:
                    break
                time.sleep(0.1)
            else:
                subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], capture_output=True)
        self.thread.join(20)
        if self.thread.is_alive() and self.conn is not None:  # wedged: cut the connection
            Path(f"/sys/fs/fuse/connections/{self.conn}/abort").write_text("1")
            self.thread.join(10)
        assert not self.thread.is_alive(), "serve() did not return after unmount"
        assert not os.path.ismount(self.mountpoint)
        if self.errors:
            raise self.errors[0]


@pytest.fixture
def exposed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Exposed]:
    """A fresh group on image files in tmp_path, one LV of the layout named by the test's
    parameter (striped if none), served at tmp_path/mnt/volume."""
    layout, mirror, n = LAYOUTS[getattr(request, "param", "striped")]
    registry = Registry(home=tmp_path / "home")
    paths = [str(tmp_path / f"d{i}.img") for i in range(n)]
    for p in paths:
        pv_create(registry, p, size=(LV_SIZE if mirror else LV_SIZE // n) + 16 * MiB)
    VolumeGroup.create(registry, "vg", paths, extent_size=MiB)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with VolumeGroup.open(registry, "vg") as vg:
        unit = 64 * 1024 if layout == "striped" else None  # traxtent: the devices' track unit
        vg.create_lv("lv", LV_SIZE, layout, stripe_unit=unit, mirror=mirror)
        lv = vg.open_lv("lv")
        ready = threading.Event()
        ex: Exposed

        def run() -> None:
            try:
                serve(lv, str(mnt), ready=ready.set)
            except BaseException as e:  # noqa: B036 — handed to the test thread
                ex.errors.append(e)
            finally:
                ready.set()

        ex = Exposed(lv, str(mnt), str(mnt / "volume"), threading.Thread(target=run, daemon=True))
        ex.thread.start()
        try:
            assert ready.wait(15), "the mount did not come up"
            if ex.errors:
                raise ex.errors[0]
            ex.conn = os.minor(os.stat(mnt).st_dev)
            yield ex
        finally:
            ex.unmount()


def fio(job: str, target: str, size: str, cwd: Path) -> tuple[subprocess.CompletedProcess, dict]:
    env = dict(os.environ, TARGET=target, SIZE=size, RUNTIME="1", DIRECT="1")
    res = subprocess.run(["fio", "--output-format=json", str(FIO_DIR / job)], cwd=cwd,
                         capture_output=True, text=True, env=env, timeout=60)
    try:
        out = json.loads(res.stdout[res.stdout.index("{"):])
    except ValueError:
        out = {}
    return res, out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("exposed", list(LAYOUTS), indirect=True)
def test_fio_verify_crc32c(exposed: Exposed, tmp_path: Path) -> None:
    st = os.stat(exposed.path)
    assert st.st_size == exposed.lv.size == LV_SIZE and st.st_mode & 0o777 == 0o600
    res, out = fio("verify-crc32c.fio", exposed.path, "24M", tmp_path)
    assert res.returncode == 0, res.stderr + res.stdout[-2000:]
    assert "verify:" not in res.stderr and "bad magic" not in res.stdout + res.stderr
    (job,) = out["jobs"]
    assert job["error"] == 0
    written, verified = job["write"]["io_bytes"], job["read"]["io_bytes"]
    assert written >= 24 * MiB and verified == written  # every block was read back and checked


@pytest.mark.timeout(60)
def test_dd_pattern_reads_back_from_the_volume(exposed: Exposed, tmp_path: Path) -> None:
    pattern = random.Random(7).randbytes(3 * MiB + 4321)
    src = tmp_path / "pattern"
    src.write_bytes(pattern)
    offset = 5 * MiB + 777  # unaligned, crossing stripe units
    dd = ["dd", f"if={src}", f"of={exposed.path}", "bs=1M", f"seek={offset}", "oflag=seek_bytes",
          "conv=notrunc,fsync", "status=none"]
    subprocess.run(dd, check=True, timeout=30)

    # a fixed-size file: a write crossing the end is cut short, one past the end gets ENOSPC
    over = subprocess.run(["dd", f"if={src}", f"of={exposed.path}", "bs=1M", f"seek={LV_SIZE - MiB // 2}",
                           "oflag=seek_bytes", "conv=notrunc", "status=none"], capture_output=True, text=True)
    assert over.returncode != 0 and "No space left on device" in over.stderr
    with open(exposed.path, "rb", buffering=0) as f:
        assert len(os.pread(f.fileno(), MiB, LV_SIZE - 100)) == 100
        assert os.pread(f.fileno(), MiB, LV_SIZE) == b""

    exposed.unmount()
    assert exposed.lv.read(offset, len(pattern)) == pattern
    assert exposed.lv.read(offset - 4096, 4096) == bytes(4096)  # nothing written before it
    assert exposed.lv.read(LV_SIZE - MiB // 2, MiB // 2) == pattern[: MiB // 2]


@pytest.mark.timeout(60)
def test_losetup_over_the_exposed_file(exposed: Exposed, tmp_path: Path) -> None:
    if shutil.which("losetup") is None:
        pytest.skip("losetup is not installed")
    pattern = random.Random(11).randbytes(4 * MiB)
    src = tmp_path / "pattern"
    src.write_bytes(pattern)
    res = subprocess.run(["losetup", "--find", "--show", exposed.path], capture_output=True, text=True,
                         timeout=30)
    assert res.returncode == 0, res.stderr
    dev = res.stdout.strip()
    try:
        size = subprocess.run(["blockdev", "--getsize64", dev], capture_output=True, text=True, check=True)
        assert int(size.stdout) == LV_SIZE
        subprocess.run(["dd", f"if={src}", f"of={dev}", "bs=1M", "seek=3", "oflag=direct", "status=none"],
                       check=True, timeout=30)
        back = subprocess.run(["dd", f"if={dev}", "bs=1M", "skip=3", "count=4", "iflag=direct", "status=none"],
                              capture_output=True, check=True, timeout=30)
        assert back.stdout == pattern
    finally:
        detach = subprocess.run(["losetup", "-d", dev], capture_output=True, text=True, timeout=30)
    assert detach.returncode == 0, detach.stderr
    exposed.unmount()
    assert exposed.lv.read(3 * MiB, len(pattern)) == pattern


SERVER = """
import sys
from traxfs.tools.expose import serve
from traxfs.volume.group import VolumeGroup
from traxfs.volume.registry import Registry
with VolumeGroup.open(Registry(sys.argv[1]), "vg") as vg:
    serve(vg.open_lv("lv"), sys.argv[2], ready=lambda: print("ready", flush=True))
    print("served", flush=True)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_unmounts_and_flushes(tmp_path: Path, sig: signal.Signals) -> None:
    registry = Registry(home=tmp_path / "home")
    pv_create(registry, str(tmp_path / "d0.img"), size=32 * MiB)
    VolumeGroup.create(registry, "vg", [str(tmp_path / "d0.img")], extent_size=MiB)
    with VolumeGroup.open(registry, "vg") as vg:
        vg.create_lv("lv", 16 * MiB)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(registry.home), str(mnt)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.poll() is not None else ""
        fd = os.open(mnt / "volume", os.O_RDWR)  # held open across the signal: a busy mount
        try:
            os.write(fd, b"signalled")
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=20)
        finally:
            with contextlib.suppress(OSError):  # ENOTCONN: the server is gone, as it should be
                os.close(fd)
        assert proc.returncode == 0, err
        assert out.strip() == "served"
        assert not os.path.ismount(mnt)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
    with VolumeGroup.open(registry, "vg") as vg:
        assert vg.open_lv("lv").read(0, 9) == b"signalled"

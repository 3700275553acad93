"""Nothing writes a device that is in use, even with ``--force`` — and what is not in use stays usable.

With a real mount of an image file (``trax mount IMAGE``), of logical volumes (``trax mount
VG/LV``, the daemon's child holding the locks) and a volume exposed by ``trax lv expose``, every
writer is refused with exit 1 and a message naming the holder (pid and command), and the
mounted data survives: after ``trax umount`` the server says it closed cleanly and fsck is
clean. Locks are per volume: two volumes of one group are mounted at once, and a new volume is
created, formatted and removed beside them.

The writers run in this process (``main([...])``): flock locks belong to open file
descriptions, so they meet the mount's locks exactly as another process would.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_fs_tools import Rig  # skips this module too where FUSE is missing

from traxfs.tools.cli import main

pytestmark = pytest.mark.timeout(180)


class InUseRig(Rig):
    """test_fs_tools' rig (real ``trax mount`` daemons, each unmounted and its server stopped in
    teardown), plus the writers run in this process."""

    def __init__(self, tmp: Path, capsys):
        super().__init__(tmp)
        self.capsys = capsys

    def cli(self, *args: object) -> tuple[int, str]:
        self.capsys.readouterr()
        rc = main(["--home", str(self.home), *map(str, args)])
        return rc, self.capsys.readouterr().err

    def ok_here(self, *args: object) -> None:
        rc, err = self.cli(*args)
        assert rc == 0, (args, err)

    def mount_at(self, target: str | Path, name: str) -> tuple[Path, int]:
        mp = self.mountpoint(name)
        return mp, self.mount(mp, image=target)

    def refused(self, *args: object, code: int = 1, needles: tuple[str, ...]) -> None:
        rc, err = self.cli(*args)
        assert rc == code, (args, err)
        for n in needles:
            assert n in err, (args, n, err)


@pytest.fixture
def rig(tmp_path: Path, capsys):
    r = InUseRig(tmp_path, capsys)
    try:
        yield r
    finally:
        r.cleanup()


def _log_of(rig: InUseRig, mp: Path) -> str:
    logs = list((rig.home / "mounts").glob("*.log"))
    return "".join(p.read_text(errors="replace") for p in logs if f"on {mp} " in p.read_text(errors="replace"))


def test_a_mounted_image_is_never_written(rig: InUseRig) -> None:
    """Issue 12, item 3: pv create and vg create succeeded on a mounted image (and so did lv
    create and mkfs of a volume of that new group); the unmount then said 'closed cleanly' and
    fsck found no filesystem."""
    image = rig.tmp / "fs.img"
    rig.ok_here("mkfs", image, "--size", "64M")
    host = rig.tmp / "h0.img"
    rig.ok_here("pv", "create", host, "--size", "32M")
    rig.ok_here("vg", "create", "h", host)
    mp, pid = rig.mount_at(image, "mnt")
    (mp / "data").write_bytes(b"still here")
    holder = (f"{image}: in use by pid {pid} (trax mount {image} {mp})", "even with --force")
    for force in ([], ["--force"]):
        rig.refused("pv", "create", image, *force, needles=holder)
        rig.refused("vg", "create", "vgm", image, *force, needles=holder)
        rig.refused("vg", "extend", "h", image, *force, needles=holder)
        rig.refused("mkfs", image, *force, needles=holder)
    rig.refused("fsck", image, code=8, needles=(f"{image}: in use by pid {pid}",))
    rig.refused("lv", "create", "vgm/x", "--size", "8M", needles=("no volume group named 'vgm'",))
    assert (mp / "data").read_bytes() == b"still here"  # the live mount never noticed
    rig.ok("umount", mp)
    assert "closed cleanly" in _log_of(rig, mp)
    rig.ok_here("fsck", image)
    rig.ok_here("vg", "extend", "h", image, "--force")  # free now: --force does what it says


def test_mounted_volumes_are_never_written_and_their_group_stays_usable(rig: InUseRig) -> None:
    """Two volumes of one group mounted at once (one group lock refused the second before);
    a new volume created, formatted and removed beside them; everything that would write a
    mounted volume, its group as a whole or one of its devices refused, naming the holder."""
    disks = [rig.tmp / f"d{i}.img" for i in range(2)]
    rig.ok_here("pv", "create", *disks, "--size", "96M")
    rig.ok_here("vg", "create", "h", *disks)
    rig.ok_here("lv", "create", "h/a", "--size", "48M", "--layout", "striped")
    rig.ok_here("lv", "create", "h/b", "--size", "48M")
    rig.ok_here("mkfs", "h/a")
    rig.ok_here("mkfs", "h/b")
    mp_a, pid_a = rig.mount_at("h/a", "mnt-a")
    mp_b, pid_b = rig.mount_at("h/b", "mnt-b")
    (mp_a / "a").write_bytes(b"volume a")
    (mp_b / "b").write_bytes(b"volume b")

    rig.ok_here("lv", "create", "h/c", "--size", "24M")  # beside the mounts: the group is not locked whole
    rig.ok_here("mkfs", "h/c")
    rig.ok_here("fsck", "h/c")
    rig.ok_here("lv", "remove", "h/c")

    a_held = (f"logical volume h/a: in use by pid {pid_a} (trax mount h/a {mp_a})",)
    rig.refused("mkfs", "h/a", "--force", needles=a_held)
    rig.refused("lv", "remove", "h/a", needles=a_held)
    rig.refused("lv", "extend", "h/a", "--size", "64M", needles=a_held)
    rig.refused("lv", "rename", "h/a", "z", needles=a_held)
    rig.refused("fsck", "h/a", code=8, needles=a_held)
    group_held = ("volume group h: in use by pid", f"pid {pid_a} (trax mount h/a", f"pid {pid_b} (trax mount h/b")
    rig.refused("vg", "remove", "h", "--force", needles=group_held)
    rig.refused("vg", "rename", "h", "z", needles=group_held)
    rig.refused("vg", "extend", "h", rig.tmp / "new.img", needles=group_held)
    for disk in disks:
        held = (f"{disk}: in use by pid", f"(trax mount h/a {mp_a})", "even with --force")
        for force in ([], ["--force"]):
            rig.refused("pv", "create", disk, *force, needles=held)
            rig.refused("vg", "create", "x", disk, *force, needles=held)
            rig.refused("mkfs", disk, *force, needles=held)
        rig.refused("pv", "remove", disk, needles=held)

    assert (mp_a / "a").read_bytes() == b"volume a" and (mp_b / "b").read_bytes() == b"volume b"
    rig.ok("umount", mp_a)
    rig.ok("umount", mp_b)
    assert "closed cleanly" in _log_of(rig, mp_a) and "closed cleanly" in _log_of(rig, mp_b)
    rig.ok_here("fsck", "h/a")
    rig.ok_here("fsck", "h/b")
    rig.ok_here("lv", "rename", "h/a", "z")  # free again
    rig.ok_here("vg", "rename", "h", "k")


@pytest.mark.timeout(60)
def test_an_exposed_volume_is_never_written(rig: InUseRig) -> None:
    disk = rig.tmp / "d.img"
    rig.ok_here("pv", "create", disk, "--size", "64M")
    rig.ok_here("vg", "create", "h", disk)
    rig.ok_here("lv", "create", "h/a", "--size", "24M")
    mp = rig.mountpoint("exp")
    proc = subprocess.Popen([sys.executable, "-m", "traxfs.tools.cli", "--home", str(rig.home), "lv", "expose",
                             "h/a", str(mp)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rig.pids.add(proc.pid)
    try:
        line = proc.stdout.readline()
        assert "exposed as" in line, proc.stderr.read() if proc.poll() is not None else line
        with open(mp / "volume", "r+b") as f:
            f.write(b"exposed bytes")
        cmd = f"pid {proc.pid} (trax lv expose h/a {mp})"
        rig.refused("mkfs", "h/a", "--force", needles=(f"logical volume h/a: in use by {cmd}",))
        rig.refused("lv", "remove", "h/a", needles=(f"logical volume h/a: in use by {cmd}",))
        rig.refused("vg", "remove", "h", "--force", needles=(f"volume group h: in use by {cmd}",))
        rig.refused("pv", "create", disk, "--force", needles=(f"{disk}: in use by {cmd}", "even with --force"))
        rig.refused("mkfs", disk, "--force", needles=(f"{disk}: in use by {cmd}",))
        rig.ok_here("lv", "create", "h/b", "--size", "24M")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0
    from traxfs.volume.group import READ, VolumeGroup
    from traxfs.volume.registry import Registry

    with VolumeGroup.open(Registry(rig.home), "h", hold=READ) as vg:
        assert vg.open_lv("a").read(0, 13) == b"exposed bytes"
        assert sorted(lv.name for lv in vg.meta.lvs) == ["a", "b"]

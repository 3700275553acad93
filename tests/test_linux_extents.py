"""Where a file's bytes are (issue 19): the ``trax.extents`` attribute through the real mount,
on an image file and on a striped logical volume, checked against the bytes on the devices
themselves; and what ``filefrag`` (FIEMAP) gets from a FUSE filesystem.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from fsmount import MiB, Mount, trax

pytestmark = pytest.mark.timeout(180)

PAGE = 4096


def _report(path) -> list[tuple[int, int, str, int, str, int, str, int]]:
    lines = os.getxattr(path, "trax.extents").decode().splitlines()  # getfattr -n trax.extents --only-values
    assert lines[0].split() == ["#", "file_offset", "length", "volume", "volume_offset", "tracks", "copy", "device",
                                "device_offset"]
    out = []
    for line in lines[1:]:
        f = line.split()
        out.append((int(f[0]), int(f[1]), f[2], int(f[3]), f[4], int(f[5]), f[6], int(f[7])))
    return out


def _read_at(path: str, off: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(off)
        return f.read(n)


def _payload(n: int) -> bytes:
    return b"".join(i.to_bytes(4, "big") for i in range(n // 4))


def _check_against_devices(path, data: bytes) -> list:
    os.sync()  # the devices' own bytes: what the server wrote reaches the image files
    rows = _report(path)
    covered = 0
    for file_off, length, _, _, _, _, device, dev_off in rows:
        want = data[file_off:file_off + length]  # the last page is zero past the end
        assert _read_at(device, dev_off, length) == want + bytes(length - len(want)), (file_off, device)
        covered += length
    assert covered == os.stat(path).st_blocks * 512
    return rows


def test_extents_of_a_file_on_an_image(fs_mount, mnt):
    if fs_mount is None:
        pytest.skip("traxfs only")
    data = _payload(3 * MiB + 5000)
    (mnt / "f").write_bytes(data)
    rows = _check_against_devices(mnt / "f", data)
    assert {r[2] for r in rows} == {str(fs_mount.image)} and {r[6] for r in rows} == {str(fs_mount.image)}
    assert {r[4] for r in rows} == {"-"}  # an image file has no tracks
    # computed, never listed or stored
    assert "trax.extents" not in os.listxattr(mnt / "f")
    for fn in (lambda: os.setxattr(mnt / "f", "trax.extents", b"x"), lambda: os.removexattr(mnt / "f", "trax.extents")):
        with pytest.raises(OSError) as e:
            fn()
        assert e.value.errno == errno.EOPNOTSUPP
    (mnt / "d").mkdir()
    with pytest.raises(OSError) as e:
        os.getxattr(mnt / "d", "trax.extents")
    assert e.value.errno == errno.ENODATA
    (mnt / "empty").write_bytes(b"")
    assert _report(mnt / "empty") == []


@pytest.mark.skipif(shutil.which("filefrag") is None, reason="filefrag (e2fsprogs) is not installed")
def test_filefrag_gets_no_fiemap_from_fuse(fs_mount, mnt):
    # the kernel's FUSE module carries no FIEMAP (EOPNOTSUPP), and its FIBMAP answers 0 for a
    # mount that is not fuseblk: filefrag then reports no extents at all for a file that has
    # them. trax.extents is the answer (man trax-mount(8)); this test notices if that changes.
    if fs_mount is None:
        pytest.skip("traxfs only")
    (mnt / "g").write_bytes(b"g" * MiB)
    r = subprocess.run(["filefrag", "-v", str(mnt / "g")], capture_output=True, text=True)
    assert "0 extents found" in r.stdout or r.returncode != 0, r.stdout + r.stderr
    assert len(_report(mnt / "g")) >= 1


def test_extents_of_a_file_on_a_striped_volume(tmp_path):
    home = tmp_path / "home"
    pvs = [str(tmp_path / f"pv{i}.img") for i in range(2)]
    for pv in pvs:
        trax("pv", "create", pv, "--size", "96M", home=home)
    trax("vg", "create", "vg0", *pvs, home=home)
    trax("lv", "create", "vg0/data", "--size", "128M", "--layout", "striped", "--stripes", "2",
         "--stripe-unit", "64K", home=home)
    trax("mkfs", "vg0/data", home=home)
    top = Path(tempfile.mkdtemp(prefix="traxfs-lv-", dir="/tmp"))
    mp = top / "mnt"
    mp.mkdir()
    m = Mount(Path("vg0/data"), home, mp, tmp_path / "mount.log", ())
    try:
        m.start()
        data = _payload(2 * MiB)
        (mp / "f").write_bytes(data)
        rows = _check_against_devices(mp / "f", data)
        assert {r[2] for r in rows} == {"vg0/data"}
        assert {r[6] for r in rows} == set(pvs)  # both devices hold part of it
        assert all(r[1] <= 64 * 1024 for r in rows)  # pieces never cross a stripe unit
        for _, length, _, vol_off, tracks, _, _, _ in rows:
            first, last = map(int, tracks.split("-"))
            assert first == vol_off // (64 * 1024) and last == (vol_off + length - 1) // (64 * 1024)
        m.stop()
    finally:
        m.kill()
        shutil.rmtree(top, ignore_errors=True)

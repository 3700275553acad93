"""SEEK_DATA / SEEK_HOLE through a real mount, against the host's filesystem, and the sparse-file
tools that use them (cp, tar).

pyfuse3 has no lseek handler; ``traxfs.ext.fuse_lowlevel`` adds one to the session. Without it
the kernel answers lseek itself as if every file were dense (SEEK_DATA returns the offset,
SEEK_HOLE the size), which these tests tell apart from real answers.

What is compared with the host (``tmp_path``, ext4 here): dense files and offsets at or past the
end exactly (offsets and errnos); sparse files by their data ranges. traxfs maps whole pages, a
write into a hole allocates its 1 MiB window (zero-filled) and a growing file preallocates up to
1 MiB past its end, so its data ranges are wider than ext4's 4 KiB blocks: every byte that is
data on the host must be data here, every extra byte must read as zeros, and at 1 MiB
granularity the data of traxfs lies within the host's, widened by the next MiB. Holes between
the windows (megabytes to gigabytes) must be found exactly where the host finds them.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fsmount import is_mounted, trax

from traxfs.fs.fuse.mount import NEEDED

MiB, GiB = 1 << 20, 1 << 30
PAGE = 4096
CHUNK = b"".join(i.to_bytes(4, "little") for i in range(PAGE // 4))  # 4 KiB, not zeros
pytestmark = pytest.mark.timeout(300)


# ----- helpers ----------------------------------------------------------------------------------
def seek(path: Path, off: int, whence: int) -> int | str:
    """lseek's answer, or the errno name it failed with."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, off, whence)
    except OSError as e:
        return errno.errorcode[e.errno]
    finally:
        os.close(fd)


def data_ranges(path: Path) -> list[tuple[int, int]]:
    """[start, end) of every data region, walking SEEK_DATA / SEEK_HOLE as cp and tar do."""
    out: list[tuple[int, int]] = []
    fd = os.open(path, os.O_RDONLY)
    try:
        size, off = os.fstat(fd).st_size, 0
        while off < size:
            try:
                start = os.lseek(fd, off, os.SEEK_DATA)
            except OSError as e:
                assert e.errno == errno.ENXIO
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            assert start < end <= size, (start, end, size)
            out.append((start, end))
            off = end
    finally:
        os.close(fd)
    return out


def make_sparse(path: Path, offsets: tuple[int, ...], size: int | None = None) -> None:
    """4 KiB of non-zero bytes at each offset; then the size, if given."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for off in offsets:
            os.pwrite(fd, CHUNK, off)
        if size is not None:
            os.ftruncate(fd, size)
    finally:
        os.close(fd)


def read_at(path: Path, off: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(off)
        return f.read(n)


def covered(inner: list[tuple[int, int]], outer: list[tuple[int, int]]) -> bool:
    """Is every byte of ``inner`` inside some range of ``outer``?"""
    return all(any(s >= os_ and e <= oe for os_, oe in outer) for s, e in inner)


def mib_chunks(ranges: list[tuple[int, int]]) -> set[int]:
    return {c for s, e in ranges for c in range(s // MiB, (e - 1) // MiB + 1)}


def assert_same_data(host: Path, mine: Path) -> None:
    """The comparison the module docstring describes."""
    want, got = data_ranges(host), data_ranges(mine)
    assert os.stat(host).st_size == os.stat(mine).st_size
    assert covered(want, got), f"data on the host not reported as data: host {want}, traxfs {got}"
    for s, e in got:  # the extra data is zeros, the shared data is equal
        assert read_at(mine, s, e - s) == read_at(host, s, e - s), (s, e)
    host_chunks = mib_chunks(want)
    assert host_chunks <= mib_chunks(got)
    assert mib_chunks(got) <= host_chunks | {c + 1 for c in host_chunks}, (want, got)


def status(mp: Path, name: str) -> dict:
    return json.loads((mp / ".trax" / name).read_bytes())


@pytest.fixture
def host(tmp_path: Path) -> Path:
    d = tmp_path / "host"
    d.mkdir()
    return d


# ----- lseek against the host -------------------------------------------------------------------
def test_dense_file_is_all_data_and_ends_in_the_hole_at_eof(fs_mount, mnt, host):
    size = 3 * MiB + 100
    for d in (host, mnt):
        (d / "dense").write_bytes(os.urandom(size))
    for off in (0, 1, PAGE, MiB + 7, size - 1, size, size + 1, 5 * GiB, -1):
        for whence in (os.SEEK_DATA, os.SEEK_HOLE):
            assert seek(mnt / "dense", off, whence) == seek(host / "dense", off, whence), (off, whence)
    assert seek(mnt / "dense", size - 1, os.SEEK_HOLE) == size
    assert seek(mnt / "dense", size, os.SEEK_DATA) == "ENXIO"


def test_sparse_5gib_file_with_data_at_0_1mib_5gib(fs_mount, mnt, host):
    offsets = (0, MiB, 5 * GiB)
    for d in (host, mnt):
        make_sparse(d / "sparse", offsets)
    assert_same_data(host / "sparse", mnt / "sparse")
    ranges = data_ranges(mnt / "sparse")
    assert [s for s, _ in ranges] == list(offsets)  # data starts exactly where it was written
    # the gap between 1 MiB's window and 5 GiB: same answers as the host from inside it
    for off in (3 * MiB, 2 * GiB, 5 * GiB - 1):
        assert seek(mnt / "sparse", off, os.SEEK_HOLE) == off == seek(host / "sparse", off, os.SEEK_HOLE)
        assert seek(mnt / "sparse", off, os.SEEK_DATA) == 5 * GiB == seek(host / "sparse", off, os.SEEK_DATA)
    st = os.stat(mnt / "sparse")
    assert st.st_blocks * 512 < 8 * MiB, "st_blocks must count the allocated pages, not the size"
    assert seek(mnt / "sparse", st.st_size, os.SEEK_DATA) == "ENXIO"


def test_file_that_is_all_hole(fs_mount, mnt, host):
    for d in (host, mnt):
        make_sparse(d / "hole", (), size=10 * MiB)
        make_sparse(d / "empty", ())
    for off in (0, 5 * MiB, 10 * MiB - 1, 10 * MiB):
        for whence in (os.SEEK_DATA, os.SEEK_HOLE):
            assert seek(mnt / "hole", off, whence) == seek(host / "hole", off, whence), (off, whence)
    assert seek(mnt / "hole", 0, os.SEEK_DATA) == "ENXIO"
    assert seek(mnt / "hole", 5 * MiB, os.SEEK_HOLE) == 5 * MiB
    assert seek(mnt / "empty", 0, os.SEEK_DATA) == seek(mnt / "empty", 0, os.SEEK_HOLE) == "ENXIO"
    assert os.stat(mnt / "hole").st_blocks == 0


def test_pages_preallocated_past_eof_are_not_data(fs_mount, mnt, host):
    # a growing file may preallocate past its end (given back at its last close); a truncated
    # one keeps pages past its new end only until the truncate frees them: neither is data
    # past the size
    for d in (host, mnt):
        make_sparse(d / "small", (0,))
        (d / "cut").write_bytes(os.urandom(2 * MiB))
        os.truncate(d / "cut", MiB + 10)
        make_sparse(d / "grown", (0,), size=10 * MiB)
    st = os.stat(mnt / "small")
    assert st.st_blocks * 512 == -(-st.st_size // 4096) * 4096  # closed: nothing held past the size
    for name in ("small", "cut"):
        size = os.stat(mnt / name).st_size
        assert data_ranges(mnt / name) == [(0, size)] == data_ranges(host / name)
        assert seek(mnt / name, 0, os.SEEK_HOLE) == size
    # growing the size over preallocated pages zeroes them: data (zeros), then the hole
    assert_same_data(host / "grown", mnt / "grown")
    assert seek(mnt / "grown", 2 * MiB, os.SEEK_DATA) == "ENXIO" == seek(host / "grown", 2 * MiB, os.SEEK_DATA)


def test_status_files_are_dense(fs_mount):
    fd = os.open(fs_mount.mp / ".trax" / "engine.json", os.O_RDONLY)
    try:
        content = b""
        while chunk := os.read(fd, 1 << 16):
            content += chunk
        assert content
        assert os.lseek(fd, 0, os.SEEK_DATA) == 0
        assert os.lseek(fd, 5, os.SEEK_HOLE) == len(content)
        with pytest.raises(OSError) as e:
            os.lseek(fd, len(content), os.SEEK_DATA)
        assert e.value.errno == errno.ENXIO
    finally:
        os.close(fd)


def test_lseek_reaches_the_handler_added_to_pyfuse3(fs_mount, mnt):
    """The route itself: the session got our lseek slot, and SEEK_DATA / SEEK_HOLE requests
    reach it (SEEK_SET / SEEK_END never leave the kernel)."""
    make_sparse(mnt / "f", (MiB,))
    before = status(fs_mount.mp, "filesystem.json")["fuse_lowlevel"]
    assert before["installed"] == sorted(NEEDED)
    fd = os.open(mnt / "f", os.O_RDONLY)
    try:
        assert os.lseek(fd, 0, os.SEEK_DATA) == MiB
        assert os.lseek(fd, MiB, os.SEEK_HOLE) == MiB + PAGE
        os.lseek(fd, 0, os.SEEK_SET)
        os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)
    assert status(fs_mount.mp, "filesystem.json")["fuse_lowlevel"]["lseek"] == before["lseek"] + 2


# ----- the tools --------------------------------------------------------------------------------
def data_read(mp: Path) -> int:
    return status(mp, "data.json")["data_bytes_read"]


def test_cp_sparse_out_of_and_into_the_mount_keeps_holes(fs_mount, mnt, host):
    offsets = (0, MiB, 5 * GiB)
    make_sparse(host / "src", offsets)
    make_sparse(mnt / "src", offsets)
    read_before = data_read(fs_mount.mp)
    subprocess.run(["cp", "--sparse=always", str(mnt / "src"), str(host / "out")], check=True, timeout=240)
    # cp skipped the holes (SEEK_DATA / SEEK_HOLE): it read the data windows, not 5 GiB
    assert data_read(fs_mount.mp) - read_before < 8 * MiB
    assert os.stat(host / "out").st_blocks <= os.stat(host / "src").st_blocks
    assert_same_data(host / "src", host / "out")

    subprocess.run(["cp", "--sparse=always", str(host / "src"), str(mnt / "in")], check=True, timeout=240)
    assert os.stat(mnt / "in").st_blocks * 512 < 8 * MiB
    assert_same_data(host / "src", mnt / "in")
    # and out again: as sparse on the host as the original
    subprocess.run(["cp", "--sparse=always", str(mnt / "in"), str(host / "again")], check=True, timeout=240)
    assert os.stat(host / "again").st_blocks <= os.stat(host / "src").st_blocks
    assert_same_data(host / "src", host / "again")


def test_tar_sparse_archives_only_the_data(fs_mount, mnt, host):
    offsets = (0, MiB, 900 * MiB)
    make_sparse(mnt / "big", offsets, size=GiB)
    make_sparse(host / "big", offsets, size=GiB)
    read_before = data_read(fs_mount.mp)
    archive = host / "a.tar"
    subprocess.run(["tar", "--sparse", "-cf", str(archive), "-C", str(mnt), "big"], check=True, timeout=240)
    assert data_read(fs_mount.mp) - read_before < 8 * MiB
    assert archive.stat().st_size < 8 * MiB
    out = host / "x"
    out.mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-C", str(out)], check=True, timeout=240)
    assert_same_data(host / "big", out / "big")


# ----- the route must be taken, or the mount refused ---------------------------------------------
def test_pyfuse3_loaded_first_is_refused_loudly():
    code = ("import pyfuse3\nimport traxfs.ext.fuse_lowlevel as ll\n"
            "try:\n    ll.install({'lseek': lambda *a: 0})\nexcept RuntimeError as e:\n    print(e)\n"
            "else:\n    print('accepted')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "pyfuse3 was imported before traxfs.ext.fuse_lowlevel" in r.stdout, r.stdout + r.stderr


def test_mount_refused_when_pyfuse3_bypasses_the_interposition(tmp_path):
    """libfuse preloaded comes first in the global symbol scope, so pyfuse3 binds to it: the
    session lacks lseek, and the mount says so instead of serving wrong SEEK_HOLE answers."""
    home, image, mp = tmp_path / "home", tmp_path / "fs.img", tmp_path / "mnt"
    mp.mkdir()
    trax("mkfs", str(image), "--size", str(256 * MiB), home=home)
    libfuse = subprocess.run(["pkg-config", "--variable=libdir", "fuse3"], capture_output=True, text=True,
                             check=True).stdout.strip() + "/libfuse3.so.3"
    try:
        r = subprocess.run([sys.executable, "-m", "traxfs.tools.cli", "--home", str(home), "mount", "--foreground",
                            str(image), str(mp)], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "LD_PRELOAD": libfuse})
    finally:
        if is_mounted(mp):
            subprocess.run(["fusermount3", "-uz", str(mp)], capture_output=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "made its FUSE session without traxfs.ext.fuse_lowlevel" in r.stderr
    assert "Traceback" not in r.stderr
    assert not is_mounted(mp)

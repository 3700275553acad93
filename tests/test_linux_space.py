"""Space of a file as Linux tools use it (issue 19), through the real mount: fallocate(1)
(preallocate, ``--keep-size``, ``--punch-hole``, ``--zero-range``), ``cp --sparse=always``
(``SEEK_DATA``/``SEEK_HOLE``) and what ``st_blocks`` says after each.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess

import pytest
from conftest import IO_PHASES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.timeout(120)

MiB = 1 << 20
PAGE = 4096


def _blocks(p) -> int:
    return os.stat(p).st_blocks * 512


def _fallocate(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["fallocate", *map(str, args)], capture_output=True, text=True)


def _fallocate_calls(fs_mount) -> int:
    if fs_mount is None:
        return 0
    return json.loads((fs_mount.mp / ".trax" / "filesystem.json").read_text())["fuse_lowlevel"]["fallocate"]


def test_fallocate_preallocates_zeros_and_grows_the_size(fs_mount, mnt):
    f = mnt / "pre"
    before = _fallocate_calls(fs_mount)
    r = _fallocate("-l", 8 * MiB, f)
    assert r.returncode == 0, r.stderr
    if fs_mount is not None:  # the route: pyfuse3 has no fallocate handler, traxfs.ext.fuse_lowlevel adds it
        assert _fallocate_calls(fs_mount) == before + 1
    assert os.stat(f).st_size == 8 * MiB and _blocks(f) >= 8 * MiB
    assert f.read_bytes() == bytes(8 * MiB)
    # a hole inside a file is filled; the data around it stays
    g = mnt / "holey"
    with open(g, "wb") as w:
        w.write(b"x" * PAGE)
        w.seek(3 * MiB)
        w.write(b"y" * PAGE)
    before = _blocks(g)
    r = _fallocate("-o", 0, "-l", 2 * MiB, g)
    assert r.returncode == 0, r.stderr
    assert _blocks(g) >= before + 2 * MiB - PAGE and os.stat(g).st_size == 3 * MiB + PAGE
    data = g.read_bytes()
    assert data[:PAGE] == b"x" * PAGE and data[PAGE:3 * MiB] == bytes(3 * MiB - PAGE) and data[3 * MiB:] == b"y" * PAGE


def test_posix_fallocate_of_a_file_being_appended_to(mnt):
    # appends preallocate pages past the end; a preallocation over them must still hold space
    f = mnt / "appended"
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"a" * 65536)
        os.write(fd, b"b" * 65536)
        os.posix_fallocate(fd, 0, 4 * MiB)
        assert os.fstat(fd).st_size == 4 * MiB
        assert os.pread(fd, 4 * MiB, 0) == b"a" * 65536 + b"b" * 65536 + bytes(4 * MiB - 131072)
    finally:
        os.close(fd)
    assert _blocks(f) >= 4 * MiB


def test_keep_size_within_the_file_and_refused_past_its_end(mnt):
    f = mnt / "keep"
    with open(f, "wb") as w:
        w.truncate(4 * MiB)  # all hole
    assert _blocks(f) == 0
    r = _fallocate("-n", "-o", MiB, "-l", MiB, f)
    assert r.returncode == 0, r.stderr
    assert _blocks(f) >= MiB and os.stat(f).st_size == 4 * MiB
    r = _fallocate("-n", "-o", 3 * MiB, "-l", 2 * MiB, f)  # past the end: no space is kept there
    assert r.returncode != 0 and "unsupported" in r.stderr.lower(), r.stderr  # EOPNOTSUPP
    assert os.stat(f).st_size == 4 * MiB


def test_punch_hole_frees_pages_and_reads_zeros(mnt):
    f = mnt / "punch"
    payload = bytes(range(256)) * (4 * MiB // 256)
    f.write_bytes(payload)
    full = _blocks(f)
    r = _fallocate("--punch-hole", "-o", MiB + 100, "-l", 2 * MiB, f)
    assert r.returncode == 0, r.stderr
    assert os.stat(f).st_size == 4 * MiB
    assert _blocks(f) <= full - 2 * MiB + 2 * PAGE
    got = f.read_bytes()
    start, end = MiB + 100, 3 * MiB + 100
    assert got[:start] == payload[:start] and got[end:] == payload[end:]
    assert got[start:end] == bytes(end - start)
    with open(f, "rb") as r_:
        assert os.lseek(r_.fileno(), MiB + 100, os.SEEK_DATA) == MiB + 100  # the zeroed edge page stays data
        assert os.lseek(r_.fileno(), 0, os.SEEK_HOLE) == MiB + PAGE  # the first whole page punched


def test_zero_range_and_its_size(mnt):
    f = mnt / "zero"
    f.write_bytes(b"z" * (2 * MiB))
    r = _fallocate("-z", "-o", 1000, "-l", 3 * MiB, f)
    assert r.returncode == 0, r.stderr
    assert os.stat(f).st_size == 3 * MiB + 1000
    got = f.read_bytes()
    assert got[:1000] == b"z" * 1000 and got[1000:] == bytes(3 * MiB)


def test_bad_fallocate_requests_change_nothing(mnt):
    f = mnt / "bad"
    f.write_bytes(b"q" * 10000)
    fd = os.open(f, os.O_RDWR)
    try:
        for mode, off, length, err in ((0, 0, 0, errno.EINVAL), (0, -1, 10, errno.EINVAL),
                                       (0x08, 0, PAGE, errno.EOPNOTSUPP),  # COLLAPSE_RANGE
                                       (0x02, 0, PAGE, errno.EOPNOTSUPP)):  # PUNCH_HOLE without KEEP_SIZE
            with pytest.raises(OSError) as e:
                _raw_fallocate(fd, mode, off, length)
            assert e.value.errno == err, (mode, off, length)
    finally:
        os.close(fd)
    assert f.read_bytes() == b"q" * 10000
    (mnt / "dir").mkdir()
    r = _fallocate("-l", PAGE, mnt / "dir")
    assert r.returncode != 0


def _raw_fallocate(fd: int, mode: int, off: int, length: int) -> None:
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def test_cp_sparse_always_keeps_holes(mnt):
    src = mnt / "sparse-src"
    with open(src, "wb") as w:
        w.truncate(9 * MiB + 10)  # the size first: writes inside it allocate only their pages
        os.pwrite(w.fileno(), b"a" * PAGE, 0)
        os.pwrite(w.fileno(), b"b" * PAGE, 5 * MiB)
        os.pwrite(w.fileno(), b"c" * 10, 9 * MiB)
    assert _blocks(src) == 3 * PAGE
    dst = mnt / "sparse-dst"
    r = subprocess.run(["cp", "--sparse=always", str(src), str(dst)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert dst.read_bytes() == src.read_bytes()
    assert _blocks(dst) <= 4 * PAGE
    with open(dst, "rb") as d:
        assert os.lseek(d.fileno(), 0, os.SEEK_HOLE) == PAGE
        assert os.lseek(d.fileno(), PAGE, os.SEEK_DATA) == 5 * MiB


@pytest.mark.timeout(180)
def test_punched_and_preallocated_space_survives_a_crash(tmp_path):
    # SIGKILL after fsync: the next mount recovers what fallocate did, and fsck finds the
    # extent map, the allocation maps and the checksums consistent
    from fsmount import traxfs_mount

    with traxfs_mount(tmp_path, size=256 * MiB) as m:
        f = m.mp / "f"
        payload = bytes(range(256)) * (4 * MiB // 256)
        f.write_bytes(payload)
        assert _fallocate("--punch-hole", "-o", MiB, "-l", MiB, f).returncode == 0
        assert _fallocate("-o", 4 * MiB, "-l", 2 * MiB, f).returncode == 0
        fd = os.open(f, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        m.kill()
        r = m.fsck()  # read-only check of the crashed image (recovery on an overlay)
        assert r.returncode == 0 and "clean" in r.stdout, r.stdout + r.stderr
        m.restart()
        got = f.read_bytes()
        assert got == payload[:MiB] + bytes(MiB) + payload[2 * MiB:] + bytes(2 * MiB)
        assert os.stat(f).st_blocks * 512 == 5 * MiB


# ----- a model check: writes, truncates and every fallocate mode against a bytearray ------------
KEEP, PUNCH, ZERO = 0x01, 0x02, 0x10
LIMIT = 3 * MiB
offsets = st.integers(0, LIMIT).map(lambda x: x if x % 3 else x - x % PAGE)  # page-aligned a third of the time
lengths = st.integers(1, MiB).map(lambda x: x if x % 3 else -(-x // PAGE) * PAGE)
ops = st.one_of(
    st.tuples(st.just("write"), offsets, lengths),
    st.tuples(st.just("truncate"), offsets, st.just(0)),
    st.tuples(st.sampled_from(["alloc", "alloc_keep", "punch", "zero", "zero_keep"]), offsets, lengths),
)


@settings(max_examples=12, phases=IO_PHASES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # each example starts the file anew
@given(st.lists(ops, min_size=1, max_size=12))
def test_fallocate_against_a_model(mnt, steps):
    f = mnt / "model"
    f.write_bytes(b"")
    model = bytearray()
    fd = os.open(f, os.O_RDWR)
    try:
        for i, (op, off, n) in enumerate(steps):
            end = off + n
            if op == "write":
                data = bytes([(i * 37 + 1) % 251 + 1]) * n
                os.pwrite(fd, data, off)
                model.extend(bytes(max(0, end - len(model))))
                model[off:end] = data
            elif op == "truncate":
                os.ftruncate(fd, off)
                model = model[:off] + bytes(max(0, off - len(model)))
            else:
                mode = {"alloc": 0, "alloc_keep": KEEP, "punch": PUNCH | KEEP, "zero": ZERO, "zero_keep": ZERO | KEEP}[op]
                if mode == KEEP and end > len(model):
                    with pytest.raises(OSError) as e:
                        _raw_fallocate(fd, mode, off, n)
                    assert e.value.errno == errno.EOPNOTSUPP
                    continue
                _raw_fallocate(fd, mode, off, n)
                if mode in (PUNCH | KEEP, ZERO, ZERO | KEEP):
                    stop = min(end, len(model))
                    if stop > off:
                        model[off:stop] = bytes(stop - off)
                if not mode & KEEP and end > len(model):
                    model.extend(bytes(end - len(model)))
            assert os.fstat(fd).st_size == len(model), (i, op, off, n)
        assert os.pread(fd, len(model) + 1, 0) == bytes(model)
    finally:
        os.close(fd)

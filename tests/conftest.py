"""Shared fixtures for the volume-manager tests.

* ``registry``   — a fresh :class:`Registry` whose home is inside the test's ``tmp_path``.
* ``make_pvs``   — factory: ``make_pvs(n, size=..., unit=..., prefix=...)`` creates ``n`` sparse
  image files, labels them with ``pv_create`` and returns their paths (``str``).
* ``loop_attach`` — factory: ``loop_attach(image_path, sector_size=None)`` attaches an image file
  to a free loop device (``losetup --find --show``, optionally ``--sector-size``) and returns
  ``/dev/loopN``; every device attached is detached (``losetup -d``) in teardown, whether the
  test passed or failed. The test is skipped, with the reason, when losetup is not usable on
  this machine.

Helpers used by several test files live here too (plain functions, imported as
``from conftest import ...``; pytest puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from traxfs.volume.disk.profiles import atlas10k3, scaled
from traxfs.volume.label import MDA_COUNT, MDA_OFFSET, MDA_SLOT
from traxfs.volume.registry import Registry
from traxfs.volume.scan import pv_create


class _CheckoutAsPlainDirectory:
    """The checkout's root holds ``__init__.py`` (it is the package ``traxfs``), so pytest would
    collect it as a test package and import that ``__init__`` under the folder's name — a second
    copy of the package, which fails for a folder name that is not a Python name (``wt-queues``)
    and whose relative imports would load the extensions twice. The tests import the installed
    package instead; the root is collected as a plain directory."""

    @staticmethod
    def pytest_collect_directory(path, parent):
        if path == parent.config.rootpath:
            return pytest.Dir.from_parent(parent, path=path)
        return None


def pytest_configure(config):
    config.pluginmanager.register(_CheckoutAsPlainDirectory(), "traxfs-checkout-as-plain-directory")

MiB = 1024 * 1024
QUAD_DISK = scaled(atlas10k3(), 40, zones=2)  # the quad_fs fixture's disks (zone 0: N = 686, H = 139)

# No per-example deadline (I/O timing varies on a loaded 2-core machine), and no database of
# examples written into the source tree (a failure prints its reproduction blob instead). The
# example counts stay each test's own choice: every volume test sets a modest max_examples.
settings.register_profile(
    "traxfs",
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("TRAXFS_HYPOTHESIS_PROFILE", "traxfs"))

# For property tests that do real I/O: no shrinking. A failing example is reported as found;
# shrinking one would rerun megabytes of I/O for minutes, and hypothesis swallows the
# pytest-timeout alarm while it shrinks.
IO_PHASES = (Phase.explicit, Phase.reuse, Phase.generate)


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole run (a JVM start costs seconds and memory: the
    Spark tests of files, queues and tables share it). Tests that change a setting unset it."""
    from traxfs.tools.spark_job import session, stop

    s = session()
    try:
        yield s
    finally:
        stop(s)


@pytest.fixture
def quad_fs(registry, tmp_path):
    """A filesystem on a quadrangle volume (48 MiB) over two simulated Atlas 10K III disks scaled
    to 40 cylinders a zone (zone 0: N = 686, H = 139; b = 8 sectors = one page, d = 4), as
    ``(fs, vg, lv, olv)``; see :data:`QUAD_DISK`."""
    from traxfs.fs.filesystem import FileSystem
    from traxfs.volume.group import VolumeGroup

    paths = []
    for k in range(2):
        paths.append(str(tmp_path / f"disk{k}.img"))
        pv_create(registry, paths[-1], model=QUAD_DISK)
    VolumeGroup.create(registry, "quad", paths, extent_size=MiB)
    with VolumeGroup.open(registry, "quad") as vg:
        lv = vg.create_lv("q", 48 * MiB, "quadrangle")
        olv = vg.open_lv("q")
        FileSystem.mkfs(olv)
        fs = FileSystem.open(olv)
        yield fs, vg, lv, olv
        fs.close()


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    return Registry(home=tmp_path / "home")


@pytest.fixture
def make_pvs(registry: Registry, tmp_path: Path):
    """Factory of labelled sparse image PVs; returns absolute paths."""
    counter = [0]

    def make(n: int, size: int = 64 * MiB, unit: int | None = None, prefix: str = "pv") -> list[str]:
        out = []
        for _ in range(n):
            path = str(tmp_path / f"{prefix}{counter[0]}.img")
            counter[0] += 1
            pv_create(registry, path, size=size, unit=unit)
            out.append(path)
        return out

    return make


def _losetup_problem() -> str | None:
    """Why loop devices cannot be used here, or None if they can."""
    if shutil.which("losetup") is None:
        return "losetup is not installed"
    if os.geteuid() != 0:
        return "attaching loop devices needs root"
    probe = subprocess.run(["losetup", "--find"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"losetup --find fails: {probe.stderr.strip() or probe.returncode}"
    return None


@pytest.fixture
def loop_attach():
    problem = _losetup_problem()
    if problem:
        pytest.skip(f"loop devices unavailable: {problem}")
    attached: list[str] = []

    def attach(image: str | os.PathLike, sector_size: int | None = None) -> str:
        extra = ["--sector-size", str(sector_size)] if sector_size else []
        res = subprocess.run(["losetup", "--find", "--show", *extra, str(image)], capture_output=True, text=True,
                             timeout=30)
        if res.returncode != 0:
            raise RuntimeError(f"losetup --find --show {' '.join(extra)} {image} failed: {res.stderr.strip()}")
        dev = res.stdout.strip()
        attached.append(dev)
        return dev

    try:
        yield attach
    finally:
        failures = []
        for dev in reversed(attached):
            res = subprocess.run(["losetup", "-d", dev], capture_output=True, text=True, timeout=30)
            if res.returncode != 0:
                failures.append(f"{dev}: {res.stderr.strip()}")
        if failures:
            pytest.fail("could not detach loop device(s): " + "; ".join(failures))


# ----- helpers ----------------------------------------------------------------------------------

def head_hash(path: str, n: int = 2 * MiB) -> str:
    """sha256 of the first ``n`` bytes of a device: its labels and metadata copies."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read(n)).hexdigest()


def file_hash(path: str) -> str:
    """sha256 of a whole image file (sparse files hash quickly enough at test sizes)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 * MiB):
            h.update(chunk)
    return h.hexdigest()


def slot_offset(slot: int) -> int:
    assert 0 <= slot < MDA_COUNT
    return MDA_OFFSET + slot * MDA_SLOT


def read_at(path: str, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def write_at(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def flip_byte(path: str, offset: int) -> None:
    b = read_at(path, offset, 1)
    write_at(path, offset, bytes([b[0] ^ 0x5A]))


# ----- engines for the structure tests ---------------------------------------------------------
def new_engine(path: str, **kw):
    """A fresh engine on a 96 MiB image with a 32 MiB log: one transaction must fit in the log,
    and the stateful tests draw transactions of thousands of operations."""
    from traxfs.fs.engine.engine import Engine
    from traxfs.volume.device import create_image

    dev = create_image(path, 96 * MiB)
    Engine.format(dev, log_size=32 * MiB)
    return Engine.open(dev, **kw)


def device_snapshot(eng, dst: str) -> None:
    """The engine's device as a crash at this instant would leave it, copied to a new image at
    ``dst``: the log flushed so far (forced here), the pages written so far. Zero MiB-chunks are
    skipped (a sparse copy)."""
    from traxfs.volume.device import create_image

    eng.log.flush_all()
    out = create_image(dst, eng.dev.size)
    for off in range(0, eng.dev.size, MiB):
        chunk = eng.dev.read(off, MiB)
        if chunk.count(0) != len(chunk):
            out.write(off, chunk)
    out.close()


@pytest.fixture
def engine_dev(tmp_path):
    """A freshly formatted engine image (48 MiB, 4 MiB log), closed after the test."""
    from traxfs.fs.engine.engine import Engine
    from traxfs.volume.device import create_image

    d = create_image(str(tmp_path / "engine.img"), 48 * MiB)
    Engine.format(d, log_size=4 * MiB)
    yield d
    d.close()


# ----- filesystems for the in-process tests ----------------------------------------------------
@pytest.fixture
def image_fs(tmp_path):
    """A fresh filesystem on a 64 MiB image file, open; closed after the test."""
    from traxfs.fs.filesystem import FileSystem
    from traxfs.volume.device import ImageFileDevice

    dev = ImageFileDevice(str(tmp_path / "fs.img"), 64 * MiB, create=True)
    FileSystem.mkfs(dev)
    fs = FileSystem.open(dev)
    yield fs
    fs.close()
    dev.close()


@pytest.fixture
def mirror_fs(registry, make_pvs):
    """A filesystem made on a mirrored volume of four image PVs (not opened); yields (vg, lv)."""
    from traxfs.fs.filesystem import FileSystem
    from traxfs.volume.group import VolumeGroup

    paths = make_pvs(4, size=48 * MiB)
    VolumeGroup.create(registry, "mvg", paths, extent_size=MiB)
    with VolumeGroup.open(registry, "mvg") as vg:
        vg.create_lv("m", 32 * MiB, "linear", mirror=True)
        lv = vg.open_lv("m")
        FileSystem.mkfs(lv, log_size=16 * MiB)
        yield vg, lv


def leg_offset(vg, lv, leg: int, offset: int) -> tuple[str, int]:
    """Where byte ``offset`` of mirrored ``lv`` lies on leg ``leg``: the PV's path and offset."""
    (p,) = lv.legs[leg].pieces(offset, 1)
    return vg.meta.pv(p.pv).path, p.dev_offset


def leg_page(vg, lv, leg: int, offset: int) -> bytes:
    """The 4 KiB at byte ``offset`` of ``lv`` as leg ``leg`` holds them."""
    path, off = leg_offset(vg, lv, leg, offset)
    with open(path, "rb") as f:
        f.seek(off)
        return f.read(4096)


def reopen_engine(eng, crash: bool):
    """Close ``eng`` cleanly, or crash it (``crash``), and open its device again (recovery)."""
    from traxfs.fs.engine.engine import Engine

    if crash:
        eng.unclean_shutdown()
    else:
        eng.close()
    return Engine.open(eng.dev)


def bulk_build_all_or_nothing(path: str, cls, items):
    """Drive a structure's ``bulk_create`` (``cls``: BTree or LinearHash) through the three cases
    of Stasis' logging opt-out on a fresh engine at ``path``: aborted, then a crash before commit —
    no structure and no allocated page either way — then committed and a crash. Returns the
    reopened engine and the structure named ``kept`` for the caller's checks of its contents."""
    from traxfs.fs.engine.check import check_engine
    from traxfs.fs.engine.engine import Engine
    from traxfs.volume.device import ImageFileDevice

    eng = new_engine(path)
    tx = eng.begin()  # aborted: no structure, no page left allocated
    cls.bulk_create(eng, tx, items, "gone")
    eng.abort(tx)
    assert cls.open_named(eng, "gone") is None and check_engine(eng, leaks=True) == []
    tx = eng.begin()  # crash before commit: the same
    cls.bulk_create(eng, tx, items, "gone")
    eng.log.flush_all()
    eng.unclean_shutdown()
    eng = Engine.open(ImageFileDevice(path))
    assert cls.open_named(eng, "gone") is None and check_engine(eng, leaks=True) == []
    tx = eng.begin()  # committed, then a crash: every entry is there, pages reused from above
    cls.bulk_create(eng, tx, items, "kept")
    eng.commit(tx)
    eng.unclean_shutdown()
    eng = Engine.open(ImageFileDevice(path))
    return eng, cls.open_named(eng, "kept")


@pytest.fixture
def eng(tmp_path):
    """An open engine, aborted-and-closed after the test whatever state it was left in."""
    e = new_engine(str(tmp_path / "engine.img"))
    yield e
    if not e.closed:
        for tx in e.active_transactions():
            e.abort(tx)
        e.close()


# ----- the filesystem under test --------------------------------------------------------------
@pytest.fixture(scope="module")
def fs_mount(tmp_path_factory):
    """One traxfs mount per test module (mkfs, mount, and at the end unmount + fsck, which must
    be clean); ``None`` when ``TRAX_FS_TARGET=local``."""
    if os.environ.get("TRAX_FS_TARGET", "traxfs") == "local":
        yield None
        return
    from fsmount import traxfs_mount

    with traxfs_mount(tmp_path_factory.mktemp("traxfs")) as m:
        yield m


@pytest.fixture
def mnt(fs_mount, request):
    """An empty, world-writable directory on the filesystem under test (the POSIX, fsx and Spark
    suites use it), whose ancestors other users may traverse. ``TRAX_FS_TARGET=local`` runs
    those suites against the host's own filesystem (a reference: every POSIX test must also pass
    there); the default is a fresh folder in the module's traxfs mount (a real FUSE mount with
    ``allow_other``, so non-root users reach it; unmounted and checked after the module)."""
    if fs_mount is None:
        # under /tmp itself: pytest's tmp_path is private to root, non-root users could not enter
        top = Path(tempfile.mkdtemp(prefix="traxfs-local-", dir="/tmp"))
        try:
            os.chmod(top, 0o755)
            root = top / "root"
            root.mkdir()
            os.chmod(root, 0o777)
            yield root
        finally:
            shutil.rmtree(top, ignore_errors=True)
        return
    root = Path(tempfile.mkdtemp(prefix="t-", dir=fs_mount.mp))
    os.chmod(root, 0o777)
    yield root

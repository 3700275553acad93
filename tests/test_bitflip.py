"""Bit flips under a real mount: no read ever returns wrong bytes.

A tree of files and directories is written through a real FUSE mount and unmounted. Then, round
after round, random bytes are flipped in the image — in file data pages (inside the files'
sizes) and in the engine's own pages (directories, inodes, extent maps, checksums, allocation
maps: every allocated page no extent owns) — the image is mounted again and every file is
read and every directory listed:

* on a plain image every read returns the right bytes or fails with EIO, every listing is
  right or EIO — never wrong bytes, never a wrong name; a round whose damage hits what the
  mount itself needs may refuse the mount, with a message;
* on a mirrored volume (four image PVs) with the flips in ONE leg only, every read and listing
  is right (served from the good leg), and after the reads and a ``trax scrub`` the damaged leg
  holds the good leg's bytes again at every flipped place.

``trax scrub`` from the command line: a clean image exits 0; a flipped data page on a plain
image exits 4 naming the file; a mirror with one damaged leg exits 1, and a second scrub 0.

Rounds: a few in the default run; ``TRAX_SOAK=N`` multiplies them.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest
from fsmount import Mount, trax

from traxfs.fs.engine.page import PAGE_SIZE
from traxfs.fs.filesystem import FileSystem
from traxfs.fs.keys import U64, unpack_extent
from traxfs.volume.device import ImageFileDevice
from traxfs.volume.group import VolumeGroup
from traxfs.volume.overlay import OverlayDevice
from traxfs.volume.registry import Registry

SOAK = int(os.environ.get("TRAX_SOAK", "1"))
MiB = 1 << 20
if shutil.which("fusermount3") is None or not os.path.exists("/dev/fuse"):
    pytest.skip("FUSE (fusermount3, /dev/fuse) is not available", allow_module_level=True)


def write_tree(root: Path, seed: int) -> tuple[dict[str, bytes], dict[str, set[str]]]:
    """Files of assorted sizes in a few directories; returns (file -> bytes, dir -> names)."""
    rng = random.Random(seed)
    files, dirs = {}, {"": set()}
    for d, count in enumerate((8, 8, 8, 160)):  # the big one spreads its entries over many tree pages
        dname = f"d{d}"
        (root / dname).mkdir()
        dirs[""].add(dname)
        dirs[dname] = set()
        for i in range(count):
            name = f"file-{i:04d}-{'x' * rng.randrange(40)}"
            data = rng.randbytes(rng.choice([0, 1, 700, 4096, 9000, 40_000, 150_000] if count < 20 else [10, 3000]))
            (root / dname / name).write_bytes(data)
            files[f"{dname}/{name}"] = data
            dirs[dname].add(name)
    return files, dirs


def targets(dev) -> tuple[int, list[tuple[int, int]], list[int]]:
    """(page area offset, data pages with the bytes of them inside the file's size, engine
    pages): what there is to damage, read from an overlay (nothing written)."""
    fs = FileSystem.open(OverlayDevice(dev))
    try:
        sizes = {node.ino: node.size for node in fs.iter_inodes()}
        data, owned = [], set()
        for k, v in fs.t["extents"].items():
            ino, lpage = U64.unpack(k[:8])[0], U64.unpack(k[8:16])[0]
            phys, count, _ = unpack_extent(v)
            for i in range(count):
                owned.add(phys + i)
                visible = min(PAGE_SIZE, sizes[ino] - (lpage + i) * PAGE_SIZE)
                if visible > 0:
                    data.append((phys + i, visible))
        return fs.e.sb.pages_offset, data, [p for p in fs.e.pages_in_use() if p not in owned]
    finally:
        fs.crash()


def flip_at(path: str, offset: int, rng: random.Random) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        b = os.pread(fd, 1, offset)
        os.pwrite(fd, bytes([b[0] ^ (1 << rng.randrange(8))]), offset)
    finally:
        os.close(fd)


def choose_flips(rng: random.Random, base: int, data: list[tuple[int, int]], meta: list[int], n_data: int,
                 n_meta: int) -> list[int]:
    """Volume offsets to flip: inside the covered bytes of data pages, anywhere in engine pages."""
    out = []
    for page, visible in rng.sample(data, min(n_data, len(data))):
        out.append(base + page * PAGE_SIZE + rng.randrange(visible))
    for page in rng.sample(meta, min(n_meta, len(meta))):
        out.append(base + page * PAGE_SIZE + rng.randrange(PAGE_SIZE))
    return out


class Outcome:
    def __init__(self) -> None:
        self.right = self.eio = 0
        self.wrong: list[str] = []


def read_all(mp: Path, files: dict[str, bytes], dirs: dict[str, set[str]], out: Outcome) -> None:
    """Read every file and list every directory: right, or EIO; anything else is wrong."""
    def listing(d: str) -> set[str]:
        return set(os.listdir(mp / d)) - {".trax", ".snapshots", "queues", "tables"}

    checks = [(f"listing /{d}", lambda d=d: listing(d), names) for d, names in dirs.items()]
    checks += [(f"/{p}", lambda p=p: (mp / p).read_bytes(), want) for p, want in files.items()]
    for what, get, want in checks:
        try:
            got = get()
        except OSError as e:
            if e.errno != errno.EIO:
                out.wrong.append(f"{what}: {e}")
            out.eio += 1
            continue
        if got != want:
            out.wrong.append(f"{what}: {len(got)} entries or bytes where {len(want)} were expected, not equal")
        else:
            out.right += 1


@pytest.fixture
def mountpoint():
    top = Path(tempfile.mkdtemp(prefix="traxfs-flip-", dir="/tmp"))
    mp = top / "mnt"
    mp.mkdir()
    try:
        yield mp
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.timeout(300)
def test_flipped_bytes_in_a_plain_image_read_right_or_eio(tmp_path, mountpoint):
    home, image = tmp_path / "home", tmp_path / "fs.img"
    trax("mkfs", str(image), "--size", str(48 * MiB), home=home)
    m = Mount(image, home, mountpoint, tmp_path / "mount.log", ())
    m.start()
    try:
        files, dirs = write_tree(mountpoint, 1)
    finally:
        m.stop()
    r = trax("scrub", str(image), home=home, check=False)
    assert r.returncode == 0 and r.stdout.strip().endswith("clean"), (r.stdout, r.stderr)
    base, data, meta = targets(ImageFileDevice(str(image)))
    pristine = tmp_path / "pristine.img"
    shutil.copyfile(image, pristine)

    # trax scrub names the file a damaged data page belongs to
    page, visible = data[len(data) // 2]
    flip_at(str(image), base + page * PAGE_SIZE + visible // 2, random.Random(0))
    r = trax("scrub", str(image), home=home, check=False)
    assert r.returncode == 4 and "UNREPAIRABLE" in r.stdout and "no good copy" in r.stdout, (r.stdout, r.stderr)
    owner = next(p for p in files if f"/{p}: byte offset" in r.stdout)
    assert (r.stdout.count("UNREPAIRABLE"), owner.startswith("d")) == (1, True)

    rng = random.Random(42)
    out, refused = Outcome(), []
    for _ in range(10 * SOAK):
        shutil.copyfile(pristine, image)
        for off in choose_flips(rng, base, data, meta, n_data=3, n_meta=1):
            flip_at(str(image), off, rng)
        try:
            m.start()
        except RuntimeError as e:  # the damage hit what mounting needs: refused, with a reason
            refused.append(str(e))
            continue
        try:
            read_all(mountpoint, files, dirs, out)
        finally:
            m.stop()
    assert not out.wrong, f"wrong bytes or names served: {out.wrong[:10]}"
    assert len(refused) <= 10 * SOAK - 3, refused  # most flips miss what the mount needs
    assert out.eio > 0 and out.right > 0, (out.right, out.eio)
    log = (tmp_path / "mount.log").read_text()
    assert "fails its checksum" in log and "internal error" not in log  # damage is named, not a bug

    # a page the filesystem cannot be opened without (the catalog), damaged: scrub says so, exit 4
    shutil.copyfile(pristine, image)
    flip_at(str(image), base + 100, rng)
    r = trax("scrub", str(image), home=home, check=False)
    assert r.returncode == 4 and "page 0" in r.stderr and "trax fsck --repair" in r.stderr, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr


def make_mirror(home: Path, tmp_path: Path) -> None:
    disks = [str(tmp_path / f"d{i}.img") for i in range(4)]
    trax("pv", "create", *disks, "--size", "40M", home=home)
    trax("vg", "create", "fvg", *disks, home=home)
    trax("lv", "create", "fvg/m", "--size", "32M", "--mirror", home=home)
    trax("mkfs", "fvg/m", home=home)


def leg_places(reg: Registry, offsets: list[int], leg: int) -> list[tuple[str, int]]:
    """Where volume offsets live on one leg: (image file, offset in it)."""
    with VolumeGroup.open(reg, "fvg") as vg:
        lv = vg.open_lv("m")
        out = []
        for off in offsets:
            (p,) = lv.legs[leg].pieces(off, 1)
            out.append((vg.meta.pv(p.pv).path, p.dev_offset))
        return out


def read_place(path: str, off: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(off)
        return f.read(1)


@pytest.mark.timeout(300)
def test_flipped_bytes_in_one_mirror_leg_always_read_right_and_are_repaired(tmp_path, mountpoint):
    home = tmp_path / "home"
    reg = Registry(home)
    make_mirror(home, tmp_path)
    m = Mount(Path("fvg/m"), home, mountpoint, tmp_path / "mount.log", ())
    m.start()
    try:
        files, dirs = write_tree(mountpoint, 2)
    finally:
        m.stop()
    with VolumeGroup.open(reg, "fvg") as vg:
        base, data, meta = targets(vg.open_lv("m"))

    # trax scrub alone: a damaged data page on leg 0 is rewritten (exit 1), then all is clean (0)
    rng = random.Random(7)
    offs = choose_flips(rng, base, data, meta, n_data=2, n_meta=1)
    for path, off in leg_places(reg, offs, 0):
        flip_at(path, off, rng)
    r = trax("scrub", "fvg/m", home=home, check=False)
    assert r.returncode == 1 and r.stdout.count("repaired:") == 3 and "2 copies each" in r.stdout, (r.stdout, r.stderr)
    r = trax("--json", "scrub", "fvg/m", home=home, check=False)
    assert r.returncode == 0 and json.loads(r.stdout)["repaired"] == [], r.stdout

    out, repaired = Outcome(), 0
    for rnd in range(5 * SOAK):
        offs = choose_flips(rng, base, data, meta, n_data=4, n_meta=2)
        places = leg_places(reg, offs, rnd % 2)  # one leg per round
        for path, off in places:
            flip_at(path, off, rng)
        m.start()  # the mount's own pages come from the good leg
        try:
            if rnd == 0:  # a mounted filesystem is not scrubbed under the mount
                r = trax("scrub", "fvg/m", home=home, check=False)
                assert r.returncode == 8 and "in use" in r.stderr, (r.stdout, r.stderr)
            read_all(mountpoint, files, dirs, out)
            status = json.loads((mountpoint / ".trax" / "data.json").read_text())
            assert status["pages_verified"] > 0 and status["unrepairable"] == 0, status
            repaired += status["repaired_from_mirror"]  # reads alternate legs: most damage is met
        finally:
            m.stop()
        r = trax("scrub", "fvg/m", home=home, check=False)
        assert r.returncode in (0, 1) and "UNREPAIRABLE" not in r.stdout, (r.stdout, r.stderr)
        other = leg_places(reg, offs, 1 - rnd % 2)
        for (p0, o0), (p1, o1) in zip(places, other, strict=True):
            assert read_place(p0, o0) == read_place(p1, o1), f"round {rnd}: {p0}@{o0} not repaired"
    assert not out.wrong and out.eio == 0, (out.wrong[:10], out.eio)
    assert repaired > 0
    assert out.right == 5 * SOAK * (len(files) + len(dirs))
    r = m.fsck()
    assert r.returncode == 0, (r.stdout, r.stderr)

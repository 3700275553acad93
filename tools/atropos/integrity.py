"""Data integrity of AtroposDB: a PAX table on a real quadrangle volume reads the same both ways.

The timing experiments drive the disk models directly; this one moves real bytes through the
whole volume stack, at small scale: four simulated disks (sparse image files with their disk
model, ``trax pv create --model``), a volume group, a quadrangle logical volume, and LINEITEM
in the PAX layout of :mod:`.pagestores`. The table is bulk-loaded column-major (one write per
minipage group of a block: a rectangle), then read back

* row-major: every page as one batch of its ``k`` VLBNs (``p·w`` apart, the semi-sequential
  diagonals) through :meth:`OpenLogicalVolume.batch`, decoded into records;
* column-major: each attribute of all pages as one contiguous read per block;

and both must equal the generated rows, and TPC-H Q1 and Q6 computed from the column reads must
equal the answers computed from the rows (what NSM would return).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ...volume.disk.geometry import SECTOR, DiskSpec
from ...volume.disk.profiles import scaled
from ...volume.group import VolumeGroup
from ...volume.logical import OpenLogicalVolume, Request
from ...volume.registry import Registry
from ...volume.scan import pv_create
from . import lineitem
from .pagestores import MINIPAGE, PAX, PER_PAGE
from .report import Check
from .single_disk import Result

MiB = 1 << 20
WIDTH = lineitem.WIDTH


def _minipage(values: list, attr: int) -> bytes:
    return b"".join(lineitem.encode(attr, v) for v in values).ljust(MINIPAGE, b"\0")


def load(olv: OpenLogicalVolume, pax: PAX, rows: list[lineitem.Row]) -> None:
    """Column-major bulk load: per block, one write per minipage group."""
    for block in range(pax.blocks):
        pages = range(block * pax.pw, min(pax.pages, (block + 1) * pax.pw))
        for m in range(pax.k):
            data = bytearray()
            for page in pages:
                recs = rows[page * PER_PAGE:(page + 1) * PER_PAGE]
                for a in range(m * pax.b, (m + 1) * pax.b):
                    data += _minipage([r.values[a] for r in recs], a)
            olv.write(pax.row(block, m) * pax.b * SECTOR, bytes(data))


def _values(raw: bytes, attr: int, count: int) -> list:
    return [lineitem.decode(attr, raw[i * WIDTH:(i + 1) * WIDTH]) for i in range(count)]


def read_rows(olv: OpenLogicalVolume, pax: PAX) -> list[tuple]:
    """Row-major: each page as one batch of its VLBNs."""
    out: list[tuple] = []
    for page in range(pax.pages):
        count = min(PER_PAGE, pax.rows - page * PER_PAGE)
        got = olv.batch([Request(e.lbn * SECTOR, e.count * SECTOR) for e in pax.fetch(page * PER_PAGE)])
        raw = b"".join(got)  # minipage groups in attribute order
        cols = [_values(raw[a * MINIPAGE:(a + 1) * MINIPAGE], a, count) for a in range(len(lineitem.ATTRIBUTES))]
        out.extend(zip(*cols, strict=True))
    return out


def read_column(olv: OpenLogicalVolume, pax: PAX, attr: int) -> list:
    """Column-major: one contiguous read per block, keeping the attribute's minipages."""
    m, slot = divmod(attr, pax.b)
    out: list = []
    for block in range(pax.blocks):
        first = block * pax.pw
        pages = min(pax.pw, pax.pages - first)
        raw = olv.read(pax.row(block, m) * pax.b * SECTOR, pages * pax.b * SECTOR)
        for i in range(pages):
            count = min(PER_PAGE, pax.rows - (first + i) * PER_PAGE)
            at = (i * pax.b + slot) * MINIPAGE
            out.extend(_values(raw[at:at + MINIPAGE], attr, count))
    return out


def integrity(spec: DiskSpec, rows: int, p: int = 4, layouts: tuple[tuple[int, int], ...] = ((4, 1), (2, 2), (4, 4), (2, 8)),
              workdir: str | None = None) -> Result:
    """``layouts``: (d, b) pairs of quadrangle volumes to check."""
    small = scaled(spec, 40, zones=1)  # outer zone only, 160 tracks: sparse images of 56 MB
    table = list(lineitem.rows(rows))
    want_rows = [tuple(lineitem.decode(a, lineitem.encode(a, v)) for a, v in enumerate(r.values))
                 for r in table]  # as stored: text cut to 8 characters
    want_cols = {a: [r[i] for r in want_rows] for i, a in enumerate(lineitem.ATTRIBUTES)}
    want = (lineitem.q1(want_cols), lineitem.q6(want_cols))
    checks: list[Check] = []
    with tempfile.TemporaryDirectory(dir=workdir, prefix="atropos-integrity-") as tmp:
        registry = Registry(Path(tmp) / "home")
        paths = [str(Path(tmp) / f"disk{k}.img") for k in range(p)]
        for path in paths:
            pv_create(registry, path, model=small)
        VolumeGroup.create(registry, "atropos", paths, extent_size=MiB)
        with VolumeGroup.open(registry, "atropos") as vg:
            for d, b in layouts:
                n = small.zones[0].sectors_per_track
                pax = PAX(rows, p, n // b, b, d)
                lv = vg.create_lv(f"pax_d{d}_b{b}", pax.sectors * SECTOR, "quadrangle", block=b, depth=d)
                olv = vg.open_lv(lv.name)
                try:
                    load(olv, pax, table)
                    by_rows = read_rows(olv, pax)
                    cols = {a: read_column(olv, pax, i) for i, a in enumerate(lineitem.ATTRIBUTES)}
                finally:
                    olv.close()
                same = by_rows == want_rows and all(cols[a] == want_cols[a] for a in want_cols)
                answers = (lineitem.q1(cols), lineitem.q6(cols)) == want
                checks.append(Check("integrity", f"{pax.name} (b={b}): row-major = column-major = generated rows",
                                    "identical", same, "", f"{rows:,} rows through a real volume", same))
                checks.append(Check("integrity", f"{pax.name} (b={b}): Q1 and Q6 from columns = from rows",
                                    "identical", answers, "", "exact (integer arithmetic)", answers))
    return Result(checks, {"rows": rows, "layouts": [list(x) for x in layouts]})

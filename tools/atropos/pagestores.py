"""LINEITEM in three page layouts: where each page, minipage and column lives on a volume.

Pure address arithmetic in volume sectors (512 B), shared by the timing runs (which drive the
disk models through the volume's mapping) and the data-integrity run (which writes and reads a
real quadrangle volume). Every layout uses 8 KB pages and the 16 equal 8-byte attributes of
:mod:`.lineitem`, so a page holds 64 records.

* **NSM** (row pages) on a traxtent volume: page ``k`` is sectors ``[16k, 16k + 16)``.
* **DSM** (one attribute per page, 1,024 values) on a traxtent volume: every attribute is its
  own region, starting on a rectangle (one track on every disk) boundary.
* **AtroposDB** (PAX) on a quadrangle volume of depth ``d``: a page's 16 minipages (512 B,
  one attribute's 64 values each) fill ``k = 16/b`` VLBNs of ``b`` sectors, every ``(p·w)``-th
  VLBN. Pages are grouped in blocks of ``p·w``: VLBN row ``m`` of a block holds minipage group
  ``m`` (attributes ``m·b .. m·b+b−1``) of all its pages, one rectangle, so a column scan reads
  whole tracks; a page is ``k/d`` semi-sequential diagonals of depth ``d`` on as many disks.

Two AtroposDB geometries are kept because the paper's text fits neither completely:

* *spread* (``k = p·d``): Figure 6 (``p = d = 4``, ``b = 1``: minipage = VLBN), a page is one
  diagonal on each of the p disks. At ``d = 2`` this needs ``b = 2`` (a VLBN holds two
  attributes), since 16 one-sector minipages over 4 disks need depth 4;
* *one-disk* (``k = d``): Figure 8's "8 KB chunk" (``b = 16/d``), a page is one diagonal on one
  disk, which is what makes the paper's record fetches "in accord with Figure 8".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .lineitem import ATTRIBUTES, RECORD, WIDTH

PAGE = 8192
PAGE_SECTORS = PAGE // 512
PER_PAGE = PAGE // RECORD  # 64 records per 8 KB page
MINIPAGE = PER_PAGE * WIDTH  # 512 B: one attribute of a page
PER_DSM_PAGE = PAGE // WIDTH  # 1,024 values
ATTRS = len(ATTRIBUTES)


@dataclass(frozen=True)
class Extent:
    lbn: int  # volume sector
    count: int  # sectors


def _pages(records: int, per_page: int) -> int:
    return -(-records // per_page)


class NSM:
    name = "NSM"

    def __init__(self, rows: int):
        self.rows = rows
        self.pages = _pages(rows, PER_PAGE)
        self.sectors = self.pages * PAGE_SECTORS

    def fetch(self, record: int) -> list[Extent]:
        return [Extent(record // PER_PAGE * PAGE_SECTORS, PAGE_SECTORS)]

    def scan(self, attrs: tuple[int, ...], records_per_step: int) -> Iterator[list[Extent]]:
        """Every page, ``records_per_step`` records' pages per step (all attributes come along)."""
        step = records_per_step // PER_PAGE * PAGE_SECTORS
        for lbn in range(0, self.sectors, step):
            yield [Extent(lbn, min(step, self.sectors - lbn))]


class DSM:
    name = "DSM"

    def __init__(self, rows: int, align: int):
        """``align``: sectors of one track; every column starts on one (on a rectangle, every
        column's page ``k`` would sit on the same disk)."""
        self.rows = rows
        self.pages = _pages(rows, PER_DSM_PAGE)
        self.region = -(-self.pages * PAGE_SECTORS // align) * align
        self.sectors = self.region * ATTRS

    def column(self, attr: int) -> int:
        return attr * self.region

    def fetch(self, record: int) -> list[Extent]:
        """One page in each of the 16 columns: 16 random accesses."""
        page = record // PER_DSM_PAGE
        return [Extent(self.column(a) + page * PAGE_SECTORS, PAGE_SECTORS) for a in range(ATTRS)]

    def scan(self, attrs: tuple[int, ...], records_per_step: int) -> Iterator[list[Extent]]:
        """The same records of every needed column per step."""
        per = max(1, records_per_step // PER_DSM_PAGE)
        for first in range(0, self.pages, per):
            n = min(per, self.pages - first)
            yield [Extent(self.column(a) + first * PAGE_SECTORS, n * PAGE_SECTORS) for a in attrs]


class PAX:
    """AtroposDB: PAX pages on a quadrangle volume of ``p`` disks and depth ``d``, ``w`` VLBNs of
    ``b`` sectors per track row."""

    def __init__(self, rows: int, p: int, w: int, b: int, d: int):
        if ATTRS % b or (ATTRS // b) % d:
            raise ValueError(f"{ATTRS} minipages do not make whole diagonals of {d} VLBNs of {b} sectors")
        self.rows, self.p, self.w, self.b, self.depth = rows, p, w, b, d
        self.k = ATTRS // b  # VLBNs per page
        self.disks = self.k // d  # diagonals (disks) per page
        self.name = f"AtroposDB d={d}" + (", one-disk page" if self.disks == 1 else "")
        self.pw = p * w
        self.pages = _pages(rows, PER_PAGE)
        self.blocks = -(-self.pages // self.pw)
        self.sectors = self.blocks * self.pw * self.k * b

    def vlbn(self, page: int, m: int) -> int:
        """VLBN holding minipage group ``m`` of ``page``."""
        block, c = divmod(page, self.pw)
        return (block * self.k + m) * self.pw + c

    def row(self, block: int, m: int) -> int:
        """First VLBN of minipage group ``m`` of every page of ``block``: a rectangle."""
        return (block * self.k + m) * self.pw

    def fetch(self, record: int) -> list[Extent]:
        """The page's ``k`` VLBNs: one batch of ``k/d`` diagonals."""
        page = record // PER_PAGE
        return [Extent(self.vlbn(page, m) * self.b, self.b) for m in range(self.k)]

    def scan(self, attrs: tuple[int, ...], records_per_step: int) -> Iterator[list[Extent]]:
        """One rectangle per needed minipage group of each block, the blocks of
        ``records_per_step`` records per step."""
        groups = sorted({a // self.b for a in attrs})
        per = max(1, records_per_step // (self.pw * PER_PAGE))
        for first in range(0, self.blocks, per):
            yield [Extent(self.row(block, m) * self.b, min(self.pw, self.pages - block * self.pw) * self.b)
                   for block in range(first, min(first + per, self.blocks)) for m in groups]

    @property
    def records_per_block(self) -> int:
        return self.pw * PER_PAGE

"""Figure 11: LINEITEM scans (TPC-H Q1, Q6) and random record fetches on NSM, DSM and AtroposDB.

Four disks; NSM and DSM on a traxtent volume, AtroposDB (PAX) on quadrangle volumes of depth
4 and 2, each in the two page geometries of :mod:`.pagestores`. A scan is a sequence of steps,
each one batch that the host pre-schedules per disk; the next step is issued when the previous
one completes. Every store reads the same records per step, :data:`STEP_BLOCKS` blocks of the
d = 4 layout (Shore's read-ahead is not in the paper; with a one-block step DSM pays a seek for
every track it reads and falls 30-50 % behind AtroposDB).

Record fetches are one at a time (an OLTP stream), at the same seeded random records in every
store, always in a table of the paper's size (scale factor 1, whatever ``scale`` the scans use):
what a fetch costs depends on how far the heads seek, i.e. on the table's footprint, not on how
much of it a run can afford to scan.

The paper's run times (NSM 5.76 s, AtroposDB 6.56 s and 8.32 s) imply a record count it does
not state. Its NSM fetch is "a random seek and rotational latency of half a revolution,
followed by an 8 KB page access", Figure 8's 5.93 ms, so 5.76 s is about 1,000 fetches (971);
the report scales the model's per-fetch times to :data:`PAPER_FETCHES` and holds the ratios,
which do not depend on the count.
"""

from __future__ import annotations

import random

from ...volume.disk.geometry import DiskSpec
from ...volume.layout.mapping import LegMap
from ...volume.layout.quadrangle import QuadLegMap
from ...volume.model import Quadrangle
from .array import DiskArray, pieces, quadrangle_map
from .lineitem import ATTRIBUTES, QUERY_ATTRIBUTES, ROWS_PER_SF
from .pagestores import DSM, NSM, PAX, Extent
from .report import Check, between, near, shown
from .single_disk import Result

PAPER_FETCHES = 1000
# Held ratios: the paper's own two measurements of this access (Figure 8: 1.16 and 1.38;
# Figure 11: 1.14 and 1.44) differ by up to 0.06, and the model's NSM fetch is 0.7 ms faster
# than the paper's (its seeks stay inside the table), which moves a ratio by up to 0.04.
TOLERANCE = 0.1
STEP_BLOCKS = 4  # read-ahead per scan step, in blocks of the d = 4 layout (702,464 records)
PAPER_FETCH_S = {"NSM": 5.76, "AtroposDB d=2": 6.56, "AtroposDB d=4": 8.32}


def _run(array: DiskArray, leg: QuadLegMap | LegMap, extents: list[Extent], at: float) -> float:
    batch = [pc for e in extents for pc in pieces(leg, e.lbn, e.count)]
    return array.run(batch, at)


def _layouts(spec: DiskSpec, rows: int, p: int) -> tuple[list[NSM | DSM | PAX], dict[str, QuadLegMap]]:
    """The stores of ``rows`` records and the volume mapping each one lives on."""
    n, h = spec.zones[0].sectors_per_track, spec.zones[0].track_skew
    paxes = [PAX(rows, p, n // b, b, d) for d, b in ((4, 1), (2, 2), (4, 4), (2, 8))]
    stores = [NSM(rows), DSM(rows, align=n), *paxes]
    tracks = max(s.sectors for s in stores) // (p * n) + 8
    trax = quadrangle_map(spec, p, Quadrangle(0, n, h, 1, 1, n), tracks)
    legs = {"NSM": trax, "DSM": trax}
    for s in paxes:
        legs[s.name] = quadrangle_map(spec, p, Quadrangle(0, n, h, s.depth, s.b, s.w), tracks)
    return stores, legs


def scan_ms(spec: DiskSpec, rows: int, attrs: tuple[int, ...], p: int = 4) -> dict[str, float]:
    """Simulated ms of a scan of attributes ``attrs`` of ``rows`` records in every store (NSM,
    DSM, each AtroposDB geometry), each on ``p`` fresh disks (``bench_table_quad``'s baselines)."""
    stores, legs = _layouts(spec, rows, p)
    paxes = [s for s in stores if isinstance(s, PAX)]
    step = STEP_BLOCKS * paxes[0].records_per_block
    array = DiskArray(spec, p)
    out = {}
    for s in stores:
        array.reset()
        t = 0.0
        for extents in s.scan(attrs, step):
            t = _run(array, legs[s.name], extents, t)
        out[s.name] = t
    return out


def fig11(spec: DiskSpec, scale: float, fetches: int, p: int = 4, seed: int = 11) -> Result:
    rows = round(ROWS_PER_SF * scale)
    scans: dict[str, dict[str, float]] = {}
    for q, names in QUERY_ATTRIBUTES.items():
        attrs = tuple(ATTRIBUTES.index(a) for a in names)
        scans[q] = {k: v / 1000 for k, v in scan_ms(spec, rows, attrs, p).items()}
    rng = random.Random(seed)
    fetch_stores, fetch_legs = _layouts(spec, ROWS_PER_SF, p)  # the paper's table, whatever the scale
    records = [rng.randrange(ROWS_PER_SF) for _ in range(fetches)]
    fetch: dict[str, float] = {}
    array = DiskArray(spec, p)
    for s in fetch_stores:
        array.reset()
        t = 0.0
        for r in records:
            t = _run(array, fetch_legs[s.name], s.fetch(r), t)
        fetch[s.name] = t / fetches  # ms per record
    nsm = fetch["NSM"]
    per_1000 = {k: v * PAPER_FETCHES / 1000 for k, v in fetch.items()}  # seconds for 1,000 fetches
    checks: list[Check] = []
    for q, lo in (("Q1", 1.5), ("Q6", 3.0)):
        t = scans[q]
        checks += [
            between("fig11", f"{q} scan: DSM / AtroposDB d=4", "≈ 1 (comparable)", t["DSM"] / t["AtroposDB d=4"],
                    "x", 0.8, 1.25),
            between("fig11", f"{q} scan: NSM / AtroposDB d=4", "NSM worse; up to 4x", t["NSM"] / t["AtroposDB d=4"],
                    "x", lo, 4.5),
            shown("fig11", f"{q} scan: NSM / DSM / AtroposDB d=4 (s)", None, t["NSM"], "s",
                  f"DSM {t['DSM']:.3f} s, AtroposDB {t['AtroposDB d=4']:.3f} s; {rows:,} rows"),
        ]
    for d in (2, 4):
        one, spread = fetch[f"AtroposDB d={d}, one-disk page"], fetch[f"AtroposDB d={d}"]
        paper = PAPER_FETCH_S[f"AtroposDB d={d}"]
        checks += [
            near("fig11", f"record fetch: AtroposDB d={d} / NSM (one-disk page)", paper / PAPER_FETCH_S["NSM"],
                 one / nsm, "x", TOLERANCE),
            shown("fig11", f"record fetch: AtroposDB d={d} / NSM (page spread over {p} disks)",
                  paper / PAPER_FETCH_S["NSM"], spread / nsm, "x", "not held: the slowest of 4 disks' latencies"),
            shown("fig11", f"record fetch: AtroposDB d={d}, one-disk page, x1,000", paper,
                  one * PAPER_FETCHES / 1000, "s", "not held: the record count is reconstructed"),
        ]
    checks += [
        shown("fig11", "record fetch: NSM, x1,000", PAPER_FETCH_S["NSM"], per_1000["NSM"], "s",
              "not held: the record count is reconstructed"),
        shown("fig11", "records for the paper's NSM 5.76 s at the model's NSM fetch", "~1,000 (5.76 s / 5.93 ms)",
              round(PAPER_FETCH_S["NSM"] * 1000 / nsm), "", "reconstruction"),
        shown("fig11", "record fetch: DSM (16 random accesses) / NSM", None, fetch["DSM"] / nsm, "x",
              "model estimate only"),
    ]
    return Result(checks, {"rows": rows, "scale": scale, "fetches": fetches, "scan_s": scans,
                           "fetch_ms": fetch, "fetch_s_per_1000": per_1000, "p": p})

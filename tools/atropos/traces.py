"""Synthesised TPC-H-like block traces and the paper's stripe-unit transformation (Figure 10).

The paper replayed block traces of IBM DB2 v7.2 running the 22 TPC-H queries one at a time on
8 KB NSM pages. Those traces are not public, so :func:`query_trace` synthesises one per query
from what a DB2 plan does with the TPC-H tables: sequential scans of whole tables, issued as
DB2 prefetch requests of one 32-page extent (256 KB), interleaved with index-driven random reads
of single 8 KB pages (an index leaf, then the data page it points to).

How much of a query is random is the one per-query property the paper states: "less than 1%
for query 1 vs. 93% and 99% for queries 14 and 17". Those three are used as given; the other 19
queries get assumed shares, guided by their usual plans (:data:`QUERIES`, marked as assumed in
the report). The share is of I/O requests after the transformation at the track-sized stripe
unit; :func:`random_share` measures what a transformed trace really holds.

The transformation (:func:`transform`) is the paper's: back-to-back sequential accesses to the
same table or index are merged into one large I/O, which is then split at the stripe-unit size.
Cuts are placed on stripe-unit boundaries of the volume, so no I/O crosses a unit (and a disk);
a run's own ends stay where its first and last pages are. With 64 KB and 256 KB units every cut
also falls between 8 KB pages; with the 343 KB track a cut may pass through a page, whose two
halves are then read by neighbouring I/Os (at block level that is the same data).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

PAGE = 16  # sectors in an 8 KB page
EXTENT = 32 * PAGE  # a DB2 extent: the sequential prefetch request, 256 KB
MB = 2048  # sectors per MB (2^20 bytes)

# Objects at scale factor 1 (MB): the eight TPC-H tables as 8 KB NSM pages, and an index per
# table that random lookups go through (about 5% of its table, at least one extent).
TABLE_MB = {"lineitem": 760, "orders": 172, "partsupp": 118, "part": 26, "customer": 25,
            "supplier": 1.5, "nation": 0.01, "region": 0.01}


@dataclass(frozen=True)
class Query:
    scans: tuple[str, ...]  # tables read sequentially, in plan order
    lookups: str  # table whose index and data pages the random reads go to
    random_share: float  # share of the transformed trace's I/Os that are random page reads
    source: str  # "paper" or "assumed"


QUERIES: dict[str, Query] = {
    "Q1": Query(("lineitem",), "lineitem", 0.002, "paper"),
    "Q2": Query(("part", "supplier", "nation", "region"), "partsupp", 0.60, "assumed"),
    "Q3": Query(("customer", "orders", "lineitem"), "lineitem", 0.05, "assumed"),
    "Q4": Query(("orders",), "lineitem", 0.40, "assumed"),
    "Q5": Query(("customer", "orders", "lineitem", "supplier", "nation", "region"), "orders", 0.05, "assumed"),
    "Q6": Query(("lineitem",), "lineitem", 0.002, "assumed"),
    "Q7": Query(("supplier", "lineitem", "orders", "customer", "nation"), "orders", 0.10, "assumed"),
    "Q8": Query(("part", "supplier", "lineitem", "customer", "nation", "region"), "orders", 0.45, "assumed"),
    "Q9": Query(("part", "supplier", "lineitem", "partsupp", "orders", "nation"), "partsupp", 0.15, "assumed"),
    "Q10": Query(("customer", "orders", "lineitem", "nation"), "lineitem", 0.10, "assumed"),
    "Q11": Query(("partsupp", "supplier", "nation"), "partsupp", 0.02, "assumed"),
    "Q12": Query(("orders", "lineitem"), "orders", 0.02, "assumed"),
    "Q13": Query(("customer", "orders"), "orders", 0.01, "assumed"),
    "Q14": Query(("part",), "lineitem", 0.93, "paper"),
    "Q15": Query(("lineitem", "supplier"), "supplier", 0.01, "assumed"),
    "Q16": Query(("partsupp", "part", "supplier"), "supplier", 0.05, "assumed"),
    "Q17": Query(("part",), "lineitem", 0.99, "paper"),
    "Q18": Query(("customer", "orders", "lineitem"), "lineitem", 0.03, "assumed"),
    "Q19": Query(("part",), "lineitem", 0.85, "assumed"),
    "Q20": Query(("supplier", "nation", "part"), "partsupp", 0.75, "assumed"),
    "Q21": Query(("supplier", "lineitem", "orders", "nation"), "lineitem", 0.30, "assumed"),
    "Q22": Query(("customer", "orders"), "orders", 0.03, "assumed"),
}


@dataclass(frozen=True)
class Obj:
    name: str
    start: int  # first volume LBN
    sectors: int


@dataclass(frozen=True)
class IO:
    obj: str
    lbn: int  # volume LBN
    count: int  # sectors
    random: bool  # an index-driven page read (not part of a scan)


def catalog(scale: float) -> dict[str, Obj]:
    """Every table and index laid out one after another from volume LBN 0, each starting on a
    DB2 extent (256 KB) boundary, as a tablespace would allocate them."""
    objs: dict[str, Obj] = {}
    pos = 0
    for name, mb in TABLE_MB.items():
        for obj, size in ((name, mb), (f"{name}_idx", mb * 0.05)):
            pages = max(1, round(size * scale * MB / PAGE))
            objs[obj] = Obj(obj, pos, pages * PAGE)
            pos += -(-pages * PAGE // EXTENT) * EXTENT
    return objs


def _scan(obj: Obj) -> list[IO]:
    return [IO(obj.name, obj.start + off, min(EXTENT, obj.sectors - off), False)
            for off in range(0, obj.sectors, EXTENT)]


def _page(rng: random.Random, obj: Obj) -> IO:
    return IO(obj.name, obj.start + rng.randrange(obj.sectors // PAGE) * PAGE, PAGE, True)


def query_trace(name: str, scale: float, seed: int = 1, unit: int = 686) -> list[IO]:
    """The DB2-style trace of one query: its scans in plan order, with random index and data
    page reads interleaved at random points. There are as many random reads as make them
    ``random_share`` of the I/Os once the scans are cut into ``unit``-sector pieces."""
    q, objs = QUERIES[name], catalog(scale)
    rng = random.Random(f"{seed}/{name}")
    seq = [io for t in q.scans for io in _scan(objs[t])]
    pieces = sum(-(-objs[t].sectors // unit) for t in q.scans)
    n_random = round(q.random_share / (1 - q.random_share) * pieces)
    index, table = objs[f"{q.lookups}_idx"], objs[q.lookups]
    randoms = [_page(rng, index if k % 2 == 0 else table) for k in range(n_random)]
    slots = sorted(rng.randrange(len(seq) + 1) for _ in randoms)  # where each random read goes
    out: list[IO] = []
    nxt = 0
    for pos, io in enumerate(seq):
        while nxt < len(slots) and slots[nxt] == pos:
            out.append(randoms[nxt])
            nxt += 1
        out.append(io)
    out.extend(randoms[nxt:])
    return out


def merge(trace: list[IO]) -> list[IO]:
    """Back-to-back sequential accesses to the same object become one I/O."""
    out: list[IO] = []
    for io in trace:
        last = out[-1] if out else None
        if last is not None and last.obj == io.obj and last.lbn + last.count == io.lbn:
            out[-1] = IO(io.obj, last.lbn, last.count + io.count, last.random and io.random)
        else:
            out.append(io)
    return out


def split(io: IO, unit: int) -> list[IO]:
    """``io`` cut at every stripe-unit boundary it crosses."""
    out: list[IO] = []
    pos, end = io.lbn, io.lbn + io.count
    while pos < end:
        cut = min(end, (pos // unit + 1) * unit)
        out.append(IO(io.obj, pos, cut - pos, io.random))
        pos = cut
    return out


def transform(trace: list[IO], unit: int) -> list[IO]:
    """The paper's trace transformation for a stripe unit of ``unit`` sectors."""
    return [piece for io in merge(trace) for piece in split(io, unit)]


def random_share(trace: list[IO], unit: int) -> float:
    """Share of a transformed trace's I/Os that are "not sequential or stripe-unit sized"."""
    return sum(1 for io in trace if io.random or io.count < unit) / max(1, len(trace))

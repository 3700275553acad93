"""A TPC-H ``dbgen``-like LINEITEM generator, scaled down, with 16 equal-width attributes.

The paper's Shore experiment (Figure 11) stores LINEITEM, whose 16 attributes it treats as equal
in size (Figure 6: one minipage per attribute, each one VLBN). To keep that property every value
is encoded in :data:`WIDTH` = 8 bytes: integers and money (in cents) as little-endian int64, dates
as days since 1970 (int64), flags and short strings as 8 ASCII bytes (padded with spaces, so
``SHIPINSTRUCT`` and ``COMMENT`` are cut to 8 characters). A record is then 128 bytes, 64 to an
8 KB page, and 6,001,215 rows (scale factor 1) fill 93,770 pages = 768 MB, the paper's "about
700 MB".

Value rules follow the TPC-H specification (clause 4.2.3): order dates uniform over
1992-01-01 .. 1998-08-02, 1-7 lines per order, ship date = order date + 1..121 days, commit date
+30..90, receipt date = ship date + 1..30, return flag R/A when received by 1995-06-17 else N,
line status F when shipped by then else O, extended price = quantity x the part's retail price.
Values come from one seeded generator, so a (scale, seed) pair always gives the same table.
"""

from __future__ import annotations

import datetime as _dt
import random
import struct
from collections.abc import Iterator
from dataclasses import dataclass

ATTRIBUTES = (
    "l_orderkey", "l_partkey", "l_suppkey", "l_linenumber", "l_quantity", "l_extendedprice",
    "l_discount", "l_tax", "l_returnflag", "l_linestatus", "l_shipdate", "l_commitdate",
    "l_receiptdate", "l_shipinstruct", "l_shipmode", "l_comment",
)
WIDTH = 8  # bytes per encoded value
RECORD = WIDTH * len(ATTRIBUTES)  # 128 bytes
ROWS_PER_SF = 6_001_215  # LINEITEM cardinality at scale factor 1
_TEXT = {"l_returnflag", "l_linestatus", "l_shipinstruct", "l_shipmode", "l_comment"}

# Columns each query reads. Q1 reads seven (six aggregated or grouped, plus the ship-date
# predicate); the paper counts "six". Q6 reads four, as the paper says.
QUERY_ATTRIBUTES = {
    "Q1": ("l_returnflag", "l_linestatus", "l_quantity", "l_extendedprice", "l_discount", "l_tax",
           "l_shipdate"),
    "Q6": ("l_shipdate", "l_discount", "l_quantity", "l_extendedprice"),
}

_EPOCH = _dt.date(1970, 1, 1)
_START = (_dt.date(1992, 1, 1) - _EPOCH).days
_END_ORDER = (_dt.date(1998, 8, 2) - _EPOCH).days
_CURRENT = (_dt.date(1995, 6, 17) - _EPOCH).days
_INSTRUCT = ("DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN")
_MODES = ("REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB")
_WORDS = ("furiously", "carefully", "quickly", "blithely", "slyly", "final", "ironic", "bold",
          "pending", "regular", "express", "special", "deposits", "requests", "accounts")


@dataclass(frozen=True)
class Row:
    values: tuple  # ints for numbers, money in cents and dates in days; str for text


def day(text: str) -> int:
    """Days since 1970 of an ISO date, the encoding of the date columns."""
    return (_dt.date.fromisoformat(text) - _EPOCH).days


def rows(count: int, seed: int = 1) -> Iterator[Row]:
    """The first ``count`` LINEITEM rows of a table of ``count`` rows."""
    rng = random.Random(seed)
    parts = max(1, count // 30)  # 200,000 parts per 6M lines at scale factor 1
    sups = max(4, parts // 20)  # 10,000 suppliers
    orderkey, made = 0, 0
    while made < count:
        orderkey += 25 if orderkey % 32 == 8 else 1  # dbgen's sparse keys: 1-8, 33-40, ...
        orderdate = rng.randint(_START, _END_ORDER)
        for line in range(1, rng.randint(1, 7) + 1):
            if made == count:
                return
            partkey = rng.randint(1, parts)
            suppkey = (partkey + rng.randrange(4) * (sups // 4 + (partkey - 1) // sups)) % sups + 1
            quantity = rng.randint(1, 50)
            retail = 90000 + (partkey // 10) % 20001 + 100 * (partkey % 1000)  # cents
            ship = orderdate + rng.randint(1, 121)
            receipt = ship + rng.randint(1, 30)
            flag = ("R" if rng.random() < 0.5 else "A") if receipt <= _CURRENT else "N"
            yield Row((
                orderkey, partkey, suppkey, line, quantity, quantity * retail,
                rng.randint(0, 10), rng.randint(0, 8), flag, "F" if ship <= _CURRENT else "O",
                ship, orderdate + rng.randint(30, 90), receipt, rng.choice(_INSTRUCT),
                rng.choice(_MODES), rng.choice(_WORDS),
            ))
            made += 1


def encode(attr: int, value: int | str) -> bytes:
    """One value in its 8-byte slot."""
    if ATTRIBUTES[attr] in _TEXT:
        return str(value).encode("ascii")[:WIDTH].ljust(WIDTH)
    return struct.pack("<q", value)


def decode(attr: int, raw: bytes) -> int | str:
    if ATTRIBUTES[attr] in _TEXT:
        return raw.decode("ascii").rstrip()
    return struct.unpack("<q", raw)[0]


def q1(cols: dict[str, list]) -> dict[tuple[str, str], tuple[int, ...]]:
    """TPC-H Q1 (delta = 90 days) over decoded columns: per (return flag, line status) the sum of
    quantity, base price, discounted price (x100) and charge (x10^4), and the count. Integer
    arithmetic, so answers computed from different layouts compare exactly."""
    cut = day("1998-12-01") - 90
    out: dict[tuple[str, str], list[int]] = {}
    for flag, status, qty, price, disc, tax, ship in zip(*(cols[a] for a in QUERY_ATTRIBUTES["Q1"]), strict=True):
        if ship <= cut:
            acc = out.setdefault((flag, status), [0, 0, 0, 0, 0])
            net = price * (100 - disc)
            for i, v in enumerate((qty, price, net, net * (100 + tax), 1)):
                acc[i] += v
    return {k: tuple(v) for k, v in sorted(out.items())}


def q6(cols: dict[str, list]) -> int:
    """TPC-H Q6: revenue (x100) of 1994 lines with discount 0.05-0.07 and quantity < 24."""
    lo, hi = day("1994-01-01"), day("1995-01-01")
    return sum(price * disc for ship, disc, qty, price in zip(*(cols[a] for a in QUERY_ATTRIBUTES["Q6"]), strict=True)
               if lo <= ship < hi and 5 <= disc <= 7 and qty < 24)

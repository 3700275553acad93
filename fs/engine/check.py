"""fsck for the page engine: every allocated page, then every named structure.

``check_engine(engine)`` returns a list of problems (empty: healthy). Run it on a quiescent
engine (no transaction changing pages meanwhile): it first writes back the buffer so the device
holds the current pages, then

1. reads the allocation maps **raw from the device** and, for every page they mark allocated,
   reads it raw and verifies it (unless the caller lists it in ``data_pages``: file bytes may
   begin with anything, the page magic included): checksum, magic/version, the page's own number (misdirected
   writes), and that its type is a known :class:`PageType`. An allocated page that carries no
   page magic at all (all zeros, or bytes without the ``TX`` magic) is taken to be *raw data* —
   large objects (file data) are written to allocated regions without page headers
   (``engine.raw``) — and is a problem only if a structure claims it;
2. walks the catalog (page 0). **Naming convention:** a root named ``KIND:NAME`` holds the
   header page of a structure of that kind — ``btree:``, ``hash:`` (linear hash), ``array:``
   (array list), ``list:`` (linked list); value 0 means "dropped". Each kind's checker (registered
   by its module with :func:`register_checker`) verifies the structure and reports the pages it
   owns. Roots of kinds nobody registered are listed in ``unchecked`` but are not problems
   (other layers keep their own roots). The structures register their checkers when their
   modules are imported: a caller that wants them checked imports them first;
3. cross-checks: every page a structure owns must be allocated, verified and owned once; with
   ``leaks=True``, allocated pages that carry a page header but belong to no structure (nor to
   the engine: catalog, maps, nor to ``extra_pages``) are reported as leaked. Leaks are off by
   default: structures built by a transaction that aborted leave their pages allocated (see
   ``traxfs.fs.struct``), and a caller may own pages this checker does not know about.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection, Iterable

from . import slotted
from .alloc import set_bits
from .page import PAGE_MAGIC, PAGE_SIZE, PageCorrupt, PageType, verify

# kind -> fn(engine, header_pid, pages_out: set) -> list of problems
Checker = Callable[[object, int, set], list[str]]
CHECKERS: dict[str, Checker] = {}
_MAP_HEADER = 32
_CHUNK = 64  # pages per raw read


def register_checker(kind: str, fn: Checker) -> None:
    """Check the structures whose catalog roots are named ``kind:...`` with ``fn``."""
    CHECKERS[kind] = fn


def allocated_pages(engine) -> tuple[list[int], list[tuple[int, str]]]:
    """Allocated pages, ascending, read raw from the maps on the device (the buffer written
    back first); and (map page, damage) for every map that could not be read (its pages are
    missing from the list)."""
    engine.write_back()
    probs, out = [], []
    bits = (PAGE_SIZE - _MAP_HEADER) * 8
    for m in range(engine.nmaps):
        pid = engine.map_page(m)
        raw = engine.raw.read(pid * PAGE_SIZE, PAGE_SIZE)
        try:
            verify(raw, pid, engine.page_seed, "allocation map ")
        except PageCorrupt as ex:
            probs.append((pid, str(ex)))
            continue
        if raw[3] != PageType.ALLOC_MAP:
            probs.append((pid, f"allocation map page {pid}: type {raw[3]}"))
            continue
        out += set_bits(raw[_MAP_HEADER:], m * bits, min(bits, engine.page_count - m * bits))
    return out, probs


def page_runs(pids: list[int]) -> Iterable[tuple[int, int]]:
    """Consecutive runs (first, count) of sorted page numbers, at most _CHUNK long."""
    i = 0
    while i < len(pids):
        j = i + 1
        while j < len(pids) and pids[j] == pids[j - 1] + 1 and j - i < _CHUNK:
            j += 1
        yield pids[i], j - i
        i = j


def catalog(engine) -> list[tuple[str, int]]:
    """(name, value) of every root in the catalog."""
    out = []
    with engine.page(0) as f:
        for rec in slotted.records(f.data):
            name, _, rest = rec.partition(b"\0")
            if len(rest) == 8:
                out.append((name.decode(errors="replace"), struct.unpack("<Q", rest)[0]))
    return out


def check_engine(engine, *, leaks: bool = False, extra_pages: Iterable[int] = (),
                 unchecked: list[str] | None = None, data_pages: set[int] | frozenset = frozenset(),
                 reported: Collection[int] = (), skip_roots: Collection[str] = ()) -> list[str]:
    """``reported``: damaged pages the caller has reported already (not repeated here);
    ``skip_roots``: catalog names whose structures the caller knows to be damaged."""
    probs: list[str] = []
    allocated, map_probs = allocated_pages(engine)
    probs += [text for pid, text in map_probs if pid not in reported]
    good: set[int] = set()  # allocated pages that verified as pages
    raw_data: set[int] = set()  # allocated, no page magic: raw extents (or never formatted)
    for first, count in page_runs(allocated):
        blob = engine.raw.read(first * PAGE_SIZE, count * PAGE_SIZE)
        for k in range(count):
            pid = first + k
            raw = blob[k * PAGE_SIZE : (k + 1) * PAGE_SIZE]
            if pid in data_pages or struct.unpack_from("<H", raw)[0] != PAGE_MAGIC:
                raw_data.add(pid)
                continue
            try:
                verify(raw, pid, engine.page_seed)
            except PageCorrupt as ex:
                if pid not in reported:
                    probs.append(str(ex))
                continue
            try:
                PageType(raw[3])
            except ValueError:
                probs.append(f"page {pid}: unknown page type {raw[3]}")
                continue
            good.add(pid)
    for pid in engine.engine_pages():
        if pid not in good and pid not in reported:
            probs.append(f"engine page {pid} (catalog/map) is not allocated or not a valid page")
    owners: dict[int, str] = {}
    for name, value in catalog(engine):
        kind = name.partition(":")[0]
        checker = CHECKERS.get(kind)
        if checker is None or ":" not in name:
            if unchecked is not None:
                unchecked.append(name)
            continue
        if value == 0 or name in skip_roots:
            continue
        pages: set[int] = set()
        try:
            sub = checker(engine, value, pages)
        except Exception as ex:  # a checker must not crash fsck: report and go on
            sub = [f"checker failed: {type(ex).__name__}: {ex}"]
        probs += [f"{name}: {p}" for p in sub]
        for pid in sorted(pages):
            if pid in owners:
                probs.append(f"{name}: page {pid} also belongs to {owners[pid]}")
            owners[pid] = name
            if pid not in good:
                why = "raw data / unformatted" if pid in raw_data else "not allocated or damaged"
                probs.append(f"{name}: page {pid} is {why}")
    if leaks:
        known = set(owners) | set(extra_pages) | set(engine.engine_pages())
        leaked = sorted(good - known)
        if leaked:
            probs.append(f"{len(leaked)} allocated page(s) belong to no structure: {leaked[:20]}")
    return probs

"""Reading what survives of a damaged B+tree (fsck's salvage pass).

A page that fails verification (checksum, identity, or the wrong type where a tree node should
be) ends the ordinary reads of the tree with an exception. :func:`salvage` instead walks the
tree around the damage and returns every entry it can still read, in key order:

* from the header's root, an in-order walk of the inner nodes; a node that cannot be read
  leaves a *gap* (the key range its parent gave it), and the walk goes on beside it;
* a gap under a damaged *inner* node is usually recovered whole through the leaf chain: the
  readable leaf just left of the gap links to the first leaf inside it, and so on, until the
  chain reaches the first leaf after the gap. Only a damaged *leaf* loses entries (the chain
  breaks at it, and its parent no longer helps), as does a gap with no readable leaf on its
  left;
* every stretch that could not be read is reported as a key range between the surviving
  entries around it, so the caller can say what was lost.

B+tree pages do not record which tree they belong to. When a tree's root or header is damaged
(everything below is unreachable), its leaves can still be found among the allocated leaf
pages that no tree reaches: :func:`leaf_chains` strings them together along their right links,
and the caller attributes a chain to a tree when only that tree can have lost it (the chain
ends where the tree's surviving leaves begin, or at the end).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine import slotted
from ..engine.page import HEADER_SIZE, PageCorrupt, PageType
from .btree_node import HDR, LEAF, MAGIC, VERSIONS_READ, rec_key
from .common import U16, U64, aux_of, pinned


@dataclass
class Salvage:
    """What a damaged (or healthy) tree still holds."""

    entries: list[tuple[bytes, bytes]] = field(default_factory=list)  # readable entries, key order
    pages: set[int] = field(default_factory=set)  # pages read whole: the header and every node
    damaged: list[tuple[int, str]] = field(default_factory=list)  # (page, what is wrong with it)
    lost: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)  # (after, before) keys
    first_leaf: int = 0  # the first leaf read in key order (0: none)
    recovered: int = 0  # entries found outside the tree's reach (fsck's adopt_lost_leaves)

    @property
    def healthy(self) -> bool:
        return not self.damaged


class _Unreadable(Exception):
    pass


def _read(engine, pid: int) -> bytes:
    if not 0 < pid < engine.page_count:
        raise _Unreadable(f"page {pid} is outside the page file")
    try:
        with pinned(engine, pid) as f:
            return bytes(f.data)
    except PageCorrupt as e:
        raise _Unreadable(str(e)) from None


def _leaf_entries(buf: bytes) -> list[tuple[bytes, bytes]]:
    out = []
    for r in slotted.records(buf):
        (kl,) = U16.unpack_from(r)
        if kl > len(r) - 2:
            raise _Unreadable("malformed leaf record")
        out.append((r[2 : 2 + kl], r[2 + kl :]))
    return out


def _node(engine, pid: int, leaf_expected: bool | None = None):
    """(is_leaf, entries or children) of a tree node, or _Unreadable naming the damage."""
    buf = _read(engine, pid)
    ptype = buf[3]
    if ptype not in (LEAF, PageType.BTREE_INNER) or (leaf_expected is not None and (ptype == LEAF) != leaf_expected):
        raise _Unreadable(f"page {pid}: type {ptype}, not a B+tree {'leaf' if leaf_expected else 'node'} "
                          "(overwritten or never written)")
    try:
        if ptype == LEAF:
            return True, _leaf_entries(buf), aux_of(buf)
        recs = slotted.records(buf)
        if not recs or any(len(r) < 8 for r in recs):
            raise _Unreadable(f"page {pid}: malformed inner node")
        return False, [(U64.unpack_from(r)[0], rec_key(r, False)) for r in recs], 0
    except _Unreadable:
        raise
    except Exception as e:  # a slot directory pointing outside the page
        raise _Unreadable(f"page {pid}: unreadable slots ({e})") from None


def salvage(engine, header: int) -> Salvage:
    s = Salvage()
    try:
        buf = _read(engine, header)
        magic, version, _pad, root, _count = HDR.unpack_from(buf, HEADER_SIZE)
        if buf[3] != PageType.BTREE_HEADER or magic != MAGIC or version not in VERSIONS_READ:
            raise _Unreadable(f"page {header}: not a B+tree header (type {buf[3]}, magic {magic!r})")
    except _Unreadable as e:
        s.damaged.append((header, str(e)))
        s.lost.append((None, None))
        return s
    s.pages.add(header)
    # in-order walk: ("leaf", pid, entries, right link) and ("gap", lo, hi) for unreadable subtrees
    order: list[tuple] = []
    stack: list[tuple[int, bytes | None, bytes | None]] = [(root, None, None)]
    while stack:
        pid, lo, hi = stack.pop()
        if pid in s.pages:
            s.damaged.append((pid, f"page {pid}: reached twice (a loop in the tree)"))
            continue
        try:
            is_leaf, content, link = _node(engine, pid)
        except _Unreadable as e:
            s.damaged.append((pid, str(e)))
            order.append(("gap", lo, hi))
            continue
        s.pages.add(pid)
        if is_leaf:
            order.append(("leaf", pid, [(k, v) for k, v in content if (lo is None or k >= lo) and
                                        (hi is None or k < hi)], link))
            continue
        children = []
        for i, (child, _) in enumerate(content):
            c_lo = lo if i == 0 else content[i][1]
            c_hi = hi if i == len(content) - 1 else content[i + 1][1]
            children.append((child, c_lo, c_hi))
        stack.extend(reversed(children))
    _fill_gaps(engine, s, order)
    s.first_leaf = next((item[1] for item in order if item[0] == "leaf"), 0)
    prev_key: bytes | None = None
    lost_here = False
    for item in order:
        if item[0] != "leaf":
            lost_here = True
            continue
        for k, v in item[2]:
            if prev_key is not None and k <= prev_key:
                continue  # out of order: a stale copy; what came first stays
            if lost_here:
                s.lost.append((prev_key, k))
                lost_here = False
            s.entries.append((k, v))
            prev_key = k
    if lost_here:
        s.lost.append((prev_key, None))
    return s


def _fill_gaps(engine, s: Salvage, order: list[tuple]) -> None:
    """Replace each gap by the leaves the chain reaches from the readable leaf on its left,
    up to the next leaf the walk knows; what the chain cannot reach stays a gap."""
    i = 0
    while i < len(order):
        if order[i][0] != "gap":
            i += 1
            continue
        _, lo, hi = order[i]
        left = next((order[j] for j in range(i - 1, -1, -1) if order[j][0] == "leaf"), None)
        stop = next((order[j][1] for j in range(i + 1, len(order)) if order[j][0] == "leaf"), 0)
        found: list[tuple] = []
        pid = left[3] if left is not None else 0
        complete = left is not None
        while pid and pid != stop:
            if pid in s.pages or any(pid == d for d, _ in s.damaged):
                complete = False
                break
            try:
                _, entries, link = _node(engine, pid, leaf_expected=True)
            except _Unreadable as e:
                s.damaged.append((pid, str(e)))
                complete = False
                break
            s.pages.add(pid)
            found.append(("leaf", pid, [(k, v) for k, v in entries if (lo is None or k >= lo) and
                                        (hi is None or k < hi)], link))
            pid = link
        if complete and pid != stop:
            complete = False
        order[i : i + 1] = found + ([] if complete else [("gap", lo, hi)])
        i += len(found) + (0 if complete else 1)


@dataclass
class Chain:
    """Leaves linked one to the next, found outside every tree's reach."""

    pages: list[int]
    entries: list[tuple[bytes, bytes]]
    link: int  # where the last leaf points: a leaf inside some tree, or 0 (the end)


def leaf_chains(engine, candidates) -> list[Chain]:
    """The readable leaves among ``candidates`` (pages no tree reaches), strung into chains:
    each from a leaf no other candidate links to, along the right links while they stay among
    the candidates."""
    leaves: dict[int, tuple[list, int]] = {}
    for pid in candidates:
        try:
            _, entries, link = _node(engine, pid, leaf_expected=True)
        except _Unreadable:
            continue
        leaves[pid] = (entries, link)
    linked = {link for _, link in leaves.values()}
    out = []
    for head in sorted(p for p in leaves if p not in linked):
        pages: list[int] = []
        entries: list[tuple[bytes, bytes]] = []
        pid = head
        while pid in leaves and pid not in pages:
            pages.append(pid)
            entries += leaves[pid][0]
            pid = leaves[pid][1]
        out.append(Chain(pages, entries, pid))
    return out

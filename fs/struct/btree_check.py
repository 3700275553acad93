"""Verifying a B+tree (``BTree.check``, and ``check_engine`` through the registered checker):
header, page types, levels, key order and record format per node, separators bounding their
subtrees, the leaf chain, the entry count, and that every page is allocated.
"""

from __future__ import annotations

from ..engine import slotted
from ..engine.page import HEADER_SIZE, PageType
from .btree_node import HDR, INNER, LEAF, MAGIC, MAX_ENTRY, MAX_KEY, VERSIONS_READ, rec_key
from .common import U16, U64, aux_of, nslots, pinned


def check_tree(tree, pages: set | None = None) -> list[str]:
    """Verify the whole tree; return problems (empty: healthy). ``pages`` collects every page
    the tree owns. Checks: header; page types; levels (all leaves at one depth, inner aux =
    level); per-node key order and record format; separators bound their subtrees; the
    leaf chain visits exactly the leaves in key order; the entry count (version 1 headers);
    pages allocated."""
    probs: list[str] = []
    own = pages if pages is not None else set()
    name = f"btree {tree.header}"
    with tree.latch:
        with pinned(tree.e, tree.header) as f:
            magic, version, _pad, root, count = HDR.unpack_from(f.data, HEADER_SIZE)
            htype = f.data[3]
        own.add(tree.header)
        if htype != PageType.BTREE_HEADER or magic != MAGIC or version not in VERSIONS_READ:
            return [f"{name}: header page type {htype}, magic {magic!r}, version {version}"]
        leaves: list[int] = []
        total = 0
        with pinned(tree.e, root) as f:
            root_level = aux_of(f.data) if f.data[3] == INNER else 0
        # (pid, lo, hi, level expected, is_root)
        stack = [(root, None, None, root_level, True)]
        while stack:
            pid, lo, hi, level, is_root = stack.pop()
            where = f"{name} page {pid}"
            if pid in own:
                probs.append(f"{where}: reached twice")
                continue
            own.add(pid)
            if not tree.e.is_allocated(pid):
                probs.append(f"{where}: in the tree but not allocated")
            with pinned(tree.e, pid) as f:
                buf = bytes(f.data)
            ptype, n = buf[3], nslots(buf)
            try:
                recs = slotted.records(buf)
            except Exception as ex:  # a damaged directory
                probs.append(f"{where}: unreadable slots ({ex})")
                continue
            if level == 0:
                if ptype != LEAF:
                    probs.append(f"{where}: type {ptype} at leaf level")
                    continue
                if n == 0 and not is_root:
                    probs.append(f"{where}: empty leaf (only the root may be empty)")
                prev = None
                for i, r in enumerate(recs):
                    if len(r) < 2 or U16.unpack_from(r)[0] > len(r) - 2:
                        probs.append(f"{where} slot {i}: malformed record")
                        continue
                    k = rec_key(r, True)
                    if len(k) > MAX_KEY or len(r) - 2 > MAX_ENTRY:
                        probs.append(f"{where} slot {i}: entry over the size limits")
                    if prev is not None and k <= prev:
                        probs.append(f"{where} slot {i}: key {k!r} not above {prev!r}")
                    if lo is not None and k < lo or hi is not None and k >= hi:
                        probs.append(f"{where} slot {i}: key {k!r} outside [{lo!r}, {hi!r})")
                    prev = k
                leaves.append(pid)
                total += n
                continue
            if ptype != INNER:
                probs.append(f"{where}: type {ptype} at inner level {level}")
                continue
            if aux_of(buf) != level:
                probs.append(f"{where}: level {aux_of(buf)}, expected {level}")
            if n < (2 if is_root else 1):
                probs.append(f"{where}: {n} children")
                continue
            if any(len(r) < 8 for r in recs):
                probs.append(f"{where}: malformed inner record")
                continue
            if len(recs[0]) != 8:
                probs.append(f"{where}: first separator is not empty")
            seps = [rec_key(r, False) for r in recs]
            for i in range(1, n):
                s = seps[i]
                if i > 1 and s <= seps[i - 1]:
                    probs.append(f"{where} slot {i}: separator {s!r} not above {seps[i - 1]!r}")
                if lo is not None and s <= lo or hi is not None and s >= hi:
                    probs.append(f"{where} slot {i}: separator {s!r} outside ({lo!r}, {hi!r})")
            children = []
            for i in range(n):
                c_lo = lo if i == 0 else seps[i]
                c_hi = hi if i == n - 1 else seps[i + 1]
                children.append((U64.unpack_from(recs[i])[0], c_lo, c_hi, level - 1, False))
            stack.extend(reversed(children))  # leftmost first: leaves come out in key order
        # the sibling chain must visit exactly these leaves, in this order
        chain, pid, seen = [], leaves[0] if leaves else 0, set()
        while pid and pid not in seen and len(chain) <= len(leaves):
            seen.add(pid)
            chain.append(pid)
            with pinned(tree.e, pid) as f:
                pid = aux_of(f.data) if f.data[3] == LEAF else 0
        if chain != leaves:
            probs.append(f"{name}: leaf chain {chain[:8]}... differs from the in-order leaves {leaves[:8]}...")
        if version == 1 and total != count:  # version 2 keeps no count
            probs.append(f"{name}: header counts {count} entries, leaves hold {total}")
    return probs

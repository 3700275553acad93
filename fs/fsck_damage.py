"""fsck's first pass: pages that fail verification, in the trees and in the allocation maps.

Every tree is read with :func:`~traxfs.fs.struct.btree_salvage.salvage`: everything readable
around a damaged page. A damaged tree is reported with its damaged pages and the key ranges
whose entries could not be read. The repair rebuilds it from what survived, in one
transaction: a new tree bulk-loaded under the same catalog name, the old tree's pages (damaged
ones included) freed. The later passes then do the rest: entries naming lost inodes are
removed, inodes no longer named are reattached to /lost+found, extents of lost inodes and data
pages nobody owns any more are freed.

A damaged allocation map is rebuilt from what the structures and the extents own (before
anything is allocated: allocation reads the maps). The ``meta`` tree's records are checked
too: a lost filesystem identity record is written anew (with a new UUID, reported), and the
next inode number is kept above every inode.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from .datamap import DEAD
from .engine import opcodes
from .engine.alloc import NoSpace
from .engine.check import allocated_pages, page_runs
from .engine.engine import BITS_PER_MAP
from .engine.page import PAGE_MAGIC, PAGE_SIZE, PageType
from .errors import FsError
from .filesystem import FileSystem
from .inodes import INO_BATCH
from .keys import U64, U64X2, Inode, unpack_extent
from .queues.check import owned_pages as queue_pages
from .struct.btree import BTree
from .struct.btree_salvage import Chain, Salvage, leaf_chains, salvage
from .tables.check import owned_pages as table_pages
from .trees import KEY_EPOCH, KEY_NEXT_INO, KEY_SUPER, TREES, FsSuper


@dataclass
class Issue:
    """Something fsck found: what to say, how to repair it (None: it cannot), and whether it is
    only a note (no error: e.g. preallocation a crash left behind)."""

    text: str
    fix: Callable[[], object] | None = None
    note: bool = False


def read_trees(fs: FileSystem) -> dict[str, Salvage]:
    """Every tree as far as it can be read."""
    return {name: salvage(fs.e, fs.t[name].header) for name in TREES}


def adopt_lost_leaves(fs: FileSystem, trees: dict[str, Salvage]) -> None:
    """A tree whose root or header is damaged reaches none of its leaves (or none left of its
    first readable one). Find them among the allocated leaf pages no tree owns, strung along
    their right links, and give a chain to the tree that alone can have lost it: the chain
    must end where that tree's readable leaves begin (or at the end) and hold only keys below
    them. The salvage of that tree is updated in place."""
    needy = [name for name, s in trees.items() if s.lost and s.lost[0][0] is None]
    if not needy:
        return
    owned = _owned(fs, trees, damaged=True)
    allocated, _ = allocated_pages(fs.e)
    chains = leaf_chains(fs.e, _leaf_pages(fs, [pid for pid in allocated if pid not in owned]))
    fits: dict[str, list[Chain]] = {}
    for c in chains:
        keys = [k for k, _ in c.entries]
        if keys != sorted(set(keys)):
            continue
        homes = [name for name in needy if c.link == trees[name].first_leaf and
                 (trees[name].lost[0][1] is None or not keys or keys[-1] < trees[name].lost[0][1])]
        if len(homes) == 1:
            fits.setdefault(homes[0], []).append(c)
    for name, found in fits.items():
        if len(found) != 1:
            continue  # two candidates for one tree: neither can be trusted
        c, s = found[0], trees[name]
        s.entries[:0] = c.entries
        s.pages.update(c.pages)
        s.recovered = len(c.entries)
        lost_before = s.lost.pop(0)[1]
        if len(s.damaged) > 1 or not c.entries:  # another damaged page may have held leaves before these
            s.lost.insert(0, (None, c.entries[0][0] if c.entries else lost_before))


def _leaf_pages(fs: FileSystem, pids: list[int]) -> list[int]:
    """Those of ``pids`` whose raw bytes carry the page magic and the leaf type."""
    out = []
    for first, count in page_runs(pids):
        blob = fs.e.raw.read(first * PAGE_SIZE, count * PAGE_SIZE)
        for k in range(count):
            head = blob[k * PAGE_SIZE : k * PAGE_SIZE + 4]
            if int.from_bytes(head[:2], "little") == PAGE_MAGIC and head[3] == PageType.BTREE_LEAF:
                out.append(first + k)
    return out


def extent_pages(entries: list[tuple[bytes, bytes]]) -> set[int]:
    """Device pages the extents in ``entries`` (the extents tree's) map."""
    out: set[int] = set()
    for _, v in entries:
        phys, count, _ = unpack_extent(v)
        out.update(range(phys, phys + count))
    return out


def dead_pages(entries: list[tuple[bytes, bytes]]) -> set[int]:
    """Device pages on the dead list (freed while a snapshot sees them: still in use)."""
    out: set[int] = set()
    for k, v in entries:
        first, (count, _) = U64X2.unpack(k)[1], DEAD.unpack(v)
        out.update(range(first, first + count))
    return out


def damaged_maps(fs: FileSystem) -> list[tuple[int, int, str]]:
    """(map number, map page, damage) of every allocation map that cannot be read."""
    _, probs = allocated_pages(fs.e)  # the maps read raw from the device
    out = []
    for pid, text in probs:
        m = next(m for m in range(fs.e.nmaps) if fs.e.map_page(m) == pid)
        out.append((m, pid, text))
    return out


def damage_issues(fs: FileSystem, trees: dict[str, Salvage], maps: list[tuple[int, int, str]]) -> list[Issue]:
    """The issues of the first pass, maps first: their repair must precede any allocation."""
    out = []
    if maps:
        text = "; ".join(f"{t} (the allocation state of pages {m * BITS_PER_MAP}.."
                         f"{min((m + 1) * BITS_PER_MAP, fs.e.page_count) - 1} is unknown)" for m, _, t in maps)
        out.append(Issue(text, _rebuild_maps(fs, maps, trees)))
    for name, s in trees.items():
        if s.healthy:
            continue
        parts = [_page_text(name, pid, what) for pid, what in s.damaged]
        parts += [f"tree fs.{name}: entries {_between(name, a, b)} could not be read" for a, b in s.lost]
        if s.recovered:
            parts.append(f"tree fs.{name}: {s.recovered} entries found in leaves it no longer reaches")
        out.append(Issue("; ".join(parts), _rebuild_tree(fs, name, s)))
    return out


def meta_issues(fs: FileSystem, meta: list[tuple[bytes, bytes]], max_ino: int, min_epoch: int = 1) -> list[Issue]:
    """The ``meta`` records: identity, next inode number (above every inode), current epoch (above
    every snapshot's, at least every extent's birth: ``min_epoch``)."""
    records = dict(meta)
    out = []
    if KEY_SUPER not in records:
        fresh = FsSuper(str(uuid.uuid4()), time.time_ns(), "")
        out.append(Issue("the filesystem identity record (UUID, label) is lost",
                         _put_meta(fs, KEY_SUPER, fresh.pack, f"written anew: UUID {fresh.uuid}, no label")))
    raw = records.get(KEY_NEXT_INO)
    nxt = U64.unpack(raw)[0] if raw is not None and len(raw) == 8 else None
    if nxt is None or nxt <= max_ino:
        want = max_ino + INO_BATCH
        out.append(Issue(f"the next inode number is {'lost' if nxt is None else nxt}, not above the largest "
                         f"inode {max_ino}", _put_meta(fs, KEY_NEXT_INO, lambda: U64.pack(want), f"set to {want}")))
    raw = records.get(KEY_EPOCH)
    epoch = U64.unpack(raw)[0] if raw is not None and len(raw) == 8 else None
    low = max(min_epoch, max(fs.chain.epochs, default=0) + 1)
    if epoch is None or epoch < low:
        def put_epoch() -> bytes:
            fs.chain.current = max(fs.chain.current, low)
            return U64.pack(low)
        out.append(Issue(f"the current epoch is {'lost' if epoch is None else epoch}, below {low} (the next after "
                         "every snapshot and extent birth)", _put_meta(fs, KEY_EPOCH, put_epoch, f"set to {low}")))
    return out


def unowned_pages(fs: FileSystem, trees: dict[str, Salvage]) -> list[int]:
    """Allocated pages that no tree, no extent and not the engine owns (after a tree was
    rebuilt: the pages of its subtrees that could not be reached)."""
    allocated, _ = allocated_pages(fs.e)
    owned = _owned(fs, trees, damaged=False)
    return [pid for pid in allocated if pid not in owned]


def _owned(fs: FileSystem, trees: dict[str, Salvage], damaged: bool) -> set[int]:
    """Pages something owns: the engine, a tree (its readable pages, and with ``damaged`` its
    damaged ones), an extent, the queue store (its trees and blocks, read as far as they can
    be: ``traxfs.fs.queues.check.owned_pages``) or the table store (its trees, PAX pages and rejected files)."""
    owned = set(fs.e.engine_pages()) | extent_pages(trees["extents"].entries) | queue_pages(fs.e)
    owned |= dead_pages(trees["dead"].entries)
    owned |= table_pages(fs.e)
    for s in trees.values():
        owned |= s.pages | ({pid for pid, _ in s.damaged} if damaged else set())
    return owned


# ----- descriptions ------------------------------------------------------------------------------
def _page_text(tree: str, pid: int, what: str) -> str:
    prefix = f"page {pid}: "
    what = what.removeprefix(prefix) if what.startswith(prefix) else what
    return f"page {pid} of tree fs.{tree}: {what}"


def _key_text(tree: str, key: bytes) -> str:
    """A tree key as the entry it names."""
    ino = U64.unpack(key[:8])[0] if len(key) >= 8 else None
    if ino is None:
        return repr(key)
    if tree in ("inodes", "orphans"):
        return f"inode {ino}"
    if tree == "dirents":
        return f"entry {key[8:]!r} of directory {ino}"
    if tree == "cookies" and len(key) == 16:
        return f"readdir cookie {U64.unpack(key[8:])[0]} of directory {ino}"
    if tree == "extents" and len(key) == 16:
        return f"file page {U64.unpack(key[8:])[0]} of inode {ino}"
    if tree == "xattrs":
        return f"attribute {key[8:-3]!r} of inode {ino}"
    if tree == "symlinks":
        return f"the target of symlink {ino}"
    return repr(key)


def _between(tree: str, after: bytes | None, before: bytes | None) -> str:
    if after is None and before is None:
        return "(all of them)"
    lo = "the first" if after is None else _key_text(tree, after)
    hi = "the last" if before is None else _key_text(tree, before)
    return f"between {lo} and {hi}"


# ----- repairs -----------------------------------------------------------------------------------
def _rebuild_tree(fs: FileSystem, name: str, s: Salvage):
    """Repair: a new tree from the surviving entries; the old tree's pages freed."""

    def run() -> str:
        old = s.pages | {pid for pid, _ in s.damaged if 0 < pid < fs.e.page_count}
        tree = None
        for build in (BTree.bulk_create, _create_by_puts):  # bulk needs one free run of pages
            try:
                with fs.repair.transaction() as ftx:
                    tx = ftx.tx
                    tree = build(fs.e, tx, s.entries, name=f"fs.{name}")
                    for pid in sorted(old):
                        fs.e.free_page(tx, pid)
                break
            except FsError:
                continue
        if tree is None:
            raise NoSpace(f"no room to rebuild tree fs.{name} ({len(s.entries)} entries)")
        fs.repair.replace_tree(name, tree)
        return f"tree fs.{name} rebuilt from its {len(s.entries)} readable entries"

    return run


def _create_by_puts(engine, tx, items, name: str) -> BTree:
    tree = BTree.create(engine, tx, name)
    for k, v in items:
        tree.put(tx, k, v)
    return tree


def _rebuild_maps(fs: FileSystem, maps: list[tuple[int, int, str]], trees: dict[str, Salvage]):
    """Repair: each damaged map page written anew with the bits of what is owned in its range:
    the engine's pages, every tree's readable and damaged pages (a damaged tree still holds its
    pages until it is rebuilt, which frees them), every extent's data pages, the queue store's."""

    def run() -> str:
        used = _owned(fs, trees, damaged=True)
        with fs.repair.transaction() as ftx:
            tx = ftx.tx
            for m, pid, _ in maps:
                first = m * BITS_PER_MAP
                bits = bytearray(PAGE_SIZE - 32)
                for q in used:
                    if first <= q < min(first + BITS_PER_MAP, fs.e.page_count):
                        bits[(q - first) // 8] |= 1 << ((q - first) % 8)
                payload = opcodes.image_payload(bytes(PAGE_SIZE), PageType.ALLOC_MAP, 0, bytes(bits))
                fs.e.update(tx, pid, opcodes.OP_IMAGE, payload, fresh=True)
        return f"{len(maps)} allocation map page(s) rebuilt from what the trees and extents own"

    return run


def _put_meta(fs: FileSystem, key: bytes, value: Callable[[], bytes], said: str):
    def run() -> str:
        with fs.repair.transaction() as ftx:
            fs.t["meta"].put(ftx.tx, key, value())
        return said
    return run


def inode_of(key: bytes, value: bytes) -> tuple[int, Inode | None]:
    """(ino, Inode) of an inodes-tree entry, or (ino, None) if the record is malformed."""
    ino = U64.unpack(key)[0] if len(key) == 8 else -1
    try:
        return ino, Inode.unpack(ino, value)
    except struct.error:
        return ino, None

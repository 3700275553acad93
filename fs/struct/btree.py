"""A B+tree over slotted pages: the index behind directories and extent maps.

**Identity.** A tree is its *header page* (``PageType.BTREE_HEADER``): the root moves when the
root splits or collapses, the header never does, so the header pid is what the catalog names
(``btree:NAME``) and what every logical undo payload carries.

Page formats, records and in-page search: :mod:`traxfs.fs.struct.btree_node`; bulk builds:
:mod:`traxfs.fs.struct.btree_build`; verification: :mod:`traxfs.fs.struct.btree_check`.

Child ``i`` of an inner node holds the keys ``k`` with ``sep[i] <= k < sep[i+1]``. Keys are
bytes compared lexicographically, at most ``MAX_KEY`` bytes, and key + value at most
``MAX_ENTRY`` bytes (both in ``btree_node``); so a leaf holds at least three entries and an
inner node three children, and a 2-way split always fits.

**Searching** bisects over the slot directory in C (``traxfs.ext.nodesearch``: a probe is a
bounds check and a ``memcmp`` on the page, no key object), ~log2(n) probes per level.

**Splits** are physiological and small: the new right page is formatted (``OP_FORMAT``, no
pre-image: it was free) and filled with one ``OP_SLOTS_PASTE``; the left page loses the moved
run with one ``OP_SLOTS_CUT``; the parent gets one slot insert. Leaf splits push up the
*shortest* separator between the two halves (suffix truncation), so long keys cost little in
inner nodes. Splits are balanced by bytes, except on the rightmost (leftmost) path when the
insert is at the end (start), where the old page is left full: sequential loads then fill pages
completely, which is the common case for extent maps.

**Deletes merge underfull nodes.** A node that falls below a quarter full is merged with an
adjacent sibling under the same parent (the right one, else the left one) when the two fit in
three quarters of a page: the right
node's records are pasted at the end of the left one (for inner nodes the parent's separator
comes down onto the right node's first child), the parent loses the right node's entry — which
may make the parent underfull in turn, up to the root — and the right page is freed. The gap
between the quarter and the three quarters is hysteresis: a merged node has room, so the next
insert does not split it again. No redistribution (borrowing from a fuller sibling): it would
cost log on every delete near the threshold for little gain. Besides merging, a leaf that
becomes *empty* is always unlinked and freed, even without a same-parent sibling (its left
neighbour in the leaf chain is found through the path); a root with one child is replaced by
that child. Why merge at all: directories shrink (``rm`` of most of a big directory) and random
deletes almost never empty a 60-entry leaf, so free-at-empty alone would leave them at a quarter
full forever. Freed pages return to the allocator at commit (see ``common.free_page``).

**Concurrency and recovery.** Every change is a nested top action under the tree's latch with a
logical undo: put ↔ put-back-old-value / delete, delete ↔ put (see ``common``). Readers take the
latch too (a reader must not see a half-done split). Iterators do not hold the latch or pins
between batches: each batch is one leaf read under the latch; the next batch follows the leaf's
right link if the leaf's LSN is unchanged, else re-seeks past the last key returned — so they
never see a key twice or skip one that existed throughout. Isolation between transactions (two
transactions writing the same key) is the caller's business: take ``engine.lock`` on the key.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...ext.nodesearch import descend, leaf_bisect, leaf_find
from ...ext.slotpage import diff_runs
from ...ext.treeleaf import LeafChange
from ..engine import check as engine_check
from ..engine import opcodes, slotted
from ..engine.logrecord import RecType
from ..engine.page import HEADER_SIZE, PageType
from ..engine.xact import Transaction, TxState
from .btree_build import build_tree
from .btree_check import check_tree
from .btree_node import (
    COUNT_OFF,
    HDR,
    INNER,
    KIND,
    LEAF,
    MAGIC,
    ROOT_OFF,
    VERSION,
    VERSION_FIELD,
    VERSION_OFF,
    VERSIONS_READ,
    check_sizes,
    inner_child,
    inner_key,
    inner_record,
    leaf_item,
    leaf_record,
    leaf_search,
    rec_key,
    separator,
    split_point,
)
from .common import (
    OP_SLOTS_CUT,
    OP_SLOTS_PASTE,
    PAGE_CAPACITY,
    U64,
    aux_of,
    free_page,
    lsn_of,
    new_page,
    nslots,
    pinned,
    register_map_undos,
    run_payload,
    set_page_aux,
    structure_latch,
    write_bytes,
)
from .keymap import LoggedMap

UNDERFULL = PAGE_CAPACITY // 4  # a node using fewer bytes than this is merged with a sibling ...
MERGE_LIMIT = PAGE_CAPACITY * 3 // 4  # ... if the merged node uses at most this many
_DECLINED = object()  # what ``LeafChange.get`` answers when it leaves a lookup to the general path

OP_UNDO_PUT = 110  # payload: undo head | had_old u8 | klen u16 | key | old value
OP_UNDO_DELETE = 111  # payload: undo head | klen u16 | key | value
OP_UNDO_PATCH = 112  # payload: undo head | klen u16 | key | patch runs of the value (old -> new)


class BTree(LoggedMap):
    """One B+tree, identified by its header page. Cheap to open; objects on the same header
    share one latch."""

    UNDO_PUT, UNDO_DELETE, UNDO_PATCH = OP_UNDO_PUT, OP_UNDO_DELETE, OP_UNDO_PATCH
    check_sizes = staticmethod(check_sizes)

    def __init__(self, engine, header_pid: int):
        self.e = engine
        self.header = header_pid
        self.latch = structure_latch(engine, header_pid)
        self._in_leaf: LeafChange | None = None  # put and delete inside one leaf, in C (``_leaf_change``)

    # ----- lifecycle ----------------------------------------------------------------------------
    @classmethod
    def create(cls, engine, tx: Transaction, name: str | None = None) -> BTree:
        """A new empty tree (its creation is undone if ``tx`` aborts). With ``name``, it is
        registered in the catalog as ``btree:NAME``."""
        header = new_page(engine, tx, PageType.BTREE_HEADER, is_slotted=False)
        root = new_page(engine, tx, LEAF)
        write_bytes(engine, tx, header, HEADER_SIZE, HDR.pack(MAGIC, VERSION, 0, root, 0))
        if name is not None:
            engine.set_root(tx, f"{KIND}:{name}", header)
        return cls(engine, header)

    @classmethod
    def bulk_create(cls, engine, tx: Transaction, items, name: str | None = None, fill: float = 0.9) -> BTree:
        """A new tree built from ``items`` ((key, value) pairs, unique keys) in one pass, its
        pages filled to ``fill``; see :mod:`traxfs.fs.struct.btree_build`."""
        return cls(engine, build_tree(engine, tx, items, name, fill))


    @classmethod
    def open(cls, engine, header_pid: int) -> BTree:
        with engine.page(header_pid) as f:
            magic, version = HDR.unpack_from(f.data, HEADER_SIZE)[:2]
            if f.data[3] != PageType.BTREE_HEADER or magic != MAGIC:
                raise ValueError(f"page {header_pid} is not a B+tree header")
            if version not in VERSIONS_READ:
                raise ValueError(f"B+tree {header_pid}: format version {version}, this traxfs reads "
                                 f"{', '.join(map(str, VERSIONS_READ))}")
        return cls(engine, header_pid)

    @classmethod
    def open_named(cls, engine, name: str) -> BTree | None:
        pid = engine.get_root(f"{KIND}:{name}")
        return cls.open(engine, pid) if pid else None

    def drop(self, tx: Transaction, name: str | None = None) -> None:
        """Free every page of the tree when ``tx`` commits (unname it too, with ``name``)."""
        with self.latch:
            pages = [self.header]
            stack = [self._root()]
            while stack:
                pid = stack.pop()
                pages.append(pid)
                with pinned(self.e, pid) as f:
                    if f.data[3] == INNER:
                        stack.extend(inner_child(f.data, i) for i in range(nslots(f.data)))
            for pid in pages:
                self.e.free_page(tx, pid)  # at commit only: an aborted drop frees nothing
            if name is not None:
                self.e.set_root(tx, f"{KIND}:{name}", 0)

    def verify_root(self) -> None:
        """Read the header and the root node (a mount's quick look for damage): raises
        ``PageCorrupt`` if either fails verification."""
        with pinned(self.e, self._root()):
            pass

    # ----- header -------------------------------------------------------------------------------
    def _root(self) -> int:
        with pinned(self.e, self.header) as f:
            return U64.unpack_from(f.data, ROOT_OFF)[0]

    def _set_root(self, tx: Transaction, pid: int) -> None:
        write_bytes(self.e, tx, self.header, ROOT_OFF, U64.pack(pid))

    def _root_for_change(self, tx: Transaction) -> int:
        """The root, read before a change; a version 1 header becomes version 2 here (its count
        would go stale: version 2 keeps none, see ``btree_node.VERSION``)."""
        with pinned(self.e, self.header) as f:
            version = VERSION_FIELD.unpack_from(f.data, VERSION_OFF)[0]
            root = U64.unpack_from(f.data, ROOT_OFF)[0]
        if version != VERSION:
            write_bytes(self.e, tx, self.header, VERSION_OFF, VERSION_FIELD.pack(VERSION))
            write_bytes(self.e, tx, self.header, COUNT_OFF, U64.pack(0))
        return root

    def __len__(self) -> int:
        """Entries, counted along the leaf chain: O(leaves). Nothing hot asks; keeping a count
        in the header cost a logged update per put and delete."""
        with self.latch:
            pid, n = self._descend(b""), 0
            while pid:
                with pinned(self.e, pid) as f:
                    n += nslots(f.data)
                    pid = aux_of(f.data)
            return n

    # ----- descent ------------------------------------------------------------------------------
    def _descend(self, key: bytes, path: list | None = None, root: int = 0) -> int:
        """The leaf that covers ``key``; ``path`` collects (inner pid, child index, slot count)."""
        e = self.e
        return descend(e.pin_table, e.pin, root or self._root(), key, INNER, path)

    def _left_leaf(self, path: list) -> int | None:
        """The leaf just left of the one ``path`` leads to (None: it is the leftmost)."""
        for d in range(len(path) - 1, -1, -1):
            pid, idx, _n = path[d]
            if idx > 0:
                with pinned(self.e, pid) as f:
                    child = inner_child(f.data, idx - 1)
                for _ in range(len(path) - 1 - d):
                    with pinned(self.e, child) as f:
                        child = inner_child(f.data, nslots(f.data) - 1)
                return child
        return None

    # ----- reading ------------------------------------------------------------------------------
    def get(self, key: bytes, default=None):
        """The value under ``key`` (``default`` if none): in C (``LeafChange.get``) unless it
        declines — the latch or the leaf busy, a page to load — and then here, waiting."""
        key = bytes(key)
        v = self._leaf_change().get(key, _DECLINED)
        if v is _DECLINED:
            with self.latch:
                with self.e.page(self._descend(key)) as f:
                    v = leaf_find(f.data, key)[2]
        return default if v is None else v

    lookup = get

    def __contains__(self, key: bytes) -> bool:
        return self.get(key) is not None

    def floor(self, key: bytes) -> tuple[bytes, bytes] | None:
        """The entry with the greatest key <= ``key`` (extent maps: the extent holding an offset)."""
        key = bytes(key)
        with self.latch:
            path: list = []
            leaf = self._descend(key, path)
            with pinned(self.e, leaf) as f:
                i = leaf_bisect(f.data, key, True)[0]
                if i > 0:
                    return leaf_item(f.data, i - 1)
            left = self._left_leaf(path)
            if left is None:
                return None
            with pinned(self.e, left) as f:
                n = nslots(f.data)
                return leaf_item(f.data, n - 1) if n else None

    def items(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``start <= key < stop`` in ascending key order (None: unbounded): from
        C in one call when one leaf holds the whole range (``LeafChange.range``), else leaf by
        leaf."""
        start = None if start is None else bytes(start)
        stop = None if stop is None else bytes(stop)
        if start is not None:
            got = self._leaf_change().range(start, stop, _DECLINED)
            if got is not _DECLINED:
                return iter(got)
        return self._items(start, stop)

    def _items(self, start: bytes | None, stop: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        last: bytes | None = None
        follow: tuple[int, int, int] | None = None  # (leaf read, its LSN then, its right link)
        while True:
            batch: list[tuple[bytes, bytes]] = []
            done = False
            with self.latch:
                leaf = idx = None
                if follow is not None:
                    with pinned(self.e, follow[0]) as f:
                        if lsn_of(f.data) == follow[1]:  # unchanged: its right link is current
                            leaf, idx = follow[2], 0
                            if leaf == 0:
                                return
                if leaf is None:  # first batch, or the tree changed: (re-)seek
                    leaf = self._descend((start or b"") if last is None else last)
                with pinned(self.e, leaf) as f:
                    buf = f.data
                    n = nslots(buf)
                    if idx is None:
                        if last is None:
                            idx = 0 if start is None else leaf_search(buf, start)[0]
                        else:
                            idx = leaf_bisect(buf, last, True)[0]
                    for i in range(idx, n):
                        k, v = leaf_item(buf, i)
                        if stop is not None and k >= stop:
                            done = True
                            break
                        batch.append((k, v))
                    follow = (leaf, lsn_of(buf), aux_of(buf))
            yield from batch
            if done:
                return
            if batch:
                last = batch[-1][0]

    def keys(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[bytes]:
        return (k for k, _ in self.items(start, stop))

    def values(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[bytes]:
        return (v for _, v in self.items(start, stop))

    def __iter__(self) -> Iterator[bytes]:
        return self.keys()

    # ----- changing ------------------------------------------------------------------------------
    def _leaf_change(self) -> LeafChange:
        """The common case of a put or a delete — one leaf changes — in C (``traxfs.ext.treeleaf``),
        made at the first change. Whatever it declines, having changed nothing, is ``LoggedMap``'s."""
        if self._in_leaf is None:
            self._in_leaf = LeafChange(self.e, self.header, self.latch.lock, TxState.ACTIVE, RecType.LOGICAL, INNER,
                                       VERSION, VERSION_OFF, ROOT_OFF, PAGE_CAPACITY, UNDERFULL,
                                       opcodes.OP_SLOT_INSERT, opcodes.OP_SLOT_PATCH, opcodes.OP_SLOT_DELETE,
                                       OP_UNDO_PUT, OP_UNDO_PATCH, OP_UNDO_DELETE)
        return self._in_leaf

    def put(self, tx: Transaction, key: bytes, value: bytes) -> bytes | None:
        """Insert or overwrite; return the old value (None if the key is new)."""
        key, value = bytes(key), bytes(value)
        check_sizes(key, value)
        done, old = self._leaf_change().put(tx, key, value)
        return old if done else LoggedMap.put(self, tx, key, value)

    insert = put

    def delete(self, tx: Transaction, key: bytes) -> bytes | None:
        """Remove ``key``; return its value (None if it was absent: nothing changes)."""
        key = bytes(key)
        done, old = self._leaf_change().delete(tx, key)
        return old if done else LoggedMap.delete(self, tx, key)

    # the general path of put and delete is LoggedMap's; the physical work (latch held, inside a
    # nested top action or a logical undo) is here
    def _put(self, tx: Transaction, key: bytes, value: bytes) -> bytes | None:
        e = self.e
        path: list = []
        leaf = self._descend(key, path, self._root_for_change(tx))
        rec = leaf_record(key, value)
        with pinned(e, leaf) as f:
            buf = f.data
            i, n, old = leaf_find(buf, key)
            if old is not None:
                if old == value:
                    return old
                if len(old) == len(value):  # only the bytes that changed are logged
                    e.update(tx, leaf, opcodes.OP_SLOT_PATCH,
                             opcodes.slot_patch_payload(i, diff_runs(old, value, 2 + len(key))))
                    return old
                old_rec = leaf_record(key, old)
                if slotted.free_space(buf) + len(old_rec) >= len(rec):
                    e.update(tx, leaf, opcodes.OP_SLOT_REPLACE, opcodes.slot_replace_payload(i, old_rec, rec))
                    return old
                e.update(tx, leaf, opcodes.OP_SLOT_DELETE, opcodes.slot_delete_payload(i, old_rec))
                n -= 1
            if slotted.fits(buf, len(rec)):
                e.update(tx, leaf, opcodes.OP_SLOT_INSERT, opcodes.slot_insert_payload(i, rec))
            else:
                self._split(tx, path, leaf, i, rec, True)
        return old

    def _split(self, tx: Transaction, path: list, pid: int, pos: int, rec: bytes, leaf: bool) -> None:
        """Insert ``rec`` at ``pos`` in the full node ``pid`` by splitting it in two."""
        e = self.e
        with pinned(e, pid) as f:
            buf = f.data
            recs = slotted.records(buf)
            aux = aux_of(buf)
        n = len(recs)
        combined = recs[:pos] + [rec] + recs[pos:]
        rightmost = all(i == m - 1 for _, i, m in path) and (not leaf or aux == 0)
        leftmost = all(i == 0 for _, i, _m in path)
        if pos == n and rightmost:
            s = n  # sequential load upwards: keep the old page full
        elif pos == 0 and leftmost:
            s = 1  # ... downwards
        else:
            s = split_point([len(r) + 4 for r in combined])
        right = combined[s:]
        if leaf:
            sep = separator(rec_key(combined[s - 1], True), rec_key(combined[s], True))
            right_pid = new_page(e, tx, LEAF, aux, right)
        else:
            sep = rec_key(combined[s], False)
            right[0] = combined[s][:8]  # its key becomes the separator above: here it is −∞
            right_pid = new_page(e, tx, INNER, aux, right)
        keep = s if pos >= s else s - 1  # original records that stay left
        if keep < n:
            e.update(tx, pid, OP_SLOTS_CUT, run_payload(keep, recs[keep:]))
        if leaf:
            set_page_aux(e, tx, pid, right_pid)
        if pos < s:
            e.update(tx, pid, opcodes.OP_SLOT_INSERT, opcodes.slot_insert_payload(pos, rec))
        self._insert_parent(tx, path, pid, sep, right_pid, 0 if leaf else aux)

    def _insert_parent(self, tx: Transaction, path: list, left: int, sep: bytes, right: int, level: int) -> None:
        e = self.e
        entry = inner_record(right, sep)
        if not path:  # ``left`` was the root
            root = new_page(e, tx, INNER, level + 1, [inner_record(left, b""), entry])
            self._set_root(tx, root)
            return
        parent, idx, _n = path[-1]
        with pinned(e, parent) as f:
            fits = slotted.fits(f.data, len(entry))
        if fits:
            e.update(tx, parent, opcodes.OP_SLOT_INSERT, opcodes.slot_insert_payload(idx + 1, entry))
        else:
            self._split(tx, path[:-1], parent, idx + 1, entry, False)

    def _delete(self, tx: Transaction, key: bytes) -> bytes | None:
        e = self.e
        path: list = []
        leaf = self._descend(key, path, self._root_for_change(tx))
        with pinned(e, leaf) as f:
            buf = f.data
            i, n, v = leaf_find(buf, key)
            if v is None:
                return None
            e.update(tx, leaf, opcodes.OP_SLOT_DELETE, opcodes.slot_delete_payload(i, leaf_record(key, v)))
            empty = n == 1
            used = PAGE_CAPACITY - slotted.free_space(buf)
        if empty and path:
            left = self._left_leaf(path)
            if left is not None:
                with pinned(e, leaf) as f:
                    nxt = aux_of(f.data)
                set_page_aux(e, tx, left, nxt)
            self._remove_entry(tx, path)
            free_page(e, tx, leaf)
        elif path and used < UNDERFULL:
            self._merge(tx, path, leaf, used, True)
        return v

    def _merge(self, tx: Transaction, path: list, pid: int, used: int, leaf: bool) -> None:
        """Merge the underfull node ``pid`` (``path[-1]`` is its entry in its parent) with an
        adjacent sibling under the same parent, if the two fit in MERGE_LIMIT bytes."""
        e = self.e
        parent, idx, n = path[-1]
        for sib_idx in (idx + 1, idx - 1):  # the right sibling first, else the left one
            if not 0 <= sib_idx < n:
                continue
            right_idx = max(idx, sib_idx)
            with pinned(e, parent) as f:
                sib = inner_child(f.data, sib_idx)
                sep = inner_key(f.data, right_idx)
            with pinned(e, sib) as f:
                sib_used = PAGE_CAPACITY - slotted.free_space(f.data)
            if used + sib_used + (0 if leaf else len(sep)) <= MERGE_LIMIT:
                break
        else:
            return
        left, right = (pid, sib) if sib_idx > idx else (sib, pid)
        with pinned(e, right) as f:
            moved = slotted.records(f.data)
            right_next = aux_of(f.data)
        with pinned(e, left) as f:
            at = nslots(f.data)
        if not leaf:  # the separator above comes down onto the right node's first child
            moved[0] = moved[0][:8] + sep
        if moved:
            e.update(tx, left, OP_SLOTS_PASTE, run_payload(at, moved))
        if leaf:
            set_page_aux(e, tx, left, right_next)
            # change the freed leaf too: an iterator that read it last sees a new LSN and
            # re-seeks instead of following a right link out of a page no longer in the tree
            set_page_aux(e, tx, right, 0)
        self._remove_entry(tx, path[:-1] + [(parent, right_idx, n)])
        free_page(e, tx, right)

    def _remove_entry(self, tx: Transaction, path: list) -> None:
        """Remove the child entry ``path[-1]`` points at from its inner node."""
        e = self.e
        pid, idx, n = path[-1]
        with pinned(e, pid) as f:
            old = slotted.get(f.data, idx)
            e.update(tx, pid, opcodes.OP_SLOT_DELETE, opcodes.slot_delete_payload(idx, old))
            if n - 1 == 0:  # it was the only child: this node goes too (never the root: >= 2)
                empty = True
            else:
                empty = False
                if idx == 0:  # the new first child's separator becomes −∞
                    first = slotted.get(f.data, 0)
                    if len(first) > 8:
                        e.update(tx, pid, opcodes.OP_SLOT_REPLACE, opcodes.slot_replace_payload(0, first, first[:8]))
                used = PAGE_CAPACITY - slotted.free_space(f.data)
        if empty:
            if len(path) == 1:
                raise AssertionError(f"B+tree {self.header}: root {pid} lost its last child")
            self._remove_entry(tx, path[:-1])
            free_page(e, tx, pid)
            return
        if len(path) > 1:
            if used < UNDERFULL:
                self._merge(tx, path[:-1], pid, used, False)
            return
        root = pid  # the root: collapse while it has a single child
        while True:
            with pinned(e, root) as f:
                if f.data[3] != INNER or nslots(f.data) != 1:
                    break
                child = inner_child(f.data, 0)
            self._set_root(tx, child)
            free_page(e, tx, root)
            root = child

    # ----- verification -------------------------------------------------------------------------
    def check(self, pages: set | None = None) -> list[str]:
        """Verify the whole tree; problems (empty: healthy); ``pages`` collects the tree's
        pages (see :mod:`traxfs.fs.struct.btree_check`)."""
        return check_tree(self, pages)


# ----- logical undo -------------------------------------------------------------------------------
register_map_undos(BTree, OP_UNDO_PUT, OP_UNDO_DELETE, OP_UNDO_PATCH, "btree")


def _check_root(engine, pid: int, pages: set) -> list[str]:
    try:
        tree = BTree.open(engine, pid)
    except ValueError as ex:
        return [str(ex)]
    return tree.check(pages)


engine_check.register_checker(KIND, _check_root)

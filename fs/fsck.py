"""Checking and repairing a filesystem (an unmounted one): e2fsck's passes, on our trees.

0. the engine's superblock copies (both must be readable), and the damage mark a mount leaves
   when it met a damaged page;
1. damaged pages (``traxfs.fs.fsck_damage``): every tree is read around its damaged pages, and
   every allocation map; what cannot be read is reported with the tree and the key range lost.
   The repair rebuilds the maps from what is owned and each damaged tree from what survived;
2. inodes and directories: every entry names an existing inode; every directory's ``..``
   names the directory holding it; entries and readdir cookies match one to one; the root
   exists; the ``meta`` records (identity, next inode number) are there and consistent;
3. link counts: a file's ``nlink`` equals the entries naming it, a directory's is 2 plus its
   subdirectories; an inode no entry names is either an orphan (``nlink`` 0, on the orphan
   list) or lost;
4. extents: inside the page file, allocated, no page owned twice, none past the file's size
   (preallocation is given back at the last close and at unmount, so only a crash leaves
   some: within ``datamap.PREALLOC_PAGES`` after an unclean stop it is a note, not an error);
   allocated pages nobody owns are leaked. Snapshots: pages on the dead list (freed while a
   snapshot sees them) are in use, never a file's too; an entry no extent of the history maps
   is a leak; every page a history extent maps is a file's or on the dead list;
5. the engine: every allocated page's checksum, type and own number; every tree's invariants
   (``traxfs.fs.engine.check``), with file data pages exempt from page checks;
6. data checksums: every copy of every written data page matches its checksum
   (``traxfs.fs.scrub``); no checksum is kept for a page no extent owns.
7. queues, when the filesystem holds a queue store (``traxfs.fs.queues.check``): block chain,
   sequence continuity, every block verified, the indexes, views and segments; their blocks'
   pages count as owned in the passes above.
8. tables, when the filesystem holds a table store (``traxfs.fs.tables.check``): page chain,
   every PAX page's header and minipage checksums, row counts and totals against the index;
   their pages count as owned in the passes above (a repair never frees them as leaked).

Repairs (``repair=True``), each one transaction: damaged maps and trees rebuilt; wrong link
counts set from the entries; entries naming missing inodes removed; cookies without entries
(and entries without cookies) rebuilt; lost inodes linked into ``/lost+found``; unlinked
inodes destroyed; extents past the size dropped; leaked pages freed (and their checksums
dropped); leaked dead-list entries freed; a lost root directory, identity record or current
epoch made anew; a data page's damaged copy
rewritten from a good one (a mirror); checksums of pages no extent owns dropped. The repair passes run again until nothing more can be fixed.

Exit codes as e2fsck(8): 0 clean, 1 errors corrected, 4 errors left uncorrected, 8 operational
error (the filesystem cannot be opened at all).
"""

from __future__ import annotations

import stat
from collections import Counter
from dataclasses import dataclass, field

from ..volume.overlay import OverlayDevice
from .datamap import DEAD, PREALLOC_PAGES
from .engine.check import allocated_pages, check_engine
from .engine.engine import BITS_PER_MAP
from .engine.page import PAGE_MAGIC, PAGE_SIZE
from .engine.superblock import SuperblockError, read_copies
from .filesystem import FileSystem
from .fsck_damage import (
    Issue,
    adopt_lost_leaves,
    damage_issues,
    damaged_maps,
    dead_pages,
    extent_pages,
    inode_of,
    meta_issues,
    read_trees,
    unowned_pages,
)
from .history import TREE_ID, unpack_value
from .keys import U64, U64X2, Inode, cookie_key, dirent_key, unpack_extent
from .limits import ROOT_INO
from .queues.check import QueueCheck, check_queues, owned_pages
from .queues.store import QueueStore, has_queues
from .scrub import scrub, stale_sums
from .tables.check import TableCheck, check_tables
from .tables.check import owned_pages as table_pages
from .tables.store import TableStore, has_tables

EXIT_CLEAN, EXIT_CORRECTED, EXIT_UNCORRECTED, EXIT_OPERATIONAL = 0, 1, 4, 8
ROUNDS = 3  # repair passes: a fix may reveal the next (a recreated root, then its link count)


@dataclass
class FsckReport:
    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if self.problems:
            return EXIT_UNCORRECTED
        return EXIT_CORRECTED if self.repaired else EXIT_CLEAN

    def as_dict(self) -> dict:
        return {"problems": self.problems, "repaired": self.repaired, "notes": self.notes, "counts": self.counts,
                "exit_code": self.exit_code}


def check_device(dev, *, repair: bool, where: str) -> FsckReport:
    """`trax fsck` on an unmounted device. Without ``repair`` nothing is written: recovery and
    the checks run on a memory overlay. Raises the filesystem's open errors (an engine or
    filesystem that cannot be found or opened: the caller's operational error)."""
    copies = [c for c in read_copies(dev, where) if isinstance(c, SuperblockError)]
    fs = FileSystem.open(dev if repair else OverlayDevice(dev), where=where, checking=True)
    try:
        rep = fsck(fs, repair=repair)
        if fs.e.sb.errors:
            mark = f"{fs.e.sb.errors} damaged page(s) met while it was in use, the first page {fs.e.sb.error_page}"
            if not repair:
                rep.problems.append(f"the filesystem is marked damaged ({mark})")
            elif not rep.problems:
                fs.e.clear_damage()
                rep.repaired.append(f"damage mark cleared ({mark})")
    finally:
        fs.close()
    if copies:  # an open and a clean close write both copies: a repair rewrote the damaged one
        left = [c for c in read_copies(dev, where) if isinstance(c, SuperblockError)]
        if repair and not left:
            rep.repaired += [f"{c} (rewritten)" for c in copies]
        else:
            rep.problems += [str(c) for c in copies]
    return rep


def fsck(fs: FileSystem, repair: bool = False) -> FsckReport:
    """Check ``fs`` (opened, not mounted). With ``repair``, fix what can be fixed; the report
    then lists what was fixed and what is left."""
    rep = FsckReport()
    failed: dict[str, str] = {}  # issue -> why its repair failed (not tried again)
    trees = read_trees(fs)
    maps = damaged_maps(fs)
    adopt_lost_leaves(fs, trees)
    damage = damage_issues(fs, trees, maps)
    reported = {pid for s in trees.values() for pid, _ in s.damaged} | {pid for _, pid, _ in maps}
    if repair and damage:
        _repair(damage, rep, failed)
        trees = read_trees(fs)
        maps = damaged_maps(fs)
        leaked = unowned_pages(fs, trees)
        if leaked:
            _repair([Issue(f"{len(leaked)} allocated page(s) no tree and no file owns any more", _free(fs, leaked))],
                    rep, failed)
            trees = read_trees(fs)
    rep.problems += [i.text + failed.get(i.text, "") for i in damage if not repair or i.text in failed]
    queues = _queues(fs, repair, maps_damaged=bool(maps))
    rep.problems += [f"queues: {p}" for p in queues.problems]
    rep.repaired += [f"queues: {p}" for p in queues.repaired]
    rep.notes += queues.notes
    tables = _tables(fs, maps_damaged=bool(maps))
    rep.problems += [f"tables: {p}" for p in tables.problems]
    rep.notes += tables.notes
    for attempt in range(ROUNDS + 1):
        found = _scan(fs, trees, {m for m, _, _ in maps})
        found["data_pages"] |= queues.pages  # queue blocks: raw pages the queue store owns
        found["data_pages"] |= tables.pages  # PAX pages: raw pages the table store owns
        issues = _find(fs, found)
        todo = [i for i in issues if i.fix is not None and i.text not in failed]
        if not repair or not todo or attempt == ROUNDS:
            break
        _repair(todo, rep, failed)
        trees = read_trees(fs)
    rep.problems += [i.text + failed.get(i.text, "") for i in issues if not i.note]
    rep.notes += [i.text for i in issues if i.note]
    fs.data.flush_data()
    skip = {f"btree:fs.{name}" for name, s in trees.items() if not s.healthy}
    if maps:  # every check below asks the maps what is allocated
        rep.notes.append("engine page checks skipped: an allocation map is damaged")
    else:
        rep.problems += [f"engine: {p}" for p in check_engine(fs.e, data_pages=found["data_pages"],
                                                             reported=reported, skip_roots=skip)]
    if maps or not all(s.healthy for s in trees.values()):  # it reads inodes, extents, names, sums
        unverified = 0
        rep.notes.append("data checksum pass skipped: a tree or allocation map is damaged")
    else:
        unverified = _data_sums(fs, rep, repair)
    rep.counts = {"inodes": len(found["inodes"]), "entries": found["entries"],
                  "data_pages": len(found["data_pages"] - queues.pages - tables.pages),
                  "orphans": len(found["orphans"]), "unverified_data_pages": unverified,
                  **{f"queue_{k}": v for k, v in queues.counts.items()},
                  **{f"table_{k}": v for k, v in tables.counts.items()}}
    return rep


def _queues(fs: FileSystem, repair: bool, maps_damaged: bool) -> QueueCheck:
    """The queue store's pass, when the filesystem has one (``traxfs.fs.queues.check``). With
    a damaged allocation map it only names the pages the store owns (opening the store reads
    the maps), so no later pass takes them for leaked."""
    if not has_queues(fs.e):
        return QueueCheck()
    if maps_damaged:
        return QueueCheck(pages=owned_pages(fs.e), notes=["queue pass skipped: an allocation map is damaged"])
    store = QueueStore(fs.e, background=False)
    try:
        return check_queues(store, repair=repair)
    finally:
        store.close()


def _tables(fs: FileSystem, maps_damaged: bool) -> TableCheck:
    """The table store's pass, when the filesystem has one (``traxfs.fs.tables.check``); with a
    damaged allocation map only the pages it owns (see :func:`_queues`)."""
    if not has_tables(fs.e):
        return TableCheck()
    if maps_damaged:
        return TableCheck(pages=table_pages(fs.e), notes=["table pass skipped: an allocation map is damaged"])
    store = TableStore(fs.e)
    try:
        return check_tables(store)
    finally:
        store.close()


def _data_sums(fs: FileSystem, rep: FsckReport, repair: bool) -> int:
    """Data checksums. Returns the pages inside a file's size that have none (data of a
    filesystem upgraded from format 1: not a problem, but counted)."""
    r = scrub(fs, repair=repair, data_only=True)
    rep.problems += [f"data checksum: {t}" for t in r.unrepairable + r.damaged]
    rep.repaired += [f"data checksum: {t}" for t in r.repaired]
    stale = stale_sums(fs)
    if stale:
        text = f"{len(stale)} checksum(s) kept for pages no file owns: {stale[:10]}"
        if repair:
            _txn(fs, lambda tx: [fs.data.sums.forget(tx, q, 1) for q in stale])()
            rep.repaired.append(text)
        else:
            rep.problems.append(text)
    return r.unverified_pages


def _repair(issues: list[Issue], rep: FsckReport, failed: dict[str, str]) -> None:
    """Run each issue's repair: what worked is listed (a note stays a note), what failed is
    remembered with the reason."""
    for issue in issues:
        try:
            said = issue.fix()
        except Exception as e:  # noqa: BLE001  (report and go on: fsck must finish)
            failed[issue.text] = f" (repair failed: {type(e).__name__}: {e})"
            continue
        (rep.notes if issue.note else rep.repaired).append(f"{issue.text}: {said}" if said else issue.text)


def _scan(fs: FileSystem, trees: dict, unknown_maps: set[int]) -> dict:
    inodes: dict[int, Inode] = {}
    bad_inodes = []
    for k, v in trees["inodes"].entries:
        ino, node = inode_of(k, v)
        if node is None:
            bad_inodes.append(k)
        else:
            inodes[ino] = node
    dirents: list[tuple[int, bytes, int, int]] = []
    dotdot: dict[int, int] = {}
    for k, v in trees["dirents"].entries:
        parent, name = U64.unpack(k[:8])[0], k[8:]
        child, cookie = U64.unpack(v[:8])[0], U64.unpack(v[8:16])[0]
        if name == b"..":
            dotdot[parent] = child
        else:
            dirents.append((parent, name, child, cookie))
    cookies = {}
    for k, v in trees["cookies"].entries:
        cookies[(U64.unpack(k[:8])[0], U64.unpack(k[8:16])[0])] = v
    extents = []
    max_birth = 1
    for k, v in trees["extents"].entries:
        phys, count, birth = unpack_extent(v)
        max_birth = max(max_birth, birth)
        extents.append((U64.unpack(k[:8])[0], U64.unpack(k[8:16])[0], phys, count))
    orphans = {U64.unpack(k)[0] for k, _ in trees["orphans"].entries}
    dead = [(k, U64X2.unpack(k)[1], *DEAD.unpack(v)) for k, v in trees["dead"].entries]
    return {"dead": dead, "max_birth": max_birth, "history_pages": history_pages(trees["hist"].entries),"inodes": inodes, "bad_inodes": bad_inodes, "dirents": dirents, "dotdot": dotdot, "cookies": cookies,
            "extents": extents, "orphans": orphans,
            "data_pages": extent_pages(trees["extents"].entries) | dead_pages(trees["dead"].entries),
            "entries": len(dirents), "meta": trees["meta"].entries, "unknown_maps": unknown_maps}


def _find(fs: FileSystem, f: dict) -> list[Issue]:
    """Everything wrong above the engine (and how to repair it)."""
    out: list[Issue] = []
    inodes: dict[int, Inode] = f["inodes"]
    t = fs.t
    for k in f["bad_inodes"]:
        out.append(Issue(f"inode record {k.hex()} is malformed", _txn(fs, lambda tx, k=k: t["inodes"].delete(tx, k))))
    out += meta_issues(fs, f["meta"], max(inodes, default=ROOT_INO), f["max_birth"])
    if ROOT_INO not in inodes:
        return out + [Issue("the root directory is missing", fs.repair.new_root)]
    if not inodes[ROOT_INO].is_dir:
        return out + [Issue("the root inode is not a directory", None)]
    links: Counter = Counter()
    subdirs: Counter = Counter()
    parent_of: dict[int, int] = {}
    for parent, name, child, cookie in f["dirents"]:
        if child not in inodes or parent not in inodes:
            out.append(Issue(f"entry {name!r} in directory {parent} names missing inode {child}",
                        _txn(fs, lambda tx, p=parent, n=name, c=cookie: (t["dirents"].delete(tx, dirent_key(p, n)),
                                                                         t["cookies"].delete(tx, cookie_key(p, c))))))
            continue
        links[child] += 1
        if inodes[child].is_dir:
            subdirs[parent] += 1
            parent_of[child] = parent
        if f["cookies"].get((parent, cookie)) != name:
            out.append(Issue(f"entry {name!r} in directory {parent} has no readdir cookie {cookie}",
                        _txn(fs, lambda tx, p=parent, n=name, c=cookie: t["cookies"].put(tx, cookie_key(p, c), n))))
    names = {(p, n) for p, n, _, _ in f["dirents"]}
    for (parent, cookie), name in f["cookies"].items():
        if (parent, name) not in names:
            out.append(Issue(f"readdir cookie {cookie} in directory {parent} names no entry ({name!r})",
                        _txn(fs, lambda tx, p=parent, c=cookie: t["cookies"].delete(tx, cookie_key(p, c)))))
    for ino, node in sorted(inodes.items()):
        if node.is_dir and node.nlink:
            want_parent = ROOT_INO if ino == ROOT_INO else parent_of.get(ino)
            if f["dotdot"].get(ino) != want_parent and want_parent is not None:
                out.append(Issue(f"directory {ino}: '..' is {f['dotdot'].get(ino)}, expected {want_parent}",
                            lambda i=ino, p=want_parent: fs.repair.set_parent(i, p)))
        want = (2 + subdirs[ino]) if node.is_dir else links[ino]
        if node.is_dir and ino != ROOT_INO and links[ino] == 0:
            want = 0
        if ino == ROOT_INO:
            want = 2 + subdirs[ino]
        if want == 0 and node.nlink == 0:
            if ino not in f["orphans"]:
                out.append(Issue(f"inode {ino} is unlinked but not on the orphan list",
                                 lambda i=ino: fs.repair.destroy(i)))
            else:
                out.append(Issue(f"inode {ino} is an orphan (unlinked while open, or removed and waiting to be "
                                 "freed, at a crash; the next mount frees it, as --repair does)",
                                 lambda i=ino: fs.repair.destroy(i), note=True))
            continue
        if want == 0 and node.nlink > 0:
            out.append(Issue(f"inode {ino} ({stat.filemode(node.mode)}) is named by no entry (lost)",
                        _lost_found(fs, ino)))
            continue
        if node.nlink != want:
            out.append(Issue(f"inode {ino}: link count {node.nlink}, counted {want}",
                             lambda i=ino, n=want: fs.repair.set_nlink(i, n)))
    owner: dict[int, int] = {}
    allocated, _ = allocated_pages(fs.e)  # the maps read raw from the device
    allocated_set = set(allocated)
    for ino, lpage, phys, count in f["extents"]:
        node = inodes.get(ino)
        if node is None:
            out.append(Issue(f"extent of missing inode {ino} at file page {lpage}",
                             lambda i=ino: fs.repair.truncate(i, 0)))
            continue
        keep = -(-node.size // PAGE_SIZE)
        if lpage + count > keep:
            # preallocation past the end is given back at the last close and at unmount: only
            # a crash leaves some (within the preallocation limit), and that is no error
            if fs.e.crashed and lpage + count <= keep + PREALLOC_PAGES:
                out.append(Issue(f"inode {ino}: {lpage + count - max(lpage, keep)} page(s) preallocated past the "
                                 "size, left by a crash (given back by --repair)",
                                 lambda i=ino, n=node.size: fs.repair.truncate(i, n), note=True))
            else:
                out.append(Issue(f"inode {ino}: extent at file page {lpage} ({count} pages) lies past the size "
                                 f"{node.size}", lambda i=ino, n=node.size: fs.repair.truncate(i, n)))
        if phys < fs.e.first_data_page or phys + count > fs.e.page_count:
            out.append(Issue(f"inode {ino}: extent pages {phys}+{count} outside the data area", None))
            continue
        for q in range(phys, phys + count):
            if q in owner:
                out.append(Issue(f"inode {ino}: page {q} also belongs to inode {owner[q]}", None))
                break
            owner[q] = ino
            if q not in allocated_set and q // BITS_PER_MAP not in f["unknown_maps"]:
                out.append(Issue(f"inode {ino}: page {q} is in an extent but not allocated", None))
                break
    out += _dead_issues(fs, f, owner, allocated_set)
    leaked = _leaked_data(fs, allocated, f["data_pages"])
    if leaked:
        out.append(Issue(f"{len(leaked)} allocated data page(s) belong to no file: {leaked[:10]}", _free(fs, leaked)))
    return out


def history_pages(entries: list[tuple[bytes, bytes]]) -> set[int]:
    """Device pages the extents kept in the history (what snapshots see of changed files) map."""
    out: set[int] = set()
    tid = TREE_ID["extents"]
    for k, v in entries:
        raw = unpack_value(v)
        if k[0] == tid and raw is not None:
            phys, count, _ = unpack_extent(raw)
            out.update(range(phys, phys + count))
    return out


def _dead_issues(fs: FileSystem, f: dict, owner: dict[int, int], allocated: set[int]) -> list[Issue]:
    """The dead list: its pages are allocated and no live file's; each entry is still seen by a
    snapshot (a page of it is in an extent of the history), else it leaked (freed by --repair)."""
    out = []
    needed = f["history_pages"]
    for key, first, count, birth in f["dead"]:
        pages = range(first, first + count)
        if any(q in owner for q in pages):
            out.append(Issue(f"dead-list pages {first}+{count} also belong to a file", None))
        elif any(q not in allocated for q in pages):
            out.append(Issue(f"dead-list pages {first}+{count} are not allocated", None))
        elif not any(q in needed for q in pages):
            out.append(Issue(f"dead-list pages {first}+{count} (born in epoch {birth}) are seen by no snapshot "
                             "(leaked)", _free_dead(fs, key, first, count)))
    missing = sorted(q for q in needed if q not in owner and q not in f["data_pages"])
    if missing:
        out.append(Issue(f"{len(missing)} page(s) a snapshot sees are neither a file's nor on the dead list: "
                         f"{missing[:10]}", None))
    return out


def _free_dead(fs: FileSystem, key: bytes, first: int, count: int):
    def body(tx):
        fs.t["dead"].delete(tx, key)
        fs.e.free_region(tx, first, count)
        fs.data.sums.forget(tx, first, count)
    run = _txn(fs, body)
    return lambda: run() or "freed"


def _leaked_data(fs: FileSystem, allocated: list[int], data_pages: set[int]) -> list[int]:
    """Allocated pages that carry no page header and no extent owns (raw data nobody has)."""
    out = []
    for pid in allocated:
        if pid < fs.e.first_data_page or pid in data_pages:
            continue
        head = fs.e.raw.read(pid * PAGE_SIZE, 2)
        if int.from_bytes(head, "little") != PAGE_MAGIC:
            out.append(pid)
    return out


# ----- repairs: each runs as one transaction ---------------------------------------------------
def _txn(fs: FileSystem, body):
    """A repair of records: ``body(tx)`` with the engine transaction of one filesystem
    transaction."""
    def run():
        with fs.repair.transaction() as ftx:
            body(ftx.tx)
    return run


def _free(fs: FileSystem, pages: list[int]):
    def body(tx):
        for q in pages:
            fs.e.free_page(tx, q)
            fs.data.sums.forget(tx, q, 1)
    run = _txn(fs, body)
    return lambda: run() or "freed"


def _lost_found(fs: FileSystem, ino: int):
    def run():
        try:
            lf = fs.lookup(ROOT_INO, b"lost+found")
        except Exception:  # noqa: BLE001  (absent: create it)
            lf = fs.mkdir(ROOT_INO, b"lost+found", 0o700, 0, 0)
        fs.repair.reattach(ino, lf.ino, f"#{ino}".encode())
    return run

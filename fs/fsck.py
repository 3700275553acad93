"""Checking and repairing a filesystem (an unmounted one): e2fsck's passes, on our trees.

1. the engine: every allocated page's checksum, type and own number; every B+tree's
   invariants (``traxfs.fs.engine.check``), with file data pages exempt from page checks;
2. inodes and directories: every entry names an existing inode; every directory's ``..``
   names the directory holding it; entries and readdir cookies match one to one;
3. link counts: a file's ``nlink`` equals the entries naming it, a directory's is 2 plus its
   subdirectories; an inode no entry names is either an orphan (``nlink`` 0, on the orphan
   list) or lost;
4. extents: inside the page file, allocated, no page owned twice, none past the file's size
   beyond the preallocation window (``datamap.PREALLOC_PAGES``);
   allocated data pages no extent owns are leaked;
5. data checksums: every copy of every written data page matches its checksum
   (``traxfs.fs.scrub``); no checksum is kept for a page no extent owns.

Repairs (``repair=True``), each one transaction: wrong link counts set from the entries;
entries naming missing inodes removed; cookies without entries (and entries without cookies)
rebuilt; lost inodes linked into ``/lost+found``; unlinked inodes destroyed; extents past the
size dropped; leaked data pages freed; a data page's damaged copy rewritten from a good one (a
mirror); checksums of pages no extent owns dropped. Damage to the engine's own pages is reported, not
repaired (recovery from the log is the engine's repair; fsck does not guess at page contents).

Exit codes as e2fsck(8): 0 clean, 1 errors corrected, 4 errors left uncorrected, 8 operational
error.
"""

from __future__ import annotations

import stat
from collections import Counter
from dataclasses import dataclass, field

from traxfs.fs.datamap import PREALLOC_PAGES
from traxfs.fs.engine.check import _allocated, check_engine
from traxfs.fs.engine.page import PAGE_MAGIC, PAGE_SIZE
from traxfs.fs.filesystem import ROOT_INO, FileSystem
from traxfs.fs.records import EXTENT, U64, Inode, cookie_key, dirent_key, ino_key
from traxfs.fs.scrub import scrub, stale_sums

EXIT_CLEAN, EXIT_CORRECTED, EXIT_UNCORRECTED, EXIT_OPERATIONAL = 0, 1, 4, 8


@dataclass
class FsckReport:
    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    counts: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if self.problems:
            return EXIT_UNCORRECTED
        return EXIT_CORRECTED if self.repaired else EXIT_CLEAN

    def as_dict(self) -> dict:
        return {"problems": self.problems, "repaired": self.repaired, "counts": self.counts,
                "exit_code": self.exit_code}


def fsck(fs: FileSystem, repair: bool = False) -> FsckReport:
    """Check ``fs`` (opened, not mounted). With ``repair``, fix what can be fixed; the report
    then lists what was fixed and what is left."""
    rep = FsckReport()
    found = _scan(fs)
    issues = _find(fs, found)
    for text, fix in issues:
        if repair and fix is not None:
            try:
                fix()
                rep.repaired.append(text)
                continue
            except Exception as e:  # noqa: BLE001  (report and go on: fsck must finish)
                text += f" (repair failed: {type(e).__name__}: {e})"
        rep.problems.append(text)
    data_pages = found["data_pages"]
    if repair and rep.repaired:  # second look after repairs: only what is still wrong remains
        found = _scan(fs)
        data_pages = found["data_pages"]
        rep.problems = [t for t, _ in _find(fs, found)]
    fs.data.flush_data()
    rep.problems += [f"engine: {p}" for p in check_engine(fs.e, data_pages=data_pages)]
    unverified = _data_sums(fs, rep, repair)
    rep.counts = {"inodes": len(found["inodes"]), "entries": found["entries"],
                  "data_pages": len(data_pages), "orphans": len(found["orphans"]), "unverified_data_pages": unverified}
    return rep


def _data_sums(fs: FileSystem, rep: FsckReport, repair: bool) -> int:
    """Pass 5: data checksums. Returns the pages inside a file's size that have none (data of a
    filesystem upgraded from format 1: not a problem, but counted)."""
    r = scrub(fs, repair=repair, data_only=True)
    rep.problems += [f"data checksum: {t}" for t in r.unrepairable + r.damaged]
    rep.repaired += [f"data checksum: {t}" for t in r.repaired]
    stale = stale_sums(fs)
    if stale:
        text = f"{len(stale)} checksum(s) kept for pages no file owns: {stale[:10]}"
        fix = _txn(fs, lambda tx: [fs.data.sums.forget(tx, q, 1) for q in stale]) if repair else None
        if fix is not None:
            fix()
            rep.repaired.append(text)
        else:
            rep.problems.append(text)
    return r.unverified_pages


def _scan(fs: FileSystem) -> dict:
    t = fs.t
    inodes = {node.ino: node for node in fs.iter_inodes()}
    dirents: list[tuple[int, bytes, int, int]] = []
    dotdot: dict[int, int] = {}
    for k, v in t["dirents"].items():
        parent, name = U64.unpack(k[:8])[0], k[8:]
        child, cookie = U64.unpack(v[:8])[0], U64.unpack(v[8:16])[0]
        if name == b"..":
            dotdot[parent] = child
        else:
            dirents.append((parent, name, child, cookie))
    cookies = {}
    for k, v in t["cookies"].items():
        cookies[(U64.unpack(k[:8])[0], U64.unpack(k[8:16])[0])] = v
    extents = []
    for k, v in t["extents"].items():
        phys, count = EXTENT.unpack(v)
        extents.append((U64.unpack(k[:8])[0], U64.unpack(k[8:16])[0], phys, count))
    data_pages = set()
    for _, _, phys, count in extents:
        data_pages.update(range(phys, phys + count))
    orphans = {U64.unpack(k)[0] for k in t["orphans"].keys()}
    return {"inodes": inodes, "dirents": dirents, "dotdot": dotdot, "cookies": cookies, "extents": extents,
            "data_pages": data_pages, "orphans": orphans, "entries": len(dirents)}


def _find(fs: FileSystem, f: dict) -> list[tuple[str, object]]:
    """(problem, repair function or None) for everything wrong above the engine."""
    out: list[tuple[str, object]] = []
    inodes: dict[int, Inode] = f["inodes"]
    t = fs.t
    if ROOT_INO not in inodes or not inodes[ROOT_INO].is_dir:
        return [("the root directory is missing or not a directory", None)]
    links: Counter = Counter()
    subdirs: Counter = Counter()
    parent_of: dict[int, int] = {}
    for parent, name, child, cookie in f["dirents"]:
        if child not in inodes or parent not in inodes:
            out.append((f"entry {name!r} in directory {parent} names missing inode {child}",
                        _txn(fs, lambda tx, p=parent, n=name, c=cookie: (t["dirents"].delete(tx, dirent_key(p, n)),
                                                                         t["cookies"].delete(tx, cookie_key(p, c))))))
            continue
        links[child] += 1
        if inodes[child].is_dir:
            subdirs[parent] += 1
            parent_of[child] = parent
        if f["cookies"].get((parent, cookie)) != name:
            out.append((f"entry {name!r} in directory {parent} has no readdir cookie {cookie}",
                        _txn(fs, lambda tx, p=parent, n=name, c=cookie: t["cookies"].put(tx, cookie_key(p, c), n))))
    names = {(p, n) for p, n, _, _ in f["dirents"]}
    for (parent, cookie), name in f["cookies"].items():
        if (parent, name) not in names:
            out.append((f"readdir cookie {cookie} in directory {parent} names no entry ({name!r})",
                        _txn(fs, lambda tx, p=parent, c=cookie: t["cookies"].delete(tx, cookie_key(p, c)))))
    for ino, node in sorted(inodes.items()):
        if node.is_dir and node.nlink:
            want_parent = ROOT_INO if ino == ROOT_INO else parent_of.get(ino)
            if f["dotdot"].get(ino) != want_parent and want_parent is not None:
                out.append((f"directory {ino}: '..' is {f['dotdot'].get(ino)}, expected {want_parent}",
                            _txn(fs, lambda tx, i=ino, p=want_parent: fs._set_parent(tx, i, p))))
        want = (2 + subdirs[ino]) if node.is_dir else links[ino]
        if node.is_dir and ino != ROOT_INO and links[ino] == 0:
            want = 0
        if ino == ROOT_INO:
            want = 2 + subdirs[ino]
        if want == 0 and node.nlink == 0:
            if ino not in f["orphans"]:
                out.append((f"inode {ino} is unlinked but not on the orphan list", _destroy(fs, ino)))
            else:
                out.append((f"inode {ino} is an orphan (unlinked while open at a crash)", _destroy(fs, ino)))
            continue
        if want == 0 and node.nlink > 0:
            out.append((f"inode {ino} ({stat.filemode(node.mode)}) is named by no entry (lost)",
                        _lost_found(fs, ino)))
            continue
        if node.nlink != want:
            out.append((f"inode {ino}: link count {node.nlink}, counted {want}", _set_nlink(fs, ino, want)))
    owner: dict[int, int] = {}
    fs.e.buffer.write_back()  # the maps are read raw from the device
    allocated, _ = _allocated(fs.e)
    allocated_set = set(allocated)
    for ino, lpage, phys, count in f["extents"]:
        node = inodes.get(ino)
        if node is None:
            out.append((f"extent of missing inode {ino} at file page {lpage}", _drop_extents(fs, ino)))
            continue
        if lpage * PAGE_SIZE >= node.size + PREALLOC_PAGES * PAGE_SIZE:  # past any preallocation
            out.append((f"inode {ino}: extent at file page {lpage} lies past the size {node.size}",
                        _truncate(fs, ino, node.size)))
        if phys < fs.e.alloc.first_data or phys + count > fs.e.sb.page_count:
            out.append((f"inode {ino}: extent pages {phys}+{count} outside the data area", None))
            continue
        for q in range(phys, phys + count):
            if q in owner:
                out.append((f"inode {ino}: page {q} also belongs to inode {owner[q]}", None))
                break
            owner[q] = ino
            if q not in allocated_set:
                out.append((f"inode {ino}: page {q} is in an extent but not allocated", None))
                break
    leaked = _leaked_data(fs, allocated, f["data_pages"])
    if leaked:
        out.append((f"{len(leaked)} allocated data page(s) belong to no file: {leaked[:10]}", _free(fs, leaked)))
    return out


def _leaked_data(fs: FileSystem, allocated: list[int], data_pages: set[int]) -> list[int]:
    """Allocated pages that carry no page header and no extent owns (raw data nobody has)."""
    base = fs.e.sb.pages_offset
    out = []
    for pid in allocated:
        if pid < fs.e.alloc.first_data or pid in data_pages:
            continue
        head = fs.e.dev.read(base + pid * PAGE_SIZE, 2)
        if int.from_bytes(head, "little") != PAGE_MAGIC:
            out.append(pid)
    return out


# ----- repairs: each runs as one transaction ---------------------------------------------------
def _txn(fs: FileSystem, body):
    """A repair: ``body(tx)`` inside one filesystem transaction."""
    def run():
        with fs._lock, fs._txn() as tx:
            body(tx)
    return run


def _destroy(fs: FileSystem, ino: int):
    def run():
        with fs._lock:
            fs._destroy(fs._get(ino))
    return run


def _set_nlink(fs: FileSystem, ino: int, n: int):
    def body(tx):
        node = fs._copy(ino)
        node.nlink = n
        fs._put(tx, node)
    return _txn(fs, body)


def _truncate(fs: FileSystem, ino: int, size: int):
    return _txn(fs, lambda tx: fs.data.truncate(tx, ino, size))


def _drop_extents(fs: FileSystem, ino: int):
    return _txn(fs, lambda tx: fs.data.truncate(tx, ino, 0))


def _free(fs: FileSystem, pages: list[int]):
    def body(tx):
        for q in pages:
            fs.e.alloc.free_region(tx, q, 1)
            fs.data.sums.forget(tx, q, 1)
    return _txn(fs, body)


def _lost_found(fs: FileSystem, ino: int):
    def run():
        try:
            lf = fs.lookup(ROOT_INO, b"lost+found")
        except Exception:  # noqa: BLE001  (absent: create it)
            lf = fs.mkdir(ROOT_INO, b"lost+found", 0o700, 0, 0)
        with fs._lock, fs._txn() as tx:
            node = fs._copy(ino)
            p = fs._copy(lf.ino)
            fs._add_entry(tx, p, f"#{ino}".encode(), ino)
            if node.is_dir:
                p.nlink += 1
                fs._set_parent(tx, ino, lf.ino)
            fs._put(tx, p)
            node.nlink = max(node.nlink, 1)
            fs._put(tx, node)
            fs.t["orphans"].delete(tx, ino_key(ino))
    return run

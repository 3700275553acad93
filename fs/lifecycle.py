"""A filesystem's life: formatting, opening (the damage look, recovery's follow-up, the format
upgrade), and closing cleanly or as a crash would."""

from __future__ import annotations

import logging
import stat
from typing import TYPE_CHECKING

from ..volume.overlay import OverlayDevice
from .engine.engine import Engine
from .engine.logmanager import GroupCommitPolicy
from .engine.page import PageCorrupt
from .errors import FsDamaged, NotTraxfs
from .inodes import Inodes
from .keys import U64, Inode, dirent_key, ino_key
from .lifetime import Lifetime
from .limits import ROOT_INO, now_ns
from .queues.frozen import FrozenQueues
from .tables.frozen import FrozenTables
from .tables.subtree import TablesSubtree
from .trees import FORMAT_ADDED, KEY_NEXT_INO, VERSION, create_trees, open_trees, upgrade

if TYPE_CHECKING:
    from .filesystem import FileSystem

log = logging.getLogger("traxfs.fs")


def mkfs(cls: type[FileSystem], dev, *, log_size: int | None, label: str, where: str) -> str:
    """Format ``dev`` with an empty filesystem (see ``FileSystem.mkfs``); returns its UUID."""
    where = where or dev.path
    if len(label.encode()) > 32:
        raise ValueError(f"{where}: label {label!r} is longer than 32 bytes")
    if log_size is None:
        log_size = min(256 << 20, max(16 << 20, dev.size // 16))
    Engine.format(dev, log_size=log_size, name=where)
    eng = Engine.open(dev, name=where)
    try:
        tx = eng.begin()
        trees, sb = create_trees(eng, tx, label)
        trees["inodes"].put(tx, ino_key(ROOT_INO), empty_root().pack())
        trees["dirents"].put(tx, dirent_key(ROOT_INO, b".."), U64.pack(ROOT_INO) + U64.pack(0))
        trees["meta"].put(tx, KEY_NEXT_INO, U64.pack(ROOT_INO + 1))
        eng.commit(tx)
        cls(eng, trees, sb).close()
    except BaseException:
        if not eng.closed:
            eng.unclean_shutdown()
        raise
    return sb.uuid


def empty_root() -> Inode:
    """The root directory of a new filesystem (also fsck's replacement of a lost one)."""
    now = now_ns()
    return Inode(ROOT_INO, stat.S_IFDIR | 0o755, 0, 0, 2, atime_ns=now, mtime_ns=now, ctime_ns=now, crtime_ns=now)


def look_for_damage(engine: Engine, where: str, checking: bool) -> None:
    """Mount's quick look (on the probe engine): the catalog, every tree's header and root, the
    superblock record, the allocation maps, and the damage mark the engine keeps. Refuses with
    :class:`FsDamaged`."""
    try:
        trees, _ = open_trees(engine, where, checking)
        if checking:
            return
        for tree in trees.values():
            tree.verify_root()
        for pid in engine.engine_pages()[1:]:  # the allocation maps (every allocation reads them)
            with engine.page(pid):
                pass
    except PageCorrupt as e:
        if checking:
            raise NotTraxfs(f"{where}: {e}: the filesystem's trees cannot be found; fsck cannot check it") from None
        raise FsDamaged(where, str(e)) from None
    if engine.sb.errors and not checking:
        raise FsDamaged(where, f"{engine.sb.errors} damaged page(s) met while it was in use, the first page "
                               f"{engine.sb.error_page}")


def open_fs(cls: type[FileSystem], dev, *, commit_interval: float, buffer_pages: int, where: str,
            checking: bool) -> FileSystem:
    """Open the filesystem on ``dev`` (see ``FileSystem.open``)."""
    if not 0 < commit_interval < float("inf"):  # the flusher waits commit_interval / 2 per round
        raise ValueError(f"commit interval must be a positive number of seconds (got {commit_interval})")
    where = where or dev.path
    try:
        # a look only (record_damage=False): what it finds is said below, once
        probe = Engine.open(OverlayDevice(dev), name=where, buffer_pages=buffer_pages, record_damage=False)
    except PageCorrupt as e:  # recovery (undoing a loser) met a damaged page
        raise FsDamaged(where, f"{e}, met by recovery") from None
    try:
        look_for_damage(probe, where, checking)
    finally:
        probe.unclean_shutdown()
    policy = GroupCommitPolicy(max_commits=1 << 30, max_bytes=4 << 20, max_delay=commit_interval)
    eng = Engine.open(dev, name=where, buffer_pages=buffer_pages, policy=policy, record_damage=not checking)
    try:
        trees, sb = open_trees(eng, where, checking)
        if sb is not None and sb.version < VERSION:
            old = sb.version
            trees, sb = upgrade(eng, trees, sb)
            added = ", ".join(FORMAT_ADDED[v] for v in range(old + 1, VERSION + 1))
            unverified = ("; data written before has no checksums and reads of it count as unverified until it is "
                          "rewritten") if old == 1 else ""
            log.warning("%s: filesystem format upgraded from version %d to %d (%s)%s", where, old, VERSION, added,
                        unverified)
        fs = cls(eng, trees, sb)
        resolve_pending(fs.inodes)  # overwrite intents a crash left: part of recovery, also for fsck
        if not checking:
            tables = TablesSubtree(eng)  # its store opens at first use (fsck opens one itself)
            fs.add_subtree(tables)
            tables.snapshots = fs.snapshots  # snapshots freeze the tables (fs/tables/frozen.py)
            fs.snapshots.holders.append(tables)
            fs.snapshot_dir.tables = FrozenTables(tables)
            fs.queues.snapshots = fs.snapshots  # ... and the queues (fs/queues/frozen.py)
            fs.snapshots.holders.append(fs.queues)
            fs.snapshot_dir.queues = FrozenQueues(fs.queues)
            fs.snapshots.finish()  # deletes a stop interrupted
            fs.lifetime.reap_orphans()
            if eng.crashed:
                fs.lifetime.give_back_after_crash()
        fs.inodes.start_flusher(commit_interval / 2)
        if not checking:
            fs.queues.start(commit_interval)
            fs.reaper.start()
    except PageCorrupt as e:
        eng.unclean_shutdown()
        raise FsDamaged(where, str(e)) from None
    except BaseException:
        eng.unclean_shutdown()
        raise
    return fs


def resolve_pending(inodes: Inodes) -> int:
    """At open: settle the checksums of overwrites a crash interrupted (``DataSums``: pending
    pages; ``DataMarks``: every page of a group marked for overwrites)."""
    with inodes.lock, inodes.transaction() as ftx:
        # the marked groups first: their pending pages are settled with them
        return inodes.data.marks.settle(ftx.tx) + inodes.data.sums.resolve_pending(ftx.tx)


def close(inodes: Inodes, lifetime: Lifetime) -> None:
    """Clean shutdown: preallocations given back, in-memory inodes logged, data flushed, the
    engine checkpointed and stopped."""
    if inodes.closed:
        return
    for ino in list(inodes.data.preallocated):
        lifetime.give_back(ino)
    inodes.flush()  # the inodes and their sums: then no group holds an unlogged sum ...
    inodes.flush(unmark_all=True)  # ... and every mark goes
    with inodes.lock:
        inodes.close()
        inodes.data.flush_data()
        inodes.e.close()


def crash(inodes: Inodes) -> None:
    """Stop without writing anything more (tests: as if the process had died)."""
    with inodes.lock:
        inodes.close()
        inodes.e.unclean_shutdown()

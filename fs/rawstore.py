"""Everything a store of raw pages asks of the engine, in one place: the queue store
(``fs/queues``) and the table store (``fs/tables``) both stand on it.

Such a store keeps its blocks (queue segments, PAX pages) in engine pages used raw (bytes
written outside the log, like file data) and its indexes in engine B+trees. This module is the
only one of those stores that calls the engine, and only its public face: transactions, region
allocation with its claim for raw bytes, frees that wait for durability, raw reads and writes of pages (``engine.raw``), and
ordered mode — a log barrier that makes every block write durable before any log record that
may describe it is written.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable

from .engine.alloc import NoSpace
from .engine.logmanager import LogFull
from .engine.page import PAGE_SIZE
from .errors import FsError
from .struct.btree import KIND, BTree
from .struct.btree_salvage import salvage


def refuse_if_held(kind: str, name: bytes, frozen: dict[int, dict[bytes, object]],
                   snapshot_name: Callable[[int], bytes | None]) -> None:
    """EBUSY, naming the snapshots, when any live snapshot froze ``name`` (``frozen``: snapshot
    epoch → the names it froze): a store removes nothing a snapshot still shows."""
    held = [n for n in map(snapshot_name, sorted(e for e, f in frozen.items() if name in f)) if n is not None]
    if held:
        raise FsError(errno.EBUSY, f"{kind} {name.decode(errors='replace')!r} is held by snapshot(s) "
                                   f"{', '.join(repr(n.decode(errors='replace')) for n in held)}: delete them first")


def has_trees(engine, names: tuple[str, ...], prefix: str) -> bool:
    """Does ``engine``'s catalog hold the B+trees ``PREFIX.NAME`` (a store was made on it)?"""
    return all(tree_headers(engine, names, prefix).values())


def tree_headers(engine, names: tuple[str, ...], prefix: str) -> dict[str, int | None]:
    """The header page of each B+tree ``PREFIX.NAME`` in ``engine``'s catalog (None: missing)."""
    return {name: engine.get_root(f"{KIND}:{prefix}.{name}") or None for name in names}


def owned_pages(engine, names: tuple[str, ...], prefix: str, extents) -> set[int]:
    """Every page a store of raw pages owns — its trees' ``PREFIX.NAME`` and its ``extents``
    (entries with ``page`` and ``pages``) —, read as far as the trees can be read, without
    opening the store: fsck's damage pass frees what no structure owns, and must not take these."""
    out: set[int] = set()
    for header in tree_headers(engine, names, prefix).values():
        if header is not None:
            out |= salvage(engine, header).pages
    for e in extents:
        out.update(range(e.page, e.page + e.pages))
    return out


class EngineIO:
    def __init__(self, engine):
        self.e = engine
        self.raw = engine.raw
        self._lock = threading.Lock()
        self._written = 0  # block writes completed (a generation)
        self._flushed = 0  # generation the last device flush covered
        self.stats = {"block_bytes_written": 0, "block_bytes_read": 0, "device_flushes": 0}
        engine.add_log_barrier(self._barrier)

    def close(self) -> None:
        """The store stops: its barrier leaves the engine's log."""
        self.e.remove_log_barrier(self._barrier)

    # ----- ordered mode -------------------------------------------------------------------------
    def _barrier(self) -> None:
        """Before a log write: flush the device if blocks were written since the last flush, so
        no record that describes them (a block's ``used``) reaches the disk before their bytes."""
        with self._lock:
            target = self._written
            if self._flushed >= target:
                return
        self.raw.flush()
        with self._lock:
            self._flushed = max(self._flushed, target)
            self.stats["device_flushes"] += 1

    def make_durable(self) -> None:
        """Every block written and every record logged so far on disk (an fsync)."""
        self.e.make_durable()  # the barrier flushes the blocks first

    # ----- transactions -------------------------------------------------------------------------
    def begin(self):
        return self.e.begin()

    def commit(self, tx, durable: bool = False) -> None:
        """Commit ``tx`` softly (durable within the log's group-commit delay), or with
        ``durable`` once its records are on disk."""
        self.e.commit(tx, durable=durable)

    def abort(self, tx) -> None:
        self.e.abort(tx)

    def failure(self, ex: BaseException) -> FsError | None:
        """The errno an engine refusal means for the user (out of space), or None."""
        if isinstance(ex, NoSpace):
            return FsError(errno.ENOSPC, f"the volume is full: {ex}")
        if isinstance(ex, LogFull):
            return FsError(errno.ENOSPC, f"the log is full: {ex}")
        return None

    # ----- space --------------------------------------------------------------------------------
    def allocate(self, tx, pages: int) -> int:
        """``pages`` contiguous pages aligned to their count (a block), claimed for raw bytes;
        the first page. Raises the engine's NoSpace (see :meth:`failure`)."""
        first = self.e.alloc_region(tx, pages, pages)
        self.raw.claim(first, pages)
        return first

    def free(self, tx, first: int, pages: int) -> None:
        """Free a block when ``tx`` commits; reusable once that commit is durable (so no new
        owner's bytes can land there while a crash could still bring the block back)."""
        self.e.free_region(tx, first, pages)

    def free_pages(self) -> int:
        return self.e.free_pages()

    def is_allocated(self, page: int) -> bool:
        return self.e.is_allocated(page)

    # ----- bytes --------------------------------------------------------------------------------
    def write(self, page: int, at: int, data) -> None:
        """Write ``data`` at byte ``at`` of the block starting at ``page``."""
        self.raw.write(page * PAGE_SIZE + at, data)
        with self._lock:
            self._written += 1
            self.stats["block_bytes_written"] += len(data)

    def read(self, page: int, length: int) -> bytes:
        """The first ``length`` bytes of the block starting at ``page``."""
        with self._lock:
            self.stats["block_bytes_read"] += length
        return self.raw.read(page * PAGE_SIZE, length)

    def good_copy(self, page: int, length: int, ok: Callable[[bytes], bool], what: str) -> bytes | None:
        """A mirror leg's copy of a block's first ``length`` bytes that passes ``ok`` (the
        damaged legs are rewritten from it); None without one."""
        found = self.raw.good_copy(page * PAGE_SIZE, length, ok, what)
        return None if found is None else found[0]

    # ----- trees --------------------------------------------------------------------------------
    def trees(self, names: tuple[str, ...], prefix: str) -> dict[str, BTree]:
        """The B+trees ``PREFIX.NAME`` from the engine's catalog, created (one durable
        transaction) where missing."""
        found = {name: BTree.open_named(self.e, f"{prefix}.{name}") for name in names}
        missing = [name for name, tree in found.items() if tree is None]
        if missing:
            tx = self.e.begin()
            for name in missing:
                found[name] = BTree.create(self.e, tx, f"{prefix}.{name}")
            self.e.commit(tx)
        return found

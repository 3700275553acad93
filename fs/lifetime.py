"""How long an inode lives: references, open handles, preallocation given back, orphans.

An inode whose link count drops to zero is put on the ``orphans`` tree in the same transaction.
It is destroyed (data freed) when nobody references it any more — the FUSE layer counts the
kernel's lookups and open handles through :meth:`Lifetime.ref` / :meth:`Lifetime.unref` — or, if
the daemon died with it open, at the next mount (:meth:`Lifetime.reap_orphans`).

**Reference counts have their own small lock**, held only to change a count: ``ref`` and
``unref`` run on the FUSE reader threads for every lookup and readdir entry, and must never wait
behind another thread that holds the metadata lock across page misses or a large file's
destruction. ``unref`` therefore only counts: when it drops the last reference of an inode
unlinked meanwhile it says so, and the caller then runs :meth:`Lifetime.collect`, which destroys
the inode under the inode's lock and the metadata lock — through the mount, the reaper's thread
runs it, for a batch at a time (:meth:`Lifetime.collect_all`, ``fs/reaper.py``). Which inodes were unlinked is a hint
kept under the same small lock (:meth:`Lifetime.note_unlinked`); ``collect`` checks the tree.

**Preallocation** past a file's end (``DataMap.allocate``) is given back at the file's last
close — at the ``flush`` of its only handle, which close(2) waits for, else at the release of the
last —, at unmount, and at the first mount after a crash.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import ExitStack

from .engine.page import PAGE_SIZE
from .inode_locks import InodeLocks
from .inodes import Inodes
from .keys import U64, Inode, ino_key, prefix_range, unpack_extent


def _unheard(ino: int) -> None:
    """Nobody caches attributes (no mount): nobody to tell."""

class Lifetime:
    def __init__(self, inodes: Inodes, ilocks: InodeLocks) -> None:
        self.inodes = inodes
        self.t = inodes.t
        self.data = inodes.data
        self._ilocks = ilocks
        self._counts = threading.Lock()  # the small lock: refs, handles and the unlinked hint
        self._refs: dict[int, int] = {}
        self._handles: dict[int, int] = {}  # open file handles per inode (a subset of the refs)
        self._unlinked: set[int] = set()  # link count dropped to zero: destroyed at the last unref
        # told of an inode whose attributes changed without a request that changed them (the
        # FUSE adapter tells the kernel, whose cached copy would be stale): preallocation given back
        self.attributes_changed: Callable[[int], None] = _unheard

    # ----- references (the small lock only) -----------------------------------------------------
    def ref(self, ino: int, n: int = 1) -> None:
        with self._counts:
            self._refs[ino] = self._refs.get(ino, 0) + n

    def unref(self, ino: int, n: int = 1) -> bool:
        """Drop ``n`` references. True: that was the last one of an inode unlinked meanwhile;
        run :meth:`collect` (in a worker: it may take long)."""
        with self._counts:
            left = self._refs.get(ino, 0) - n
            if left > 0:
                self._refs[ino] = left
                return False
            self._refs.pop(ino, None)
            return ino in self._unlinked

    def note_unlinked(self, ino: int) -> None:
        """``ino``'s link count drops to zero in a transaction about to commit."""
        with self._counts:
            self._unlinked.add(ino)

    def open_handle(self, ino: int) -> None:
        """An open file handle: a reference, also counted apart so that the last close can give
        back what was preallocated past the file's end."""
        with self._counts:
            self._handles[ino] = self._handles.get(ino, 0) + 1
            self._refs[ino] = self._refs.get(ino, 0) + 1

    def only_handle(self, ino: int) -> bool:
        """Cheap (no lock): is one handle of ``ino`` open, no more?"""
        return self._handles.get(ino) == 1

    def close_handle(self, ino: int) -> bool:
        """The kernel dropped an open handle (its reference is still held: :meth:`unref` it).
        True if it was the last."""
        with self._counts:
            left = self._handles.get(ino, 0) - 1
            if left > 0:
                self._handles[ino] = left
                return False
            self._handles.pop(ino, None)
            return True

    def referenced(self) -> int:
        return len(self._refs)

    # ----- destruction (inode lock and metadata lock) -------------------------------------------
    def collect(self, ino: int) -> None:
        """Destroy ``ino`` if nothing references it and no entry names it."""
        self.collect_all([ino])

    def collect_all(self, inos: list[int]) -> None:
        """:meth:`collect` for several inodes, those to destroy in one transaction (the reaper's
        batches: ``fs/reaper.py``). Their inode locks are taken in ascending order, then the
        metadata lock — none for an inode still referenced (an unlink through the mount: the
        kernel's reference goes with its FORGET, whose ``unref`` collects it then)."""
        with self._counts:
            inos = sorted({ino for ino in inos if not self._refs.get(ino)})
        if not inos:
            return
        with ExitStack() as held:
            for ino in inos:
                held.enter_context(self._ilocks.exclusive(ino))
            with self.inodes.lock:
                doomed = [node for node in map(self._doomed, inos) if node is not None]
                if not doomed:
                    return
                with self.inodes.transaction() as ftx:
                    pages: list[tuple[int, int]] = []  # all their pages, freed at once
                    for node in doomed:
                        self._free(ftx, node, pages)
                    self.data.free_runs(ftx.tx, pages)
                for node in doomed:
                    self.inodes.drop(node.ino)

    def _doomed(self, ino: int) -> Inode | None:
        """``ino`` if it is to be destroyed now: unreferenced, no link left (locks held)."""
        with self._counts:
            if self._refs.get(ino) or self.inodes.closed:
                return None
            self._unlinked.discard(ino)
        raw = self.t["inodes"].get(ino_key(ino))
        if raw is None:
            return None
        node = Inode.unpack(ino, raw)
        return None if node.nlink else node

    def destroy(self, node: Inode) -> None:
        """Free the inode and everything it holds, in one transaction (the caller holds the
        metadata lock)."""
        with self.inodes.transaction() as ftx:
            self._free(ftx, node)
        self.inodes.drop(node.ino)

    def _free(self, ftx, node: Inode, later: list | None = None) -> None:
        """Delete ``node``'s records and free its pages in ``ftx`` (``later``: as
        ``DataMap.release``)."""
        ino = node.ino
        if node.is_reg:
            self.data.truncate(ftx, ino, 0, later)
        keyed = [self.t["xattrs"]]
        if node.is_link:  # only a symbolic link has target chunks (``Namespace.create``)
            keyed.append(self.t["symlinks"])
        for tree in keyed:
            for k in list(tree.keys(*prefix_range(ino))):
                tree.delete(ftx.tx, k)
        self.t["inodes"].delete(ftx.tx, ino_key(ino))
        self.t["orphans"].delete(ftx.tx, ino_key(ino))

    def reap_orphans(self) -> int:
        """At mount: destroy inodes that were unlinked while open when the daemon stopped."""
        n = 0
        with self.inodes.lock:
            for k in list(self.t["orphans"].keys()):
                raw = self.t["inodes"].get(k)
                ino = U64.unpack(k)[0]
                if raw is None:
                    with self.inodes.transaction() as ftx:
                        self.t["orphans"].delete(ftx.tx, k)
                    continue
                node = Inode.unpack(ino, raw)
                if node.nlink == 0:
                    self.destroy(node)
                    n += 1
        return n

    # ----- preallocation ------------------------------------------------------------------------
    def give_back(self, ino: int) -> int:
        """Free the pages preallocated past the end of ``ino`` (one transaction, which logs the
        inode's in-memory size too); returns the pages freed. A file grown by appends keeps
        its preallocation while open, and takes its size rounded up to pages once closed."""
        if ino not in self.data.preallocated:
            return 0
        with self._ilocks.exclusive(ino), self.inodes.lock:
            self.data.preallocated.discard(ino)
            if self.inodes.closed or not self.inodes.exists(ino):
                return 0  # closed meanwhile, or destroyed (its pages went with it)
            node = self.inodes.copy(ino)
            with self.inodes.transaction() as ftx:
                freed = self.data.truncate(ftx, ino, node.size)
                if self.inodes.is_dirty(ino):
                    self.inodes.put(ftx, node)
        if freed:
            self.attributes_changed(ino)  # its blocks (outside the locks: it may call the kernel)
        return freed

    def give_back_after_crash(self) -> int:
        """At mount after an unclean stop: files open then may hold pages preallocated past
        their end (given back at a last close that never came). One pass over the extents tree
        (in inode order) finds them; each is given back. Returns the pages freed."""
        def past_end(ino: int, end: int) -> bool:
            raw = self.t["inodes"].get(ino_key(ino))
            return raw is not None and end > -(-Inode.unpack(ino, raw).size // PAGE_SIZE)

        found: list[int] = []
        ino, end = None, 0
        for k, v in self.t["extents"].items():
            key_ino = U64.unpack(k[:8])[0]
            if key_ino != ino:
                if ino is not None and past_end(ino, end):
                    found.append(ino)
                ino, end = key_ino, 0
            end = max(end, U64.unpack(k[8:16])[0] + unpack_extent(v)[1])
        if ino is not None and past_end(ino, end):
            found.append(ino)
        self.data.preallocated.update(found)
        return sum(self.give_back(i) for i in found)

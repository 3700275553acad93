"""The repairs fsck makes through the filesystem (``fs.repair``): each keeps the inode cache, the
cached extent maps and the reference counts true, as the operations' own code does. Each call is
one transaction, under the metadata lock; :meth:`Repair.transaction` is for repairs of records
below the filesystem's meaning (tree entries, allocation maps, checksums)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .history import HistoryTree
from .inodes import FsTransaction, Inodes
from .keys import ino_key
from .lifecycle import empty_root
from .lifetime import Lifetime
from .limits import ROOT_INO
from .namespace import Namespace


class Repair:
    def __init__(self, inodes: Inodes, namespace: Namespace, lifetime: Lifetime) -> None:
        self.inodes = inodes
        self.namespace = namespace
        self.lifetime = lifetime

    @contextmanager
    def transaction(self) -> Iterator[FsTransaction]:
        """One filesystem transaction under the metadata lock: committed at the end, rolled back
        on any error. Give the engine and the trees ``ftx.tx``."""
        with self.inodes.lock, self.inodes.transaction() as ftx:
            yield ftx

    def set_nlink(self, ino: int, n: int) -> None:
        with self.transaction() as ftx:
            node = self.inodes.copy(ino)
            node.nlink = n
            self.inodes.put(ftx, node)

    def set_parent(self, ino: int, parent: int) -> None:
        """Directory ``ino``'s ``..`` names ``parent``."""
        with self.transaction() as ftx:
            self.namespace.set_parent(ftx, ino, parent)

    def new_root(self) -> None:
        """An empty root directory in place of a lost one."""
        with self.transaction() as ftx:
            self.inodes.put(ftx, empty_root())
            self.namespace.set_parent(ftx, ROOT_INO, ROOT_INO)

    def reattach(self, ino: int, parent: int, name: bytes) -> None:
        """Give inode ``ino``, which no entry names, the entry ``name`` in directory ``parent``
        (a directory's ``..`` too); it is no orphan any more."""
        with self.transaction() as ftx:
            node = self.inodes.copy(ino)
            p = self.inodes.copy(parent)
            self.namespace.add_entry(ftx, p, name, ino)
            if node.is_dir:
                p.nlink += 1
                self.namespace.set_parent(ftx, ino, parent)
            self.inodes.put(ftx, p)
            node.nlink = max(node.nlink, 1)
            self.inodes.put(ftx, node)
            self.inodes.t["orphans"].delete(ftx.tx, ino_key(ino))

    def destroy(self, ino: int) -> None:
        """Free inode ``ino`` and everything it holds."""
        with self.inodes.lock:
            self.lifetime.destroy(self.inodes.get(ino))

    def truncate(self, ino: int, size: int) -> None:
        """Drop the extents of ``ino`` past ``size`` (all of them for 0), freeing their pages."""
        with self.transaction() as ftx:
            self.inodes.data.truncate(ftx, ino, size)

    def replace_tree(self, name: str, tree) -> None:
        """A rebuilt tree ``name``: used from now on."""
        data = self.inodes.data
        with self.inodes.lock:
            trees = self.inodes.t
            if isinstance(trees.get(name), HistoryTree):  # a versioned tree keeps its history wrapper
                trees[name].tree = tree
                tree = trees[name]
            elif name in ("hist", "hist_epochs"):
                for wrapper in trees.values():
                    if isinstance(wrapper, HistoryTree):
                        setattr(wrapper, name, tree)
            elif name == "dead":
                data.dead = tree
            trees[name] = tree
            if name == "extents":
                data.tree = tree
                data.forget_all()
            elif name == "datasums":
                data.sums.tree = tree
            elif name == "datapending":
                data.sums.pending_tree = tree
            elif name == "datamarked":
                data.marks.tree = tree

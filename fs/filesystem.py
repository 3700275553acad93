"""The POSIX filesystem on the transactional engine, independent of FUSE: the façade.

``FileSystem`` is what the FUSE adapter, the tools and the tests call. It holds the parts, each
with one job, and routes every call to the part that does it:

==================  =============================================================================
``lifecycle``       mkfs, open (the damage look, the format upgrade, recovery's follow-up), close
``inodes``          transactions, the inode cache and its flusher, the metadata lock
``namespace``       lookup, readdir, readlink, create, link, unlink, rmdir, rename
``attributes``      setattr
``filedata``        read, write, truncate, ``SEEK_DATA``/``SEEK_HOLE``, fsync, open files
``lifetime``        references, open handles, preallocation given back, orphans, destruction
``xattrs``          extended attributes
``status``          statfs and the counters of ``/.trax``
``repair``          what fsck changes through the filesystem
``subtrees``        parts of the namespace served by others (``/.trax``, ``/.snapshots``, ``/queues``)
==================  =============================================================================

Every metadata operation is one engine transaction: it either happens whole or not at all,
across crashes too. Transactions are committed *softly* (the commit record is in the log buffer,
locks are released early); the log daemon makes them durable within ``commit_interval`` seconds
(the periodic commit that bounds what an unclean stop loses), and ``fsync`` forces the log at
once (group commit: concurrent fsyncs share one flush). Data bytes go straight to the volume,
in ordered mode (``fs/datamap.py``).

**Subtrees** (``fs/subtrees/protocol.py``): an operation on an inode a subtree owns goes to that
subtree, with the :class:`Caller` of the request; the root's entries of the subtrees are
listed before the tree's own, and their names cannot be created, removed or renamed in the root.
(mkfs made a plain ``queues`` directory before the subtree existed: the subtree's name hides it.)
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator

from . import lifecycle
from .attributes import Attributes
from .datamap import DataMap
from .datamarks import DataMarks
from .datasums import DataSums
from .engine.engine import Engine
from .errors import FsError
from .extent_report import NAME as EXTENTS_XATTR
from .extent_report import extents_report
from .filedata import FileData, FileHandle
from .history import TREE_ID, VERSIONED, HistoryTree
from .inode_flags import FS_APPEND_FL, FS_IMMUTABLE_FL, InodeFlags
from .inode_locks import InodeLocks
from .inodes import Inodes
from .keys import DOT_COOKIE, DOTDOT_COOKIE, DOTS, U64, Inode
from .lifetime import Lifetime
from .limits import ROOT_INO
from .namespace import Namespace
from .queues.subtree import Queues
from .reaper import Reaper
from .repair import Repair
from .snapshot_store import SnapshotStore, load_chain
from .snapshot_view import SnapshotView
from .status import StatFs, statfs, status
from .subtrees.protocol import TAG_SHIFT, Caller, OpenFile, Subtree, check_tag
from .subtrees.snapshots import Snapshots
from .subtrees.status_files import StatusFiles
from .xattrs import Xattrs

NOBODY = Caller()  # the caller of calls made without one (tools, tests): no process to tell apart
WRITE_ACCESS = os.O_WRONLY | os.O_RDWR


class FileSystem:
    # ----- life ---------------------------------------------------------------------------------
    @staticmethod
    def mkfs(dev, *, log_size: int | None = None, label: str = "", where: str = "") -> str:
        """Format ``dev`` (an open volume or image device) with an empty filesystem; returns
        its UUID. Everything on the device is lost. Errors name ``where`` (default: the
        device's path)."""
        return lifecycle.mkfs(FileSystem, dev, log_size=log_size, label=label, where=where)

    @classmethod
    def open(cls, dev, *, commit_interval: float = 1.0, buffer_pages: int = 16384, where: str = "",
             checking: bool = False) -> FileSystem:
        """Open (recovering the engine if it was not shut down cleanly) and reap orphans.

        The engine is first opened on an :class:`OverlayDevice` (recovery included, nothing
        written to ``dev``) to check that it holds a healthy filesystem: a refused open, a
        foreign or damaged device, changes nothing. Damage is refused with :class:`FsDamaged`
        (pointing at fsck): a damaged page on the way to any tree's root, or a filesystem
        whose engine recorded damage while it was in use.

        ``checking`` (fsck): open whatever can be opened — a filesystem marked damaged, a
        damaged ``meta`` tree (``sb`` None) — and leave everything as found: no orphans reaped,
        damaged pages reported by fsck rather than recorded in the superblock."""
        return lifecycle.open_fs(cls, dev, commit_interval=commit_interval, buffer_pages=buffer_pages,
                                 where=where, checking=checking)

    def __init__(self, engine: Engine, trees: dict, sb) -> None:
        self.e = engine
        self.chain = load_chain(trees)
        trees = {**trees, **{name: HistoryTree(trees[name], TREE_ID[name], self.chain, trees["hist"],
                                               trees["hist_epochs"]) for name in VERSIONED}}
        self.t = trees
        self.sb = sb
        sums = DataSums(engine, trees["datasums"], trees["datapending"])
        self.data = DataMap(engine, trees["extents"], sums, self.chain, trees["dead"],
                            DataMarks(sums, trees["datamarked"]))
        ilocks = InodeLocks()
        self.inodes = Inodes(engine, trees, self.data)
        self.lifetime = Lifetime(self.inodes, ilocks)
        self.reaper = Reaper(self.lifetime)  # started by a mount's open (``lifecycle.open_fs``)
        # a snapshot never keeps a file removed before it: the reaper's backlog settled first
        self.snapshots = SnapshotStore(self.inodes, self.chain, self.reaper.drain)
        self.namespace = Namespace(self.inodes, self.lifetime)
        self.flags = InodeFlags(self.inodes)
        self.files = FileData(self.inodes, ilocks)
        self.attributes = Attributes(self.inodes, self.files)
        self.xattrs = Xattrs(self.inodes)
        self.repair = Repair(self.inodes, self.namespace, self.lifetime)
        self.stats = self.inodes.stats
        self._subtrees: dict[int, Subtree] = {}  # tag -> subtree
        self._root_names: dict[bytes, Subtree] = {}  # its name in the root -> subtree
        self.status_files = StatusFiles(self.status)
        self.queues = Queues(engine)  # its store opens when the filesystem is opened for use
        self.snapshot_dir = Snapshots(SnapshotView(self.inodes, self.snapshots))
        for subtree in (self.status_files, self.snapshot_dir, self.queues):
            self.add_subtree(subtree)

    @property
    def closed(self) -> bool:
        return self.inodes.closed

    def close(self) -> None:
        """Clean shutdown: the subtrees first, then flush data, checkpoint, stop the engine."""
        if not self.closed:
            for subtree in self._subtrees.values():
                subtree.close()
            self.reaper.stop()
        lifecycle.close(self.inodes, self.lifetime)

    def crash(self) -> None:
        """Stop without writing anything more (tests: as if the process had died)."""
        self.queues.crash()
        self.reaper.stop(drain=False)
        lifecycle.crash(self.inodes)

    # ----- subtrees -----------------------------------------------------------------------------
    def add_subtree(self, subtree: Subtree) -> None:
        """Serve ``subtree`` under its name in the root (before the filesystem is served)."""
        check_tag(subtree)
        if subtree.tag in self._subtrees or subtree.name in self._root_names:
            raise ValueError(f"subtree {subtree.name!r} (tag {subtree.tag}): its tag or name is taken")
        self._subtrees[subtree.tag] = subtree
        self._root_names[subtree.name] = subtree
        self._root_names = dict(sorted(self._root_names.items(), key=lambda kv: kv[1].tag))

    def _owner(self, ino: int) -> Subtree | None:
        """The subtree that owns ``ino`` (None: the tree's own)."""
        tag = ino >> TAG_SHIFT
        return self._subtrees.get(tag) if tag else None

    def _only_one(self, *inos: int) -> Subtree | None:
        """The subtree owning all of ``inos``, None if the tree does; EXDEV across the two."""
        owners = {self._owner(ino) for ino in inos}
        if len(owners) > 1:
            raise FsError(errno.EXDEV, "a link or rename between a subtree and the rest of the filesystem")
        return owners.pop()

    def _new_name(self, parent: int, name: bytes) -> None:
        """A new entry of the root cannot take a subtree's name."""
        if parent == ROOT_INO and name in self._root_names:
            raise FsError(errno.EEXIST, f"{name!r} exists in the root directory")

    def _old_name(self, parent: int, name: bytes) -> None:
        """A subtree's entry in the root cannot be removed or renamed."""
        if parent == ROOT_INO and name in self._root_names:
            raise FsError(errno.EPERM, f"{name!r} belongs to the filesystem")

    def volatile(self, ino: int) -> bool:
        """Do ``ino``'s attributes change without a request (the kernel must not cache them)?"""
        owner = self._owner(ino)
        return owner is not None and owner.volatile(ino)

    # ----- reading the namespace ----------------------------------------------------------------
    def getattr(self, ino: int, caller: Caller = NOBODY) -> Inode:
        owner = self._owner(ino)
        if owner is not None:
            return owner.getattr(ino, caller)
        with self.inodes.lock:
            return self.inodes.attrs(ino)

    def lookup(self, parent: int, name: bytes, caller: Caller = NOBODY) -> Inode:
        if name == b".":
            return self.getattr(parent, caller)
        owner = self._owner(parent)
        if owner is not None:
            if name == b".." and parent == owner.top_ino:
                return self.getattr(ROOT_INO)
            return owner.lookup(parent, name, caller)
        if parent == ROOT_INO and name in self._root_names:
            subtree = self._root_names[name]
            return subtree.getattr(subtree.top_ino, caller)
        return self.namespace.lookup(parent, name)

    def readdir(self, ino: int, after: int, limit: int = 256, caller: Caller = NOBODY,
                dots: bool = False) -> list[tuple[bytes, Inode, int]]:
        """Up to ``limit`` entries whose cookie is greater than ``after``, in cookie order. An
        entry's cookie never changes while it exists, so a listing that runs while entries are
        added and removed returns every entry that existed throughout exactly once.

        ``dots``: ``.`` and ``..`` come first (cookies 1 and 2), as readdir(2) must return them
        (the FUSE adapter asks for them; tools walking the tree do not). The root lists its
        subtrees next (cookie ``DOTS + tag``); a subtree's own cookies are shifted up by
        ``DOTS``; the tree's own start at ``FIRST_COOKIE`` (``fs/keys.py``). A resumed listing
        starts from its cookie directly: nothing before it is read again."""
        out = self._dots(ino, after, caller) if dots and after < DOTS else []
        owner = self._owner(ino)
        if owner is not None:
            rest = owner.readdir(ino, max(0, after - DOTS), limit - len(out), caller) if len(out) < limit else []
            return (out + [(name, node, cookie + DOTS) for name, node, cookie in rest])[:limit]
        if ino != ROOT_INO:
            if len(out) < limit:
                out += self.namespace.readdir(ino, after, limit - len(out))
            return out
        out += [(s.name, s.getattr(s.top_ino, caller), DOTS + s.tag) for s in self._root_names.values()
                if DOTS + s.tag > after]
        out = out[:limit]
        after = max(after, out[-1][2] if out else 0)
        while len(out) < limit:  # the tree's own entries; one a subtree's name hides is left out
            more = self.namespace.readdir(ino, after, limit - len(out))
            if not more:
                break
            out += [e for e in more if e[0] not in self._root_names]
            after = more[-1][2]
        return out

    def _dots(self, ino: int, after: int, caller: Caller) -> list[tuple[bytes, Inode, int]]:
        """``.`` and ``..`` of directory ``ino`` whose cookies are above ``after`` (a removed
        directory has no ``..``: ENOENT, as Linux answers a listing of it)."""
        dot, dotdot = self.getattr(ino, caller), self.lookup(ino, b"..", caller)
        return [e for e in ((b".", dot, DOT_COOKIE), (b"..", dotdot, DOTDOT_COOKIE)) if e[2] > after]

    def opendir(self, ino: int, caller: Caller = NOBODY) -> None:
        """May ``ino`` be listed? ENOTDIR if it is no directory."""
        owner = self._owner(ino)
        if owner is not None:
            node = owner.getattr(ino, caller)
        else:
            with self.inodes.lock:
                node = self.inodes.get(ino)
        if not node.is_dir:
            raise FsError(errno.ENOTDIR, f"inode {ino} is not a directory")

    def readlink(self, ino: int) -> bytes:
        owner = self._owner(ino)
        return owner.readlink(ino) if owner is not None else self.namespace.readlink(ino)

    # ----- changing the namespace ---------------------------------------------------------------
    def create(self, parent: int, name: bytes, mode: int, uid: int, gid: int, rdev: int = 0,
               target: bytes | None = None, caller: Caller | None = None) -> Inode:
        """A new inode named ``name`` in ``parent``: any file type by ``mode`` (regular, FIFO,
        socket, device, directory; a symbolic link when ``target`` is given)."""
        owner = self._owner(parent)
        if owner is not None:
            return owner.create(parent, name, mode, caller or Caller(uid=uid, gid=gid), rdev, target)
        self._new_name(parent, name)
        self.flags.refuse(parent, "creating an entry", FS_IMMUTABLE_FL)
        node = self.namespace.create(parent, name, mode, uid, gid, rdev, target)
        self.flags.made(node.ino)  # known to be none: the first write need not look them up
        return node

    def mkdir(self, parent: int, name: bytes, mode: int, uid: int, gid: int, caller: Caller | None = None) -> Inode:
        return self.create(parent, name, stat.S_IFDIR | (mode & 0o7777), uid, gid, caller=caller)

    def symlink(self, parent: int, name: bytes, target: bytes, uid: int, gid: int,
                caller: Caller | None = None) -> Inode:
        return self.create(parent, name, stat.S_IFLNK | 0o777, uid, gid, target=target, caller=caller)

    def link(self, ino: int, parent: int, name: bytes, caller: Caller = NOBODY) -> Inode:
        owner = self._only_one(ino, parent)
        if owner is not None:
            return owner.link(ino, parent, name, caller)
        self._new_name(parent, name)
        self.flags.refuse(ino, "a hard link")
        self.flags.refuse(parent, "creating an entry", FS_IMMUTABLE_FL)
        return self.namespace.link(ino, parent, name)

    def unlink(self, parent: int, name: bytes, caller: Caller = NOBODY) -> None:
        owner = self._owner(parent)
        if owner is not None:
            return owner.unlink(parent, name, caller)
        self._old_name(parent, name)
        self._refuse_removal(parent, name)
        return self.namespace.unlink(parent, name)

    def rmdir(self, parent: int, name: bytes, caller: Caller = NOBODY) -> None:
        owner = self._owner(parent)
        if owner is not None:
            return owner.rmdir(parent, name, caller)
        self._old_name(parent, name)
        self._refuse_removal(parent, name)
        return self.namespace.rmdir(parent, name)

    def rename(self, old_parent: int, old_name: bytes, new_parent: int, new_name: bytes, flags: int = 0,
               caller: Caller = NOBODY) -> None:
        """Atomic rename, onto an existing target too (which is then unlinked in the same
        transaction); RENAME_NOREPLACE and RENAME_EXCHANGE as renameat2(2)."""
        owner = self._only_one(old_parent, new_parent)
        if owner is not None:
            return owner.rename(old_parent, old_name, new_parent, new_name, flags, caller)
        self._old_name(old_parent, old_name)
        self._new_name(new_parent, new_name)
        self._refuse_removal(old_parent, old_name)
        self.flags.refuse(new_parent, "renaming into it", FS_IMMUTABLE_FL)
        if self.namespace.child(new_parent, new_name) is not None:
            self._refuse_removal(new_parent, new_name)
        return self.namespace.rename(old_parent, old_name, new_parent, new_name, flags)

    def _refuse_removal(self, parent: int, name: bytes) -> None:
        """EPERM for removing (or renaming away) an immutable or append-only entry, or one of an
        immutable or append-only directory (``fs/inode_flags.py``)."""
        self.flags.refuse(parent, "removing an entry")
        with self.inodes.lock:
            child = self.namespace.child(parent, name)
        if child is not None:
            self.flags.refuse(child, "removing or renaming it")

    # ----- attributes ---------------------------------------------------------------------------
    def setattr(self, ino: int, *, mode: int | None = None, uid: int | None = None, gid: int | None = None,
                size: int | None = None, atime_ns: int | None = None, mtime_ns: int | None = None,
                ctime_ns: int | None = None, kill_suidgid: bool = False, caller: Caller = NOBODY) -> Inode:
        """``kill_suidgid``: a truncate or chown that clears the set-ID bits
        (``attributes.killed``; the subtrees' objects keep none to clear)."""
        owner = self._owner(ino)
        if owner is not None:
            given = {"mode": mode, "uid": uid, "gid": gid, "size": size, "atime_ns": atime_ns,
                     "mtime_ns": mtime_ns, "ctime_ns": ctime_ns}
            return owner.setattr(ino, {k: v for k, v in given.items() if v is not None}, caller)
        self.flags.refuse(ino, "changing attributes")
        return self.attributes.setattr(ino, mode=mode, uid=uid, gid=gid, size=size, atime_ns=atime_ns,
                                       mtime_ns=mtime_ns, ctime_ns=ctime_ns, kill_suidgid=kill_suidgid)

    def kill_suidgid(self, ino: int) -> bool:
        """After a write or a truncating open by a caller without CAP_FSETID: clear the set-ID
        bits (``attributes.killed``); whether they changed. The subtrees' objects keep none."""
        if self._owner(ino) is not None:
            return False
        return self.attributes.kill_suidgid(ino)

    def getxattr(self, ino: int, name: bytes) -> bytes:
        """An extended attribute; ``trax.extents`` of a file is computed (``fs/extent_report.py``)."""
        owner = self._owner(ino)
        if owner is not None:
            return owner.getxattr(ino, name)
        if name == EXTENTS_XATTR:
            return extents_report(self.inodes, self.data, ino)
        return self.xattrs.get(ino, name)

    def listxattr(self, ino: int) -> list[bytes]:
        owner = self._owner(ino)
        return owner.listxattr(ino) if owner is not None else self.xattrs.names(ino)

    def setxattr(self, ino: int, name: bytes, value: bytes, flags: int = 0) -> None:
        owner = self._owner(ino)
        if owner is not None:
            return owner.setxattr(ino, name, value, flags)
        self.flags.refuse(ino, "setting an extended attribute")
        return self.xattrs.set(ino, name, value, flags)

    def removexattr(self, ino: int, name: bytes) -> None:
        owner = self._owner(ino)
        if owner is not None:
            return owner.removexattr(ino, name)
        self.flags.refuse(ino, "removing an extended attribute")
        return self.xattrs.remove(ino, name)

    # ----- files --------------------------------------------------------------------------------
    def open_file(self, ino: int, flags: int, caller: Caller = NOBODY) -> OpenFile:
        """An open of file ``ino`` (``flags`` as open(2)'s): reads, writes, seeks, fsyncs and the
        release go to the returned handle, which also says how the kernel may cache the file."""
        owner = self._owner(ino)
        if owner is not None:
            return owner.open(ino, flags, caller)
        with self.inodes.lock:
            node = self.inodes.get(ino)
        if node.is_dir:
            raise FsError(errno.EISDIR, f"inode {ino} is a directory")
        if flags & WRITE_ACCESS:
            self.flags.refuse(ino, "opening for writing", FS_IMMUTABLE_FL)
            if not flags & os.O_APPEND or flags & os.O_TRUNC:
                self.flags.refuse(ino, "opening for writing without O_APPEND", FS_APPEND_FL)
        if flags & os.O_TRUNC and flags & WRITE_ACCESS and node.is_reg:
            self.files.truncate(ino, 0)
        return FileHandle(self.files, self.lifetime, ino, self.flags)

    def get_flags(self, ino: int) -> int:
        """``FS_IOC_GETFLAGS`` (``lsattr``): the tree's inodes only (ENOTTY elsewhere)."""
        if self._owner(ino) is not None:
            raise FsError(errno.ENOTTY, f"inode {ino} keeps no flags")
        return self.flags.get(ino)

    def set_flags(self, ino: int, flags: int) -> None:
        """``FS_IOC_SETFLAGS`` (``chattr``): see ``fs/inode_flags.py``."""
        if self._owner(ino) is not None:
            raise FsError(errno.ENOTTY, f"inode {ino} keeps no flags")
        self.flags.set(ino, flags)

    def create_file(self, parent: int, name: bytes, mode: int, flags: int,
                    caller: Caller = NOBODY) -> tuple[Inode, OpenFile]:
        """open(2) with ``O_CREAT`` of a name that does not exist: a new regular file, opened."""
        node = self.create(parent, name, stat.S_IFREG | (mode & 0o7777), caller.uid, caller.gid, caller=caller)
        return node, self.open_file(node.ino, flags & ~os.O_TRUNC, caller)

    def read(self, ino: int, off: int, size: int) -> bytes:
        """Bytes of the tree's file ``ino`` (subtrees' files are read through their handles)."""
        return self.files.read(ino, off, size)

    def write(self, ino: int, off: int, data: bytes) -> int:
        """Write ``data`` at ``off`` into the tree's file ``ino``; returns the byte count."""
        return self.files.write(ino, off, data)

    def truncate(self, ino: int, size: int) -> None:
        return self.files.truncate(ino, size)

    def seek(self, ino: int, off: int, whence: int) -> int:
        """``SEEK_DATA`` / ``SEEK_HOLE`` in the tree's file ``ino``."""
        return self.files.seek(ino, off, whence)

    def fsync(self, ino: int | None = None, datasync: bool = False) -> None:
        """Make everything written so far durable: the data first, then the log up to now.
        (The log is one sequence: forcing it for one inode forces every earlier change too.)"""
        self.files.fsync()

    def sync(self) -> None:
        self.files.fsync()

    def fsync_dir(self, ino: int, datasync: bool = False) -> None:
        owner = self._owner(ino)
        if owner is not None:
            return owner.fsync_dir(ino, datasync)
        return self.files.fsync()

    def flush_inodes(self) -> int:
        """Log the inodes whose size and times changed in memory only (see ``Inodes.flush``)."""
        return self.inodes.flush()

    # ----- references ---------------------------------------------------------------------------
    def ref(self, ino: int, n: int = 1) -> None:
        """The kernel took ``n`` lookup references to ``ino``. Never waits for the metadata lock."""
        owner = self._owner(ino)
        if owner is not None:
            return owner.ref(ino, n)
        return self.lifetime.ref(ino, n)

    def unref(self, ino: int, n: int = 1) -> bool:
        """The kernel dropped ``n``. Never waits for the metadata lock; True: that was the last
        reference of an inode no entry names any more, so run :meth:`collect` (in a worker)."""
        owner = self._owner(ino)
        if owner is not None:
            return owner.unref(ino, n)
        return self.lifetime.unref(ino, n)

    def collect(self, ino: int) -> None:
        """Destroy ``ino`` if nothing references it and no entry names it."""
        owner = self._owner(ino)
        if owner is not None:
            return owner.collect(ino)
        return self.lifetime.collect(ino)

    def collect_later(self, ino: int) -> None:
        """:meth:`collect`, soon, on the reaper's thread (the FUSE adapter's FORGET): see
        ``fs/reaper.py``."""
        owner = self._owner(ino)
        if owner is not None:
            return owner.collect(ino)
        return self.reaper.collect(ino)

    def settle(self) -> bool:
        """Wait until the removed inodes handed to the reaper are destroyed (their space free);
        True if any was waiting. No lock may be held."""
        return self.reaper.drain()

    # ----- the whole filesystem -----------------------------------------------------------------
    def statfs(self) -> StatFs:
        """Free space as a user expects it after ``rm``: removed files' pages counted free."""
        self.settle()
        return statfs(self.inodes)

    def status(self) -> dict:
        """Counters for /.trax/: engine, buffer, log, data, filesystem."""
        return status(self.sb, self.inodes, self.lifetime)

    def iter_inodes(self) -> Iterator[Inode]:
        for k, v in self.t["inodes"].items():
            yield Inode.unpack(U64.unpack(k)[0], v)

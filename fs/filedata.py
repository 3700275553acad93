"""File contents through the filesystem: read, write, truncate, fallocate,
``SEEK_DATA``/``SEEK_HOLE``, fsync, and the open files of the tree.

A file's data takes its inode's reader/writer lock (``fs/inode_locks.py``): reads of one file
run in parallel; a write or truncate excludes its readers and other writers. The metadata lock is
held only for the B+tree work; the bytes move outside it (``DataMap``, ordered mode: the data
reaches the device before the records that make it reachable are logged).
"""

from __future__ import annotations

import errno
import os

from .datamap import WritePlan
from .engine.page import PAGE_SIZE
from .errors import FsError
from .inode_flags import FS_APPEND_FL, FS_IMMUTABLE_FL, InodeFlags
from .inode_locks import InodeLocks
from .inodes import Inodes
from .lifetime import Lifetime
from .limits import MAX_FILE_SIZE, now_ns
from .subtrees.protocol import OpenFile

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
FILL_CHUNK = 1 << 20  # zeros written per write when fallocate fills a hole


class FileData:
    def __init__(self, inodes: Inodes, ilocks: InodeLocks) -> None:
        self.inodes = inodes
        self.e = inodes.e
        self.data = inodes.data
        self._ilocks = ilocks

    def size(self, ino: int) -> int:
        with self.inodes.lock:
            return self.inodes.get(ino).size

    def read(self, ino: int, off: int, size: int) -> bytes:
        ilocks = self._ilocks
        held = ilocks.acquire_shared(ino)
        try:
            with self.inodes.lock:
                node = self.inodes.get(ino)
                if node.is_dir:
                    raise FsError(errno.EISDIR, f"inode {ino} is a directory")
                size = max(0, min(size, node.size - off))
            if size == 0:
                return b""
            return self.data.read(ino, off, size)
        finally:
            ilocks.release_shared(ino, held)

    def write(self, ino: int, off: int, data: bytes) -> int:
        """Write ``data`` at ``off``; returns the byte count. The bytes reach the volume before
        the records that make them reachable are logged (ordered mode)."""
        if not data:
            return 0
        if off < 0 or off + len(data) > MAX_FILE_SIZE:
            raise FsError(errno.EFBIG, f"write past the largest file size ({MAX_FILE_SIZE})")
        ilocks = self._ilocks
        with self.inodes.barrier:
            held = ilocks.acquire_exclusive(ino)  # (a ``with`` over a generator: a microsecond more)
            try:
                return self._write_locked(ino, off, data)
            finally:
                ilocks.release_exclusive(ino, held)

    def _write_locked(self, ino: int, off: int, data: bytes) -> int:
        """:meth:`write`, the snapshot barrier and the file's inode lock held."""
        inodes = self.inodes
        with inodes.lock:
            node = inodes.get(ino)  # read only: the copy to change is taken once the bytes are written
            if not node.is_reg:
                raise FsError(errno.EINVAL if not node.is_dir else errno.EISDIR, f"inode {ino} is not a file")
            if off > node.size:
                self._drop_gap(ino, node.size, off)
            ftx, new, count = None, [], len(data)
            shared = self.data.shared_range(ino, off, off + count, node.size)
            if shared is not None:  # copy-on-write: whole pages written afresh, old bytes around
                off, data = self._whole_pages(ino, off, data, shared, node.size)
            if shared is not None or self.data.has_holes(ino, off, len(data)):
                ftx = inodes.begin()
                try:
                    if shared is not None:
                        self.data.unshare(ftx, ino, *shared)
                    new = self.data.allocate(ftx.tx, ino, off, len(data), node.size)
                except BaseException as ex:
                    inodes.abort(ftx, ex)
                    raise
        try:
            plan = self.data.plan(ino, off, data, new, node.size)
            self._write_plan(plan)
        except BaseException as ex:
            if ftx is not None:
                with inodes.lock:
                    inodes.abort(ftx, ex)
            raise
        with inodes.lock:
            node = inodes.copy(ino)
            node.size = max(node.size, off + len(data))
            node.mtime_ns = node.ctime_ns = now_ns()
            if ftx is None:  # into allocated space: the new size, times and sums wait in memory
                self.data.sums.defer(ino, plan.sums)
                inodes.keep_dirty(node)
                return count
            try:
                self.data.publish(ftx, ino, new)
                self.data.sums.record(ftx, plan.sums)
                inodes.put(ftx, node)
            except BaseException as ex:
                inodes.abort(ftx, ex)
                raise
            inodes.commit(ftx)
        return count

    def _whole_pages(self, ino: int, off: int, data: bytes, shared: tuple[int, int], size: int) -> tuple[int, bytes]:
        """A write of ``data`` at ``off`` widened to the whole pages [first, stop) that a
        snapshot shares (up to the size): the file's bytes around it read (verified) in. Those
        pages are then written as fresh ones (no overwrite intent) and published with the write
        (``DataMap.unshare``): one transaction, ordered mode. Bounded: at most a page each side."""
        lo, hi = shared[0] * PAGE_SIZE, min(shared[1] * PAGE_SIZE, size)
        end = off + len(data)
        if lo >= off and hi <= end:
            return off, data
        head = self.data.read(ino, lo, min(off, size) - lo) + bytes(max(0, off - size)) if lo < off else b""
        tail = self.data.read(ino, end, hi - end) if hi > end else b""
        return min(lo, off), head + bytes(data) + tail

    def _drop_gap(self, ino: int, size: int, off: int) -> None:
        """A write at ``off`` past the end (``size``) leaves a gap that must read as zeros: the
        whole pages of it that an earlier write preallocated are freed (a hole) rather than
        written with zeros, so a writer that seeks past the end (``cp --sparse``, a sparse
        image) gets holes. The caller holds the file's inode lock and the metadata lock."""
        first, stop = -(-size // PAGE_SIZE), off // PAGE_SIZE
        if first < stop and self.data.first_data(ino, first, stop) is not None:
            with self.inodes.transaction() as ftx:
                self.data.punch(ftx, ino, first, stop)

    def _make_private(self, ino: int, off: int, end: int, size: int) -> None:
        """Copy-on-write (one transaction) of the pages a change of bytes [off, end) touches
        that a snapshot sees (``DataMap.make_private``: the tail of the last page that growing
        the size zeroes); nothing without a snapshot. The caller holds the snapshot barrier, the
        file's inode lock and the metadata lock."""
        shared = self.data.shared_range(ino, off, end, size)
        if shared is not None:
            with self.inodes.transaction() as ftx:
                self.data.make_private(ftx, ino, *shared)

    def _write_plan(self, plan: WritePlan) -> None:
        """Write planned data (``DataMap.plan``). Overwrites of checksummed bytes first log
        their intents (new sum, old kept as the alternative: what a read accepts meanwhile) and
        make sure their groups of pages are marked (``DataMarks``) durably before the bytes are
        written: a crash then finds the page pending or in a marked group, and the next mount
        settles it to what is on disk. Only an overwrite that marks a group logs its intents
        and waits for the log (one force, shared with concurrent committers, no device flush:
        marks and intents describe no data); in a group marked already the intents stay in
        memory (deferred, as the sums of writes into allocated space are), and the group stays
        marked until they are logged. The caller then logs the plan's sums (with the
        transaction that publishes the write, or deferred to the inode's next record)."""
        intents = plan.intents
        if intents:
            marks = self.data.marks
            with self.inodes.lock:
                if marks.covers(intents):  # in memory only, logged (or replaced) with the inode
                    self.data.sums.defer(plan.ino, intents)
                else:
                    with self.inodes.transaction() as ftx:
                        ftx.data_independent = True
                        self.data.sums.record(ftx, intents)
                        marks.cover(ftx, intents)
                need = marks.durable_at(intents)
            self.e.make_durable(need)
        self.data.write_plan(plan)

    def truncate(self, ino: int, size: int) -> None:
        if size < 0 or size > MAX_FILE_SIZE:
            raise FsError(errno.EFBIG if size > 0 else errno.EINVAL, f"size {size}")
        inodes = self.inodes
        with inodes.barrier, self._ilocks.exclusive(ino):
            with inodes.lock:
                node = inodes.copy(ino)
                if node.is_dir:
                    raise FsError(errno.EISDIR, f"inode {ino} is a directory")
                if not node.is_reg:
                    raise FsError(errno.EINVAL, f"inode {ino} is not a regular file")
                if size > node.size:
                    self._make_private(ino, node.size, size, node.size)
            if size > node.size:  # what the new size exposes is zeroed first (inode lock held)
                plan = self.data.plan_zero(ino, node.size, size)
                self._write_plan(plan)
            with inodes.lock:
                grow = size > node.size
                node = inodes.copy(ino)
                with inodes.transaction() as ftx:
                    if grow:
                        self.data.sums.record(ftx, plan.sums)
                    if size < node.size:
                        self.data.truncate(ftx, ino, size)
                    node.size = size
                    node.mtime_ns = node.ctime_ns = now_ns()
                    inodes.put(ftx, node)

    def fallocate(self, ino: int, mode: int, off: int, length: int) -> None:
        """fallocate(2) of the modes the kernel passes on to FUSE.

        * ``0`` (and ``KEEP_SIZE`` within the size): the size first grows to the range's end
          unless ``KEEP_SIZE`` (pages preallocated past the old end are zeroed then, as by
          truncate), then every hole in the range gets pages written with zeros (a page is never
          mapped unwritten below the size: its sum and ordered mode need the bytes).
          ``KEEP_SIZE`` past the end is refused (EOPNOTSUPP): pages past a file's end are
          preallocation, given back at the last close and flagged by fsck.
        * ``PUNCH_HOLE | KEEP_SIZE``: the whole pages of the range are freed, the partial pages
          at its edges zeroed; the size stays.
        * ``ZERO_RANGE``: a punched hole (it reads as zeros; its whole pages hold no space), and
          the size grows to the range's end unless ``KEEP_SIZE``.

        Several transactions, as a run of writes would be: a crash in between leaves part of
        the range done. Other modes: EOPNOTSUPP (as Linux for a mode a filesystem lacks)."""
        keep = bool(mode & FALLOC_FL_KEEP_SIZE)
        kind = mode & ~FALLOC_FL_KEEP_SIZE
        if kind not in (0, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE) or kind == FALLOC_FL_PUNCH_HOLE and not keep:
            raise FsError(errno.EOPNOTSUPP, f"fallocate mode {mode:#x} is not supported")
        if off < 0 or length <= 0:
            raise FsError(errno.EINVAL, f"fallocate of {length} bytes at {off}")
        end = off + length
        if end > MAX_FILE_SIZE:
            raise FsError(errno.EFBIG, f"fallocate past the largest file size ({MAX_FILE_SIZE})")
        with self.inodes.lock:
            node = self.inodes.get(ino)
            if node.is_dir:
                raise FsError(errno.EISDIR, f"inode {ino} is a directory")
            if not node.is_reg:
                raise FsError(errno.ENODEV, f"inode {ino} is not a regular file")
            size = node.size
        if kind == 0 and keep and end > size:
            raise FsError(errno.EOPNOTSUPP, "fallocate KEEP_SIZE past the end of a file: traxfs keeps no space "
                                            "past a file's end")
        with self.inodes.barrier:
            self._fallocate(ino, kind, keep, off, end, size)

    def _fallocate(self, ino: int, kind: int, keep: bool, off: int, end: int, size: int) -> None:
        if kind != 0:
            self._punch(ino, off, min(end, size))
        if not keep and end > size:  # first: pages preallocated past the old end become zeros of the file
            self.truncate(ino, end)
        if kind == 0:
            self._fill_holes(ino, off, end)

    def _fill_holes(self, ino: int, off: int, end: int) -> None:
        """Zeros written into every unmapped page of [off, end) (only there: data stays)."""
        first, stop = off // PAGE_SIZE, -(-end // PAGE_SIZE)
        while first < stop:
            with self._ilocks.shared(ino), self.inodes.lock:
                hole = self.data.first_hole(ino, first, stop)
                data = self.data.first_data(ino, hole, stop) if hole < stop else None
            if hole >= stop:
                return
            upto = stop if data is None else data
            s, e = max(off, hole * PAGE_SIZE), min(end, upto * PAGE_SIZE)
            for pos in range(s, e, FILL_CHUNK):
                self.write(ino, pos, bytes(min(FILL_CHUNK, e - pos)))
            first = upto

    def _punch(self, ino: int, off: int, end: int) -> None:
        """Zero [off, end) of a file (``end`` within its size): whole pages freed, the mapped
        partial pages at the edges overwritten with zeros."""
        if end <= off:
            return
        first, stop = -(-off // PAGE_SIZE), end // PAGE_SIZE
        edges = [(off, min(end, first * PAGE_SIZE)), (max(off, stop * PAGE_SIZE), end)] if first <= stop else [(off, end)]
        for s, e in edges:
            if e > s:
                with self._ilocks.shared(ino), self.inodes.lock:
                    mapped = self.data.first_data(ino, s // PAGE_SIZE, -(-e // PAGE_SIZE)) is not None
                if mapped:
                    self.write(ino, s, bytes(e - s))
        if first >= stop:
            return
        with self._ilocks.exclusive(ino), self.inodes.lock:
            node = self.inodes.copy(ino)
            with self.inodes.transaction() as ftx:
                self.data.punch(ftx, ino, first, stop)
                node.mtime_ns = node.ctime_ns = now_ns()
                self.inodes.put(ftx, node)

    def seek(self, ino: int, off: int, whence: int) -> int:
        """``lseek(2)``'s ``SEEK_DATA`` / ``SEEK_HOLE`` from the extent map: a mapped page is
        data (also the zeros a write into a hole fills its window with, as ext4 counts written
        extents), an unmapped page is a hole, and so is everything from the size on (pages
        preallocated past it are not data). An offset at or past the size is ENXIO."""
        if whence not in (os.SEEK_DATA, os.SEEK_HOLE):
            raise FsError(errno.EINVAL, f"lseek whence {whence}: only SEEK_DATA and SEEK_HOLE come here")
        with self._ilocks.shared(ino):
            with self.inodes.lock:
                node = self.inodes.get(ino)
                if not node.is_reg:
                    raise FsError(errno.EINVAL, f"inode {ino} is not a regular file")
                size = node.size
            if off < 0 or off >= size:
                raise FsError(errno.ENXIO, f"offset {off} is outside the file (size {size})")
            first, stop = off // PAGE_SIZE, -(-size // PAGE_SIZE)
            if whence == os.SEEK_DATA:
                page = self.data.first_data(ino, first, stop)
                if page is None:
                    raise FsError(errno.ENXIO, f"no data from offset {off} to the end (size {size})")
                return max(off, page * PAGE_SIZE)
            return min(max(off, self.data.first_hole(ino, first, stop) * PAGE_SIZE), size)

    def fsync(self) -> None:
        """Make everything written so far durable: the log up to now, then the data if the log
        flush did not take it. (The log is one sequence: forcing it for one file forces every
        earlier change too.) The log flush itself flushes first the data its records describe
        (``DataMap.depend``): the inode just logged describes this file's, so concurrent fsyncs
        share two device flushes (data, log), where a data flush of its own before the log force
        made three — the log flush's barrier found the other writers' data unflushed again."""
        self.inodes.stats["fsyncs"] += 1
        self.inodes.flush()
        written = self.data.written()
        self.e.make_durable()
        # data no record describes (none today: a write's sums are logged with its inode, and
        # the barrier flushes what they describe): fsync's promise does not rest on that
        self.data.flush_data(written)


class FileHandle(OpenFile):
    """An open file of the tree. The kernel keeps its cached pages across opens (``keep_cache``):
    every change to a file comes through this mount, so they are always current."""

    keep_cache = True

    def __init__(self, files: FileData, lifetime: Lifetime, ino: int, flags: InodeFlags) -> None:
        self.files, self.lifetime, self.ino, self.flags = files, lifetime, ino, flags
        lifetime.open_handle(ino)

    def read(self, off: int, size: int) -> bytes:
        return self.files.read(self.ino, off, size)

    def write(self, off: int, data: bytes) -> int:
        """A write; through an open made before ``chattr``: none to an immutable file, and to an
        append-only one only at its end."""
        flags = self.flags.get(self.ino)
        if flags & FS_IMMUTABLE_FL:
            self.flags.refuse(self.ino, "writing")
        if flags & FS_APPEND_FL and off < self.files.size(self.ino):
            self.flags.refuse(self.ino, "writing before the end")
        return self.files.write(self.ino, off, data)

    def seek(self, off: int, whence: int) -> int:
        return self.files.seek(self.ino, off, whence)

    def fallocate(self, mode: int, off: int, length: int) -> None:
        self.flags.refuse(self.ino, "fallocate")
        self.files.fallocate(self.ino, mode, off, length)

    def flush_pending(self) -> bool:
        return self.ino in self.files.data.preallocated

    def flush(self) -> None:
        """close(2) of a descriptor. If this is the file's only open handle, the preallocation
        goes now: the kernel waits for flush, but not for release, so a stat right after close
        already sees the file's true size on disk."""
        if self.lifetime.only_handle(self.ino):
            self.lifetime.give_back(self.ino)

    def fsync(self, datasync: bool) -> None:
        self.files.fsync()

    def release(self) -> None:
        """The kernel dropped the handle; the last one gives the preallocation back."""
        if self.lifetime.close_handle(self.ino):
            self.lifetime.give_back(self.ino)
        if self.lifetime.unref(self.ino):
            self.lifetime.collect(self.ino)

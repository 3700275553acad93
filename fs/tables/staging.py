"""The ``ingest/`` folder of a table: an ordinary little tree of directories and files, kept by
the mount (in memory, spilling to a temporary file past :data:`SPOOL_BYTES` per file), where
files wait until they are complete.

Files being written are not stored in the filesystem: a file is ingested (its rows appended to
the table in one durable transaction) or rejected when it is complete — closed after being
written directly in ``ingest/``, or renamed into it —, and a file that was still being written
when the mount stopped was never complete, so its writer sees the failure and writes it again.
Rejected files (``ingest/.rejected/NAME`` and ``NAME.error``) are kept by the table store
(:class:`StoredNode`: the bytes read from there when first read) until the user removes them.
"""

from __future__ import annotations

import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

SPOOL_BYTES = 8 << 20


def now_ns() -> int:
    return time.time_ns()


@dataclass(eq=False)
class Node:
    """A directory or file of the staging tree; ``local`` is its number in the table's space."""

    local: int
    name: bytes
    parent: Node | None
    mode: int
    uid: int
    gid: int
    children: dict[bytes, Node] | None = None  # directories
    data: tempfile.SpooledTemporaryFile | None = None  # files
    size: int = 0
    mtime_ns: int = field(default_factory=now_ns)
    ctime_ns: int = field(default_factory=now_ns)
    gone: bool = False  # unlinked, ingested or rejected: no longer in the tree
    kept: int = 0  # a rejected file's part the table store keeps (RejectedRecord.DATA/ERROR; 0: none)
    rejected_of: bytes = b""  # (kept parts) the rejected file's name

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    def read(self, off: int, size: int) -> bytes:
        if self.data is None or off >= self.size:
            return b""
        self.data.seek(off)
        return self.data.read(min(size, self.size - off))

    def write(self, off: int, data: bytes) -> int:
        if self.data is None:
            self.data = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES, prefix="traxfs-ingest.")
        if off > self.size:  # a hole: zeros, as a file would read
            self.data.seek(self.size)
            self.data.write(bytes(off - self.size))
        self.data.seek(off)
        self.data.write(data)
        self.size = max(self.size, off + len(data))
        self.mtime_ns = self.ctime_ns = now_ns()
        return len(data)

    def truncate(self, size: int) -> None:
        if size < self.size and self.data is not None:
            self.data.truncate(size)
        elif size > self.size:
            self.write(self.size, bytes(size - self.size))
        self.size = size
        self.mtime_ns = self.ctime_ns = now_ns()

    def contents(self) -> bytes:
        return self.read(0, self.size)

    def drop(self) -> None:
        """The node leaves the tree; its bytes are freed."""
        self.gone = True
        if self.data is not None:
            self.data.close()
            self.data = None
        self.size = 0


@dataclass(eq=False)
class StoredNode(Node):
    """A rejected file whose bytes the table store keeps: ``load`` reads (and verifies) them,
    at the first read, and they stay in memory while the node lives."""

    load: Callable[[], bytes] | None = None

    def read(self, off: int, size: int) -> bytes:
        if self.data is None and self.size and self.load is not None:
            content = self.load()
            self.data = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES, prefix="traxfs-rejected.")
            self.data.write(content)
        return super().read(off, size)

"""Devices: the byte stores that physical volumes live on.

One base, :class:`Device`, for image files (sparse files created on demand — the embedded
default) and block devices (``/dev/sdX``, ``/dev/loopN``) opened with ``O_DIRECT``; the simulated
disks (``traxfs.volume.simdevice``), the overlay and the power-loss wrapper derive from it too.
It implements the whole device contract (``traxfs.volume.contract``), with plain versions of the
calls a subclass may do better.

Block devices are read and written through page-aligned ``mmap`` buffers because ``O_DIRECT``
requires the buffer, offset and length to be multiples of the logical block size; a request that
is not aligned is widened to the enclosing aligned range (read-modify-write for writes) under a
lock, so concurrent unaligned writers to the same block cannot lose each other's bytes.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import struct
import threading
from abc import ABC, abstractmethod

from .errors import DeviceError

SECTOR = 512
BLKGETSIZE64 = 0x80081272
BLKSSZGET = 0x1268
IOV_MAX = 1024


def _advance(views: list[memoryview], n: int) -> list[memoryview]:
    """Drop the first ``n`` bytes from a list of buffers (after a partial vectored I/O)."""
    i = 0
    while i < len(views) and n >= len(views[i]):
        n -= len(views[i])
        i += 1
    rest = views[i:]
    if rest and n:
        rest[0] = rest[0][n:]
    return rest


class Device(ABC):
    """A fixed-size array of bytes with read, write and flush (``DeviceContract``).

    ``path`` names the device in every error; ``size`` is in bytes; ``block_size`` is the
    smallest unit the device writes atomically as far as this layer assumes (512 or 4096).
    """

    path: str
    size: int
    block_size: int = SECTOR

    @abstractmethod
    def read(self, offset: int, length: int) -> bytes: ...

    @abstractmethod
    def write(self, offset: int, data: bytes | memoryview) -> None: ...

    @abstractmethod
    def flush(self) -> None:
        """Make every completed write durable."""

    def readinto(self, offset: int, views: list[memoryview]) -> None:
        """Fill ``views`` from consecutive device bytes starting at ``offset`` (vectored read)."""
        for v in views:
            v[:] = self.read(offset, len(v))
            offset += len(v)

    def writev(self, offset: int, views: list[memoryview]) -> None:
        """Write ``views`` to consecutive device bytes starting at ``offset`` (vectored write)."""
        for v in views:
            self.write(offset, v)
            offset += len(v)

    def write_durable(self, offset: int, data: bytes | memoryview) -> None:
        """Write and make *this write* durable (what a log append needs). Other writes not yet
        flushed need not be. The default writes and flushes everything; devices with a cheaper
        way (``O_DIRECT|O_DSYNC``) override it."""
        self.write(offset, data)
        self.flush()

    def direct_sync_fd(self) -> int | None:
        """A descriptor of this device's bytes opened ``O_DIRECT|O_DSYNC`` (each aligned write
        durable when it returns, one round trip), for a writer that composes aligned sectors
        itself (the engine's log flusher); None when the device has no such path. The device
        owns the descriptor: it stays valid until :meth:`close`."""
        return None

    def refuse_direct(self) -> None:
        """The descriptor of :meth:`direct_sync_fd` refused a write (``EINVAL``): stop offering it."""
        return  # (a device without one has nothing to stop)

    def read_copies(self, offset: int, length: int) -> list[tuple[int, bytes]]:
        """Every copy of the bytes: a single device holds one (copy 0)."""
        return [(0, self.read(offset, length))]

    def repair_copy(self, leg: int, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Rewrite copy ``leg``: a single device has only copy 0, its bytes."""
        if leg != 0:
            raise DeviceError(f"{self.path}: no copy {leg} (a single device holds one copy, 0)")
        self.write(offset, data)

    def boundaries(self, lbn: int) -> tuple[int, int]:
        """The efficient extent around sector ``lbn``: without a known geometry, the sector
        alone (nothing to align to)."""
        self._check(lbn * SECTOR, SECTOR)
        return lbn, 1

    def equivalent(self, lbn: int) -> tuple[int, ...]:
        """No quadrangles on a single device: no other block is reachable for free after
        ``lbn`` (no track skew to ride on), so the set is ``lbn`` alone."""
        self._check(lbn * SECTOR, SECTOR)
        return (lbn,)

    def read_batch(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """A single device has no linked commands to batch with: the reads one after another."""
        return [self.read(offset, length) for offset, length in ranges]

    def locate(self, offset: int, length: int) -> list[tuple[int, str, int, int, int]]:
        """A single device stores its bytes itself, in one copy."""
        self._check(offset, length)
        return [(0, self.path, offset, length, 0)]

    @abstractmethod
    def close(self) -> None: ...

    def _check(self, offset: int, length: int) -> None:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise DeviceError(
                f"{self.path}: access [{offset}, {offset + length}) outside the device (size {self.size})"
            )

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, size={self.size})"


class ImageFileDevice(Device):
    """A regular file used as a disk. Buffered I/O; ``flush`` is ``fdatasync``."""

    def __init__(self, path: str, size: int | None = None, create: bool = False):
        self.path = path
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            self.fd = os.open(path, flags, 0o600)
        except OSError as e:
            raise DeviceError(f"{path}: cannot open image file: {e.strerror}") from None
        current = os.fstat(self.fd).st_size
        if create and size is not None and current < size:
            os.ftruncate(self.fd, size)  # sparse: no blocks are allocated until written
            current = size
        self.size = current - current % SECTOR
        self._direct_fd: int | None = None  # opened at the first direct_sync_fd(); -1: refused
        self._direct_buf: mmap.mmap | None = None
        self._direct_lock = threading.Lock()
        self._retired_fds: list[int] = []

    def read(self, offset: int, length: int) -> bytes:
        self._check(offset, length)
        data = os.pread(self.fd, length, offset)
        if len(data) < length:  # cannot happen on a regular file inside its size, but be exact
            data += bytes(length - len(data))
        return data

    def write(self, offset: int, data: bytes | memoryview) -> None:
        self._check(offset, len(data))
        view = memoryview(data)
        while view:
            n = os.pwrite(self.fd, view, offset)
            view = view[n:]
            offset += n

    def readinto(self, offset: int, views: list[memoryview]) -> None:
        self._check(offset, sum(len(v) for v in views))
        views = [v for v in views if len(v)]
        while views:
            n = os.preadv(self.fd, views[:IOV_MAX], offset)
            if n == 0:  # past the file's end inside the device: a sparse image reads as zeros
                for v in views:
                    v[:] = bytes(len(v))
                return
            offset += n
            views = _advance(views, n)

    def writev(self, offset: int, views: list[memoryview]) -> None:
        self._check(offset, sum(len(v) for v in views))
        views = [v for v in views if len(v)]
        while views:
            n = os.pwritev(self.fd, views[:IOV_MAX], offset)
            offset += n
            views = _advance(views, n)

    def flush(self) -> None:
        os.fdatasync(self.fd)

    def write_durable(self, offset: int, data: bytes | memoryview) -> None:
        """Sector-aligned writes go through a second descriptor opened ``O_DIRECT|O_DSYNC``: the
        kernel writes the blocks and flushes the disk cache in one call (the log region is
        pre-written at format, so no allocation metadata rides along). Here that is ~6% cheaper
        per commit than a buffered write plus ``fdatasync`` (BENCHMARKS.md, engine). Anything
        unaligned, or a filesystem that refuses ``O_DIRECT`` or this alignment, takes the
        default path."""
        self._check(offset, len(data))
        if offset % SECTOR or len(data) % SECTOR or self.direct_sync_fd() is None:
            return super().write_durable(offset, data)
        with self._direct_lock:
            if self._direct_buf is None or len(self._direct_buf) < len(data):
                if self._direct_buf is not None:
                    self._direct_buf.close()
                self._direct_buf = mmap.mmap(-1, -(-len(data) // mmap.PAGESIZE) * mmap.PAGESIZE)
            view = memoryview(self._direct_buf)[: len(data)]
            view[:] = data
            try:
                done = 0
                while done < len(data):
                    done += os.pwrite(self._direct_fd, view[done:], offset + done)
                return
            except OSError as e:
                if e.errno != errno.EINVAL:  # a real I/O error: the caller must hear of it
                    raise
                self.refuse_direct()  # the filesystem wants larger alignment: stop trying
        super().write_durable(offset, data)

    def direct_sync_fd(self) -> int | None:
        """Opened at the first use; None if the filesystem refuses ``O_DIRECT`` (tmpfs)."""
        if self._direct_fd is None:
            with self._direct_lock:
                if self._direct_fd is None:
                    try:
                        self._direct_fd = os.open(self.path, os.O_RDWR | os.O_DIRECT | os.O_DSYNC)
                    except OSError:
                        self._direct_fd = -1
        return None if self._direct_fd < 0 else self._direct_fd

    def refuse_direct(self) -> None:
        """A direct write was refused (``EINVAL``: alignment): use buffered writes + fdatasync
        from now on. The descriptor stays open until :meth:`close` (a writer may still hold its
        number, which must not name another file meanwhile)."""
        if self._direct_fd is not None and self._direct_fd >= 0:
            self._retired_fds.append(self._direct_fd)
        self._direct_fd = -1

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self._direct_fd is not None:
            self._retired_fds.append(self._direct_fd)
        for fd in self._retired_fds:
            if fd >= 0:
                os.close(fd)
        self._retired_fds, self._direct_fd = [], None
        if self._direct_buf is not None:
            self._direct_buf.close()
            self._direct_buf = None


class BlockDevice(Device):
    """A block device opened with ``O_DIRECT``: no page cache between us and the disk."""

    def __init__(self, path: str):
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_DIRECT)
        except OSError as e:
            raise DeviceError(f"{path}: cannot open block device: {e.strerror}") from None
        buf = bytearray(8)
        fcntl.ioctl(self.fd, BLKGETSIZE64, buf)
        self.size = struct.unpack("Q", buf)[0]
        sbuf = bytearray(4)
        fcntl.ioctl(self.fd, BLKSSZGET, sbuf)
        self.block_size = max(struct.unpack("I", sbuf)[0], SECTOR)
        self._rmw_lock = threading.Lock()

    def _aligned(self, offset: int, length: int) -> tuple[int, int]:
        bs = self.block_size
        start = offset - offset % bs
        end = -(-(offset + length) // bs) * bs
        return start, end - start

    def _read_aligned(self, start: int, length: int) -> mmap.mmap:
        buf = mmap.mmap(-1, length)  # anonymous mappings are page-aligned, as O_DIRECT needs
        done = 0
        while done < length:
            n = os.preadv(self.fd, [memoryview(buf)[done:]], start + done)
            if n <= 0:
                buf.close()
                raise DeviceError(f"{self.path}: short read at {start + done}")
            done += n
        return buf

    def read(self, offset: int, length: int) -> bytes:
        self._check(offset, length)
        if length == 0:
            return b""
        start, alen = self._aligned(offset, length)
        buf = self._read_aligned(start, alen)
        try:
            return buf[offset - start : offset - start + length]
        finally:
            buf.close()

    def _write_aligned(self, start: int, buf: mmap.mmap) -> None:
        done = 0
        while done < len(buf):
            n = os.pwritev(self.fd, [memoryview(buf)[done:]], start + done)
            done += n

    def write(self, offset: int, data: bytes | memoryview) -> None:
        self._check(offset, len(data))
        if not data:
            return
        start, alen = self._aligned(offset, len(data))
        if start == offset and alen == len(data):
            buf = mmap.mmap(-1, alen)
            buf[:] = data
            self._write_aligned(start, buf)
            buf.close()
            return
        with self._rmw_lock:  # widen to whole blocks: read, patch, write back
            buf = self._read_aligned(start, alen)
            buf[offset - start : offset - start + len(data)] = data
            self._write_aligned(start, buf)
            buf.close()

    def flush(self) -> None:
        os.fsync(self.fd)  # O_DIRECT bypasses the page cache, not the disk's write cache

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def check_image_size(path: str, size: int) -> None:
    """Refuse an image size no device of ours can have."""
    if size < 4 * 1024 * 1024:
        raise DeviceError(f"{path}: an image must be at least 4 MiB (asked for {size} bytes)")
    if size % SECTOR:
        raise DeviceError(f"{path}: image size {size} is not a multiple of {SECTOR}")


def create_image(path: str, size: int) -> ImageFileDevice:
    """Create (or grow) a sparse image file of ``size`` bytes and open it."""
    check_image_size(path, size)
    return ImageFileDevice(path, size=size, create=True)

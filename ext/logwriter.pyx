# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The log flusher's durable write path without the GIL: :class:`DirectLogWriter` copies released
bytes straight from an Aether log buffer's ring (``traxfs.ext.logbuffer``, whose C core it
cimports) to a file or device opened ``O_DIRECT|O_DSYNC``.
"""

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free
from libc.string cimport memmove, memset

from .logbuffer cimport _LogBuffer, ld_u64, ring_get, tfx_lb

import os

cdef extern from *:
    """
    #include <stdint.h>
    #include <stdlib.h>
    #include <string.h>
    #include <unistd.h>
    #include <errno.h>
    static inline int64_t tfx_pwrite_all(int fd, const char *p, uint64_t n, uint64_t off) {
        while (n > 0) {
            ssize_t k = pwrite(fd, p, (size_t)n, (off_t)off);
            if (k < 0) { if (errno == EINTR) continue; return -errno; }
            if (k == 0) return -EIO;
            p += k; n -= (uint64_t)k; off += (uint64_t)k;
        }
        return 0;
    }
    static inline int64_t tfx_pread_all(int fd, char *p, uint64_t n, uint64_t off) {
        while (n > 0) {
            ssize_t k = pread(fd, p, (size_t)n, (off_t)off);
            if (k < 0) { if (errno == EINTR) continue; return -errno; }
            if (k == 0) { memset(p, 0, (size_t)n); return 0; }   /* past a sparse image's end */
            p += k; n -= (uint64_t)k; off += (uint64_t)k;
        }
        return 0;
    }
    static void *tfx_aligned_alloc(uint64_t n) {
        void *p = NULL;
        if (posix_memalign(&p, 4096, (size_t)n) != 0) return NULL;
        return p;
    }
    """
    int64_t pwrite_all "tfx_pwrite_all"(int fd, const char *p, uint64_t n, uint64_t off) noexcept nogil
    int64_t pread_all "tfx_pread_all"(int fd, char *p, uint64_t n, uint64_t off) noexcept nogil
    void *aligned_alloc4k "tfx_aligned_alloc"(uint64_t n) noexcept nogil


cdef class DirectLogWriter:
    """The log flusher's write path when the log region lives in a file or device opened
    ``O_DIRECT|O_DSYNC``: copy the released bytes [start, end) from the ring into an aligned
    buffer behind the partial sector last written, pad to whole sectors, ``pwrite`` (split at the
    region's wrap) -- all without the GIL.  One durable round trip per flush and no Python objects
    on the way (``LogStore.append_durable`` does the same in Python for any other device).

    The region holds LSN ``L`` at byte ``region_offset + L % region_size``.  The bytes of the
    first sector before ``start`` were written by the previous append (kept in the buffer) or are
    read back from the device.  Rewriting that durable prefix is safe against torn writes: every
    version of the sector holds the same prefix; the zero padding replaces only bytes past the
    log's end.  The file descriptor is the caller's (it must outlive the writer); one flusher at
    a time (the log manager's contract)."""

    cdef int fd
    cdef uint64_t region_offset, region_size, sector
    cdef char *buf
    cdef uint64_t buf_cap
    cdef uint64_t tail_lsn, tail_len
    cdef bint tail_valid
    cdef readonly uint64_t appends  # durable appends done (tests check the path is taken)

    def __cinit__(self, *args, **kwargs):
        self.buf = NULL

    def __init__(self, int fd, region_offset, region_size, sector, max_flush):
        if sector < 512 or sector > 4096 or sector & (sector - 1):
            raise ValueError(f"sector of {sector} bytes: must be a power of two in 512..4096")
        if region_offset % sector or region_size % sector or region_size < 2 * sector:
            raise ValueError(f"log region [{region_offset}, +{region_size}) not aligned to {sector}-byte sectors")
        if max_flush <= 0:
            raise ValueError(f"max_flush must be positive, got {max_flush}")
        self.fd = fd
        self.region_offset = region_offset
        self.region_size = region_size
        self.sector = sector
        self.buf_cap = ((<uint64_t>max_flush + 2 * self.sector + 4095) // 4096) * 4096
        self.buf = <char *>aligned_alloc4k(self.buf_cap)
        if self.buf == NULL:
            raise MemoryError()
        self.tail_valid = False

    def __dealloc__(self):
        free(self.buf)
        self.buf = NULL

    def append(self, _LogBuffer buffer, start, end) -> None:
        """Write log bytes [start, end) from ``buffer`` durably.  Needs ``flushed <= start <=
        end <= released`` (the flusher's range).  Raises ``OSError`` with the device's errno
        (``EINVAL``: the file or device refuses this alignment; the caller falls back)."""
        cdef tfx_lb *lb = buffer.lb
        cdef uint64_t s, e, s0, head, total, padded, pos, first, cut
        cdef int64_t rc = 0
        if start < 0 or end < 0:
            raise ValueError(f"append [{start}, {end}): negative LSN")
        s = start
        e = end
        if not (ld_u64(&lb.flushed) <= s <= e <= ld_u64(&lb.released)):
            raise ValueError(f"append [{s}, {e}) outside the buffer's flushable range "
                             f"[{ld_u64(&lb.flushed)}, {ld_u64(&lb.released)})")
        if e == s:
            return
        s0 = s - s % self.sector
        head = s - s0
        total = head + (e - s)
        padded = ((total + self.sector - 1) // self.sector) * self.sector
        if padded > self.buf_cap:
            raise ValueError(f"append of {e - s} bytes exceeds the writer's {self.buf_cap}-byte buffer")
        with nogil:
            if head and not (self.tail_valid and self.tail_lsn == s0 and self.tail_len == head):
                rc = pread_all(self.fd, self.buf, self.sector, self.region_offset + s0 % self.region_size)
            self.tail_valid = False
            if rc == 0:
                ring_get(lb, s, self.buf + head, e - s)
                memset(self.buf + total, 0, <size_t>(padded - total))
                pos = s0 % self.region_size
                first = min(padded, self.region_size - pos)
                rc = pwrite_all(self.fd, self.buf, first, self.region_offset + pos)
                if rc == 0 and first < padded:
                    rc = pwrite_all(self.fd, self.buf + first, padded - first, self.region_offset)
            if rc == 0:
                cut = e - e % self.sector
                self.tail_len = e - cut
                if self.tail_len:
                    memmove(self.buf, self.buf + (cut - s0), <size_t>self.tail_len)
                self.tail_lsn = cut
                self.tail_valid = True
        if rc != 0:
            raise OSError(<int>(-rc), f"durable log append at LSN {s}: {os.strerror(<int>(-rc))}")
        self.appends += 1

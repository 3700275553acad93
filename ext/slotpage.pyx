# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Slotted-page edits in C: the free-space sum, slot insert and slot delete of
``traxfs.fs.engine.slotted`` (whose docstring has the layout), and patches — the changed bytes
of a record overwritten by one of the same length (``diff_runs``, ``patch_redo``), the runs of
records a split moves (``cut_run``, ``paste_run``), and the redos of the slot operations.

Every B+tree, hash and list change runs them (forward and in redo), and in Python they cost a
fifth of a B+tree put: ``free_space`` unpacked the whole directory to sum it, ``insert`` and
``delete`` moved it with slice copies.  Here they are loops and ``memmove`` on the page.  The
byte layout is the one the Python code produced (bodies grow down from the page end; compaction
lays bodies out in slot order from the end), and a page whose directory or heap points outside
it is refused with ``ValueError`` instead of being written past.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy, memmove, memset

DIR_START_AT = 36  # checked against traxfs.fs.engine.slotted.DIR_START when that module loads
cdef Py_ssize_t HEADER_SIZE = 32
cdef Py_ssize_t DIR_START = 36


class PageFull(Exception):
    """The record does not fit in this page (the caller splits or allocates another page)."""


cdef inline Py_ssize_t u16(const unsigned char *p) noexcept nogil:
    return p[0] | (p[1] << 8)


cdef inline void put16(unsigned char *p, Py_ssize_t v) noexcept nogil:
    p[0] = v & 0xff
    p[1] = (v >> 8) & 0xff


cdef Py_ssize_t _count(const unsigned char *p, Py_ssize_t size) except -1:
    """The slot count, read only once the buffer is checked to hold the page's directory."""
    cdef Py_ssize_t n
    if size < DIR_START:
        raise ValueError(f"a slotted page of {size} bytes has no directory")
    n = u16(p + HEADER_SIZE)
    if DIR_START + 4 * n > size:
        raise ValueError(f"slotted page claims {n} slots: the directory would pass the page end")
    return n


cdef Py_ssize_t _used(const unsigned char *p, Py_ssize_t size, Py_ssize_t *n_out) except -1:
    """Slot count (into ``n_out``) and the bytes of all bodies; checks the directory fits."""
    cdef Py_ssize_t n = _count(p, size), i, used = 0
    for i in range(n):
        used += u16(p + DIR_START + 4 * i + 2)
    n_out[0] = n
    return used


cdef Py_ssize_t free_bytes(const unsigned char *p, Py_ssize_t size) except -1:
    """``free_space`` of a page in memory."""
    cdef Py_ssize_t n
    cdef Py_ssize_t used = _used(p, size, &n)
    return size - DIR_START - 4 * n - used


def free_space(const unsigned char[::1] buf) -> int:
    """Bytes available for one more record including its directory entry."""
    return free_bytes(&buf[0], buf.shape[0])


cdef int _compact(unsigned char *p, Py_ssize_t size, Py_ssize_t n) except -1:
    """Lay the bodies out again from the page end in slot order (directory order unchanged)."""
    cdef unsigned char *copy = <unsigned char *>malloc(size)
    cdef Py_ssize_t i, off, ln, top = size
    if copy == NULL:
        raise MemoryError()
    memcpy(copy, p, size)
    try:
        for i in range(n):
            off = u16(copy + DIR_START + 4 * i)
            ln = u16(copy + DIR_START + 4 * i + 2)
            if off + ln > size or ln > top - (DIR_START + 4 * n):
                raise ValueError(f"slot {i} ([{off}, {off + ln})) passes the page end")
            top -= ln
            memcpy(p + top, copy + off, ln)
            put16(p + DIR_START + 4 * i, top)
        put16(p + HEADER_SIZE, n)
        put16(p + HEADER_SIZE + 2, top)
    finally:
        free(copy)
    return 0


cdef int _insert(unsigned char *p, Py_ssize_t size, Py_ssize_t i, const unsigned char *body,
                 Py_ssize_t ln) except -1:
    """``insert`` on a page in memory."""
    cdef Py_ssize_t n, used, top, d, free_now
    used = _used(p, size, &n)
    top = u16(p + HEADER_SIZE + 2)
    if not 0 <= i <= n:
        raise ValueError(f"slot {i} outside 0..{n}")
    free_now = size - DIR_START - 4 * n - used
    if free_now < ln + 4:
        raise PageFull(f"record of {ln} bytes does not fit ({free_now} free)")
    if top > size or top - (DIR_START + 4 * (n + 1)) < ln:
        _compact(p, size, n)
        top = u16(p + HEADER_SIZE + 2)
    top -= ln
    if ln:
        memcpy(p + top, body, ln)
    d = DIR_START + 4 * i
    memmove(p + d + 4, p + d, 4 * (n - i))
    put16(p + d, top)
    put16(p + d + 2, ln)
    put16(p + HEADER_SIZE, n + 1)
    put16(p + HEADER_SIZE + 2, top)
    return 0


def insert(unsigned char[::1] buf, Py_ssize_t i, const unsigned char[::1] body) -> None:
    """Insert ``body`` as slot ``i`` (later slots shift up by one)."""
    _insert(&buf[0], buf.shape[0], i, &body[0] if body.shape[0] else NULL, body.shape[0])


cdef Py_ssize_t _slot(const unsigned char *p, Py_ssize_t size, Py_ssize_t i, Py_ssize_t *off,
                      Py_ssize_t *ln) except -1:
    """Slot count; the body of slot ``i`` at ``off`` (``ln`` bytes), checked to lie in the page."""
    cdef Py_ssize_t n = _count(p, size), d
    if not 0 <= i < n:
        raise ValueError(f"slot {i} outside 0..{n - 1}")
    d = DIR_START + 4 * i
    off[0] = u16(p + d)
    ln[0] = u16(p + d + 2)
    if off[0] + ln[0] > size:
        raise ValueError(f"slot {i} ([{off[0]}, {off[0] + ln[0]})) passes the page end")
    return n


cdef void _remove(unsigned char *p, Py_ssize_t n, Py_ssize_t i) noexcept:
    """Slot ``i`` (checked by ``_slot``) out of the directory; its body stays until a compaction."""
    cdef Py_ssize_t d = DIR_START + 4 * i
    memmove(p + d, p + d + 4, 4 * (n - 1 - i))
    memset(p + DIR_START + 4 * (n - 1), 0, 4)
    put16(p + HEADER_SIZE, n - 1)


def delete(unsigned char[::1] buf, Py_ssize_t i) -> bytes:
    """Remove slot ``i`` (later slots shift down) and return its body; its bytes are reclaimed
    by the next compaction."""
    cdef unsigned char *p = &buf[0]
    cdef Py_ssize_t off, ln
    cdef Py_ssize_t n = _slot(p, buf.shape[0], i, &off, &ln)
    old = (<char *>p)[off:off + ln]
    _remove(p, n, i)
    return old


def records(const unsigned char[::1] buf) -> list:
    """Every slot's body, in slot order (a split moves half of them; scans read them all)."""
    cdef const unsigned char *p = &buf[0]
    cdef Py_ssize_t size = buf.shape[0], n = _count(p, size), i, off, ln
    out = []
    for i in range(n):
        off = u16(p + DIR_START + 4 * i)
        ln = u16(p + DIR_START + 4 * i + 2)
        if off + ln > size:
            raise ValueError(f"slot {i} ([{off}, {off + ln})) passes the page end")
        out.append((<const char *>p)[off:off + ln])
    return out


# ----- runs of records: a split's or a merge's move (``OP_SLOTS_CUT`` / ``OP_SLOTS_PASTE``) --------
# The payload is ``index u16, count u16`` and then ``count`` × ``(length u16, bytes)`` (little-
# endian, ``traxfs.fs.struct.common.run_payload``): the records in slot order from ``index``.

cdef Py_ssize_t _run_count(const unsigned char *r, Py_ssize_t size, Py_ssize_t *index) except -1:
    """Index (into ``index``) and record count of a run payload, checked to hold them all."""
    cdef Py_ssize_t count, j, pos = 4
    if size < 4:
        raise ValueError(f"a run of records of {size} bytes has no header")
    index[0] = u16(r)
    count = u16(r + 2)
    for j in range(count):
        if pos + 2 > size or pos + 2 + u16(r + pos) > size:
            raise ValueError(f"a run of {count} records ends inside record {j}")
        pos += 2 + u16(r + pos)
    if pos != size:
        raise ValueError(f"a run of {count} records has {size - pos} bytes past its end")
    return count


def paste_run(unsigned char[::1] buf, const unsigned char[::1] run) -> None:
    """Insert a run's records as slots ``index ..`` (the redo of ``OP_SLOTS_PASTE``): one insert
    after the other, so the page's bytes are those the inserts one by one would leave. A run
    that does not fit in all (``PageFull``) or starts past the last slot is refused whole."""
    cdef unsigned char *p = &buf[0]
    cdef const unsigned char *r = &run[0] if run.shape[0] else NULL
    cdef Py_ssize_t size = buf.shape[0], index, j, pos = 4, ln, n, need
    cdef Py_ssize_t count = _run_count(r, run.shape[0], &index)
    cdef Py_ssize_t free_now = free_bytes(p, size)
    n = _count(p, size)
    if not 0 <= index <= n:
        raise ValueError(f"slot {index} outside 0..{n}")
    need = run.shape[0] - 4 + 2 * count  # each record's bytes and its 4-byte directory entry
    if free_now < need:
        raise PageFull(f"{count} records of {need} bytes with their slots do not fit ({free_now} free)")
    for j in range(count):
        ln = u16(r + pos)
        _insert(p, buf.shape[0], index + j, r + pos + 2, ln)
        pos += 2 + ln


def cut_run(unsigned char[::1] buf, const unsigned char[::1] run) -> None:
    """Delete slots ``index ..`` holding exactly the run's records (the redo of
    ``OP_SLOTS_CUT``), the last first; a slot that holds another record is refused
    (``ValueError``) and nothing is deleted."""
    cdef unsigned char *p = &buf[0]
    cdef const unsigned char *r = &run[0] if run.shape[0] else NULL
    cdef Py_ssize_t size = buf.shape[0], index, j, pos = 4, ln, off, have, n
    cdef Py_ssize_t count = _run_count(r, run.shape[0], &index)
    n = _count(p, size)
    if index + count > n:
        raise ValueError(f"slots_cut: slots {index}..{index + count - 1} beyond {n}")
    for j in range(count):
        ln = u16(r + pos)
        _slot(p, size, index + j, &off, &have)
        if have != ln or memcmp(p + off, r + pos + 2, ln):
            raise ValueError(f"slots_cut: slot {index + j} does not hold the logged record")
        pos += 2 + ln
    for j in range(count - 1, -1, -1):
        _remove(p, n, index + j)
        n -= 1


# ----- patches: the bytes that changed in a record of the same length ------------------------------
# A run list is ``(offset u16, length u16, old bytes, new bytes)`` repeated: what an overwrite of a
# value by one of the same length changed, instead of the old and the new record whole (an inode
# record or a checksum group rewritten for a few bytes logged ~150 and ~1,000 bytes).
cdef Py_ssize_t RUN_GAP = 8  # equal bytes between two differences that still join them (a run costs 4)


def diff_runs(const unsigned char[::1] old, const unsigned char[::1] new, Py_ssize_t base=0) -> bytes:
    """The runs that turn ``old`` into ``new`` (equal lengths), offsets shifted by ``base``."""
    if new.shape[0] != old.shape[0]:
        raise ValueError(f"a patch needs equal lengths ({old.shape[0]} and {new.shape[0]} bytes)")
    return diff_bytes(&old[0] if old.shape[0] else NULL, &new[0] if new.shape[0] else NULL, old.shape[0], base)


cdef inline bint same8(const unsigned char *a, const unsigned char *b) noexcept nogil:
    cdef uint64_t x, y
    memcpy(&x, a, 8)
    memcpy(&y, b, 8)
    return x == y


cdef bytes diff_bytes(const unsigned char *old, const unsigned char *new, Py_ssize_t n, Py_ssize_t base):
    """``diff_runs`` on two buffers of ``n`` bytes, for C callers (``ext/treeleaf.pyx``: a B+tree
    overwrite's redo and undo): no memoryviews taken, equal stretches skipped 8 bytes at a time."""
    cdef Py_ssize_t i = 0, start, end, same, ln, pos = 0
    cdef unsigned char *o
    if base < 0 or base + n > 0xFFFF:
        raise ValueError(f"patch offsets {base}..{base + n} outside 0..65535")
    o = <unsigned char *>malloc(4 + 2 * n + 4 * (n // (RUN_GAP + 1) + 1))  # room for the worst case
    if o == NULL:
        raise MemoryError()
    try:
        while i < n:
            while i + 8 <= n and same8(old + i, new + i):
                i += 8
            if i >= n:
                break
            if old[i] == new[i]:
                i += 1
                continue
            start = end = i
            while i < n:
                if old[i] != new[i]:
                    end = i + 1
                    i += 1
                    continue
                same = 0
                while i < n and old[i] == new[i] and same < RUN_GAP:
                    i += 1
                    same += 1
                if i >= n or same >= RUN_GAP:
                    break
            ln = end - start
            put16(o + pos, base + start)
            put16(o + pos + 2, ln)
            memcpy(o + pos + 4, old + start, ln)
            memcpy(o + pos + 4 + ln, new + start, ln)
            pos += 4 + 2 * ln
        return PyBytes_FromStringAndSize(<char *>o, pos)
    finally:
        free(o)


cdef int _check_runs(const unsigned char *r, Py_ssize_t size, Py_ssize_t target) except -1:
    cdef Py_ssize_t pos = 0, off, ln
    while pos < size:
        if pos + 4 > size:
            raise ValueError("patch runs end inside a run header")
        off, ln = u16(r + pos), u16(r + pos + 2)
        if pos + 4 + 2 * ln > size:
            raise ValueError("patch runs end inside a run")
        if off + ln > target:
            raise ValueError(f"patch run [{off}, {off + ln}) passes the end of a {target}-byte record")
        pos += 4 + 2 * ln
    return 0


cdef int _apply(unsigned char *t, Py_ssize_t tsize, const unsigned char *r, Py_ssize_t size, bint forward) except -1:
    """Check every run's expected bytes first, then write: a mismatch changes nothing."""
    cdef Py_ssize_t pos = 0, off, ln, have, put
    _check_runs(r, size, tsize)
    while pos < size:
        off, ln = u16(r + pos), u16(r + pos + 2)
        have = pos + 4 if forward else pos + 4 + ln
        if memcmp(t + off, r + have, ln):
            raise ValueError(f"patch run [{off}, {off + ln}): the record does not hold the logged bytes")
        pos += 4 + 2 * ln
    pos = 0
    while pos < size:
        off, ln = u16(r + pos), u16(r + pos + 2)
        put = pos + 4 + ln if forward else pos + 4
        memcpy(t + off, r + put, ln)
        pos += 4 + 2 * ln
    return 0


def apply_runs(unsigned char[::1] target, const unsigned char[::1] runs, bint forward=True) -> None:
    """Patch ``target`` in place: old -> new (``forward``) or new -> old."""
    if runs.shape[0]:
        _apply(&target[0] if target.shape[0] else NULL, target.shape[0], &runs[0], runs.shape[0], forward)


def swap_runs(const unsigned char[::1] runs) -> bytes:
    """The same runs with old and new exchanged (the undo of a patch)."""
    cdef Py_ssize_t size = runs.shape[0], pos = 0, ln
    out = bytearray(size)
    cdef unsigned char *o = out
    if size:
        _check_runs(&runs[0], size, 0x10000)
    while pos < size:
        ln = u16(&runs[pos + 2])
        memcpy(o + pos, &runs[pos], 4)
        memcpy(o + pos + 4, &runs[pos + 4 + ln], ln)
        memcpy(o + pos + 4 + ln, &runs[pos + 4], ln)
        pos += 4 + 2 * ln
    return bytes(out)


# ----- the redos of the slot operations (``traxfs.fs.engine.opcodes``): ``index u16`` and a body ---
# Every B+tree, hash and list change runs one, forward and in recovery; as Python wrappers their
# unpacking and slicing cost a tenth of a B+tree put.

cdef Py_ssize_t _index(const unsigned char[::1] payload) except -1:
    if payload.shape[0] < 2:
        raise ValueError(f"a slot operation of {payload.shape[0]} bytes has no slot index")
    return u16(&payload[0])


def insert_redo(unsigned char[::1] buf, const unsigned char[::1] payload) -> None:
    """``OP_SLOT_INSERT``: insert the body as slot ``index``."""
    cdef Py_ssize_t i = _index(payload)
    _insert(&buf[0], buf.shape[0], i, &payload[2] if payload.shape[0] > 2 else NULL, payload.shape[0] - 2)


def delete_redo(unsigned char[::1] buf, const unsigned char[::1] payload) -> None:
    """``OP_SLOT_DELETE``: remove slot ``index`` (the logged body is the undo's)."""
    cdef unsigned char *p = &buf[0]
    cdef Py_ssize_t off, ln, i = _index(payload)
    _remove(p, _slot(p, buf.shape[0], i, &off, &ln), i)


def patch_redo(unsigned char[::1] buf, const unsigned char[::1] payload) -> None:
    """``OP_SLOT_PATCH``: apply the runs (old -> new) to the body of slot ``index``."""
    cdef unsigned char *p = &buf[0]
    cdef Py_ssize_t off, ln, i = _index(payload)
    _slot(p, buf.shape[0], i, &off, &ln)
    if payload.shape[0] > 2:
        _apply(p + off, ln, &payload[2], payload.shape[0] - 2, True)

# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Verifying a run of file data pages against their datasums record in one call, and summing a
run of pages just written.

Every read of file data checks each page it reads (``traxfs.fs.datasums``). In Python the loop
over a run's pages — decoding each page's slot, slicing the page, calling crc32c — cost about
3 us a page, several times the read itself; here it is one call per group of 128 pages, and the
checksum is still the ``crc32c`` package's (hardware-accelerated), called on a view of each page
(no copies). The layout of the record is ``traxfs.fs.datasums``' (valid and pending bitmaps of
128 bits, big-endian, then 6-byte slots: crc u32, length u16); ``DataSums.verify_run`` is the
Python that handles every page this function does not pass.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.tuple cimport PyTuple_Check, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t

import crc32c as _crc32c_module

cdef object _crc32c = _crc32c_module.crc32c


cdef extern from "Python.h":
    object PyMemoryView_FromMemory(char *mem, Py_ssize_t size, int flags)
    int PyBUF_READ


cdef enum:
    PAGE = 4096
    GROUP = 128
    BITS = GROUP // 8
    HEAD = 2 * BITS
    SLOT = 6


cdef inline bint bit(const uint8_t *bitmap, Py_ssize_t k) noexcept nogil:
    """Bit ``k`` of a big-endian bitmap of GROUP bits."""
    return (bitmap[BITS - 1 - k // 8] >> (k % 8)) & 1


cdef inline uint32_t slot_crc(const uint8_t *s) noexcept nogil:
    """The crc of the slot at ``s`` (big-endian u32)."""
    return (<uint32_t>s[0] << 24) | (<uint32_t>s[1] << 16) | (<uint32_t>s[2] << 8) | s[3]


cdef inline unsigned int slot_length(const uint8_t *s) noexcept nogil:
    """The length of the slot at ``s`` (big-endian u16 after the crc)."""
    return (<unsigned int>s[4] << 8) | s[5]


def check_pages(object value, object blob, Py_ssize_t first, Py_ssize_t slot, Py_ssize_t count,
                Py_ssize_t last_hi):
    """Pages ``first .. first+count-1`` of ``blob`` (whole 4 KiB pages) against slots
    ``slot .. slot+count-1`` of the datasums record ``value``. A page passes if its slot is valid
    and not pending, its length covers the bytes read (all of the page, or ``last_hi`` bytes of
    the run's last page) and the crc32c of that prefix matches. Returns the indexes (from 0) of
    the pages that do not pass, for the caller to look at one by one."""
    cdef Py_buffer vb, bb
    cdef const uint8_t *v
    cdef const uint8_t *s
    cdef Py_ssize_t k, n, end
    cdef uint32_t want
    if slot < 0 or count < 0 or slot + count > GROUP or first < 0:
        raise ValueError(f"slots {slot}..{slot + count} outside a group of {GROUP}")
    out = []
    PyObject_GetBuffer(value, &vb, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(blob, &bb, PyBUF_SIMPLE)
        try:
            if vb.len < HEAD + GROUP * SLOT:
                raise ValueError(f"datasums record of {vb.len} bytes")
            if bb.len < (first + count) * PAGE:
                raise ValueError(f"{bb.len} bytes hold fewer than {first + count} pages")
            v = <const uint8_t *>vb.buf
            for k in range(count):
                if not bit(v, slot + k) or bit(v + BITS, slot + k):
                    out.append(k)
                    continue
                s = v + HEAD + (slot + k) * SLOT
                want = slot_crc(s)
                n = slot_length(s)
                end = last_hi if k == count - 1 else PAGE
                if n < end or n > PAGE:
                    out.append(k)
                    continue
                view = PyMemoryView_FromMemory(<char *>bb.buf + (first + k) * PAGE, n, PyBUF_READ)
                if _crc32c(view) != want:
                    out.append(k)
        finally:
            PyBuffer_Release(&bb)
    finally:
        PyBuffer_Release(&vb)
    return out


def page_sums(object blob, object sum_type):
    """The sums of a run of pages written from their start with the bytes of ``blob`` (whole
    pages; the last may be partial): a list of ``sum_type`` tuples ``(crc, length, 0, 0,
    False)``, one per page. In Python the slicing, the call and the tuple per page cost ~1.5 us
    a page, four times the checksum itself (a 1 MiB write spent 400 us here)."""
    cdef Py_buffer bb
    cdef Py_ssize_t at, n
    cdef object make = tuple.__new__
    out = []
    PyObject_GetBuffer(blob, &bb, PyBUF_SIMPLE)
    try:
        at = 0
        while at < bb.len:
            n = min(PAGE, bb.len - at)
            view = PyMemoryView_FromMemory(<char *>bb.buf + at, n, PyBUF_READ)
            out.append(make(sum_type, (_crc32c(view), n, 0, 0, False)))
            at += PAGE
    finally:
        PyBuffer_Release(&bb)
    return out


def pack_settled(object value, Py_ssize_t slot, list run):
    """Write the settled sums ``run`` (``(crc, length, ...)`` tuples, ``pending`` at index 4
    false) into consecutive slots of the datasums record ``value`` (a bytearray) from ``slot``.
    True if written; False, and ``value`` untouched, if any is None or pending (the caller's
    general path handles those one by one). The common case of every write, in one call."""
    cdef Py_buffer vb
    cdef uint8_t *s
    cdef Py_ssize_t k, n = len(run)
    cdef uint32_t crc
    cdef unsigned int length
    cdef object item
    if slot < 0 or slot + n > GROUP:
        raise ValueError(f"slots {slot}..{slot + n} outside a group of {GROUP}")
    for item in run:  # (read as a tuple: indexing a NamedTuple subclass generically is 10x slower)
        if item is None:
            return False
        if not PyTuple_Check(item) or PyTuple_GET_SIZE(item) < 5:
            raise ValueError(f"not a sum of a page: {item!r}")
        if <object>PyTuple_GET_ITEM(item, 4):
            return False
        if not 0 <= <object>PyTuple_GET_ITEM(item, 0) <= 0xFFFFFFFF or not 0 <= <object>PyTuple_GET_ITEM(item, 1) <= PAGE:
            raise ValueError(f"not a sum of a page: {item!r}")
    PyObject_GetBuffer(value, &vb, PyBUF_WRITABLE)
    try:
        if vb.len < HEAD + GROUP * SLOT:
            raise ValueError(f"datasums record of {vb.len} bytes")
        for k in range(n):
            item = run[k]
            crc = <object>PyTuple_GET_ITEM(item, 0)
            length = <object>PyTuple_GET_ITEM(item, 1)
            s = <uint8_t *>vb.buf + HEAD + (slot + k) * SLOT
            s[0], s[1], s[2], s[3] = crc >> 24, (crc >> 16) & 0xFF, (crc >> 8) & 0xFF, crc & 0xFF
            s[4], s[5] = length >> 8, length & 0xFF
    finally:
        PyBuffer_Release(&vb)
    return True


def read_slots(object value, Py_ssize_t slot, Py_ssize_t count, object sum_type, dict alts):
    """The sums in slots ``slot .. slot+count-1`` of the datasums record ``value``: None where
    the valid bit is clear; ``sum_type(crc, length, alt_crc, alt_length, True)`` where the pending
    bit is set (the alternative from ``alts``: slot -> (crc, length), (0, 0) if absent); else
    ``sum_type(crc, length, 0, 0, False)``. Every overwrite looks its pages' sums up: in Python,
    unpacking the record's 256 fields cost more than the B+tree lookup that found it."""
    cdef Py_buffer vb
    cdef const uint8_t *v
    cdef const uint8_t *s
    cdef Py_ssize_t k
    cdef uint32_t crc
    cdef unsigned int length
    cdef object make = tuple.__new__
    if slot < 0 or count < 0 or slot + count > GROUP:
        raise ValueError(f"slots {slot}..{slot + count} outside a group of {GROUP}")
    out = []
    PyObject_GetBuffer(value, &vb, PyBUF_SIMPLE)
    try:
        if vb.len < HEAD + GROUP * SLOT:
            raise ValueError(f"datasums record of {vb.len} bytes")
        v = <const uint8_t *>vb.buf
        for k in range(slot, slot + count):
            if not bit(v, k):
                out.append(None)
                continue
            s = v + HEAD + k * SLOT
            crc = slot_crc(s)
            length = slot_length(s)
            if bit(v + BITS, k):
                alt_crc, alt_length = alts.get(k, (0, 0))
                out.append(make(sum_type, (crc, length, alt_crc, alt_length, True)))
            else:
                out.append(make(sum_type, (crc, length, 0, 0, False)))
    finally:
        PyBuffer_Release(&vb)
    return out

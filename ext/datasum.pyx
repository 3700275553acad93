# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Verifying a run of file data pages against their datasums record in one call.

Every read of file data checks each page it reads (``traxfs.fs.datasums``). In Python the loop
over a run's pages — decoding each page's slot, slicing the page, calling crc32c — cost about
3 us a page, several times the read itself; here it is one call per group of 128 pages, and the
checksum is still the ``crc32c`` package's (hardware-accelerated), called on a view of each page
(no copies). The layout of the record is ``traxfs.fs.datasums``' (valid and pending bitmaps of
128 bits, big-endian, then 6-byte slots: crc u32, length u16); ``DataSums.verify_run`` is the
Python that handles every page this function does not pass.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
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
                want = (<uint32_t>s[0] << 24) | (<uint32_t>s[1] << 16) | (<uint32_t>s[2] << 8) | s[3]
                n = (<Py_ssize_t>s[4] << 8) | s[5]
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

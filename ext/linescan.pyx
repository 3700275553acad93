# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Counting the lines of an append batch and telling whether it is plain ASCII, in one pass.

Every append checks its batch (``traxfs.fs.queues.records``) and counts the lines of each part
that goes into a block (``traxfs.fs.queues.queue``). ``bytes.count(b"\\n")`` runs at about
2.6 GB/s here and a UTF-8 decode adds a pass of its own; this loop does both jobs on 64-byte
strides the compiler vectorizes, so an ASCII batch (the common case) is read once and never
decoded. A batch that is not ASCII is still validated by Python's UTF-8 decoder.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport uint8_t

cdef enum:
    STRIDE = 64


def scan_lines(data, Py_ssize_t start=0, Py_ssize_t end=-1):
    """(newlines in ``data[start:end]``, True if every byte there is ASCII). ``end`` -1: the
    end of ``data``; any object with the buffer protocol (bytes, bytearray, memoryview)."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    cdef const uint8_t *p = <const uint8_t *> view.buf
    cdef Py_ssize_t n = view.len, i, j, lines = 0
    cdef uint8_t high = 0, c, k
    try:
        if end < 0 or end > n:
            end = n
        if start < 0 or start > end:
            raise ValueError(f"scan_lines: range [{start}, {end}) outside the {n} bytes")
        i = start
        with nogil:
            while i + STRIDE <= end:
                k = 0
                for j in range(STRIDE):  # fixed trip count: vectorized
                    c = p[i + j]
                    k += c == 10
                    high |= c
                lines += k
                i += STRIDE
            while i < end:
                c = p[i]
                lines += c == 10
                high |= c
                i += 1
        return lines, high < 0x80
    finally:
        PyBuffer_Release(&view)

# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Log record encoding in C: the engine encodes every record it logs (two or more per transaction),
and in Python packing the 64-byte header, concatenating the payload and checksumming cost about
0.45 us a record (8% of a durable single-update transaction's CPU).

The format is ``traxfs.fs.engine.logrecord``'s (its docstring has the layout); its ``encode`` is
the reference this function must match byte for byte (tests/test_logcodec.py).  The checksum is
the ``crc32c`` package's, called on views of the record (no copies).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

import crc32c as _crc32c_module

cdef object _crc32c = _crc32c_module.crc32c

cdef enum:
    HEADER_SIZE = 64
    MAX_PAYLOAD = 256 * 1024


cdef inline void put_u16(char *p, uint16_t v) noexcept nogil:
    p[0] = <char>(v & 0xff)
    p[1] = <char>(v >> 8)


cdef inline void put_u32(char *p, uint32_t v) noexcept nogil:
    cdef int i
    for i in range(4):
        p[i] = <char>((v >> (8 * i)) & 0xff)


cdef inline void put_u64(char *p, uint64_t v) noexcept nogil:
    cdef int i
    for i in range(8):
        p[i] = <char>((v >> (8 * i)) & 0xff)


cdef extern from "Python.h":
    object PyMemoryView_FromMemory(char *mem, Py_ssize_t size, int flags)
    int PyBUF_READ


cdef bytes encode_record(unsigned int rtype, uint64_t xid, uint64_t prev_lsn, uint64_t page, unsigned int opcode,
                         uint64_t undo_next, const char *payload, Py_ssize_t plen, uint32_t epoch, uint32_t seed):
    """The record's bytes (see ``encode``), its payload given as a pointer and a length."""
    cdef Py_ssize_t total
    cdef char *p
    if rtype > 255 or opcode > 65535:
        raise ValueError(f"record type {rtype} or opcode {opcode} out of range")
    if plen > MAX_PAYLOAD:
        raise ValueError(f"log record payload of {plen} bytes exceeds the limit of {MAX_PAYLOAD}")
    total = (HEADER_SIZE + plen + 7) & ~7
    out = PyBytes_FromStringAndSize(NULL, total)
    p = PyBytes_AS_STRING(out)
    put_u32(p + 4, <uint32_t>total)
    put_u64(p + 8, 0)
    put_u32(p + 16, epoch)
    p[20] = <char><uint8_t>rtype
    p[21] = 0
    put_u16(p + 22, <uint16_t>opcode)
    put_u64(p + 24, xid)
    put_u64(p + 32, prev_lsn)
    put_u64(p + 40, page)
    put_u64(p + 48, undo_next)
    put_u32(p + 56, <uint32_t>plen)
    put_u32(p + 60, 0)
    memcpy(p + HEADER_SIZE, payload, <size_t>plen)
    memset(p + HEADER_SIZE + plen, 0, <size_t>(total - HEADER_SIZE - plen))
    # the crc covers bytes [4, 8) then [16, total): views straight onto the record, no slices
    crc = _crc32c(PyMemoryView_FromMemory(p + 16, total - 16, PyBUF_READ),
                  _crc32c(PyMemoryView_FromMemory(p + 4, 4, PyBUF_READ), seed))
    put_u32(p, <uint32_t>crc)
    return out


def encode(unsigned int rtype, uint64_t xid, uint64_t prev_lsn, uint64_t page, unsigned int opcode,
           uint64_t undo_next, payload, uint32_t epoch, uint32_t seed) -> bytes:
    """A record ready for the log buffer (its LSN field zero until the buffer fills it); the
    same bytes as ``traxfs.fs.engine.logrecord.encode``."""
    cdef Py_buffer view
    PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
    try:
        return encode_record(rtype, xid, prev_lsn, page, opcode, undo_next, <const char *>view.buf, view.len,
                             epoch, seed)
    finally:
        PyBuffer_Release(&view)

# The log record encoder (ext/logcodec.pyx), shared with ext/logapply.pyx, which logs the engine's
# page operations from C.

from libc.stdint cimport uint32_t, uint64_t

cdef bytes encode_record(unsigned int rtype, uint64_t xid, uint64_t prev_lsn, uint64_t page, unsigned int opcode,
                         uint64_t undo_next, const char *payload, Py_ssize_t plen, uint32_t epoch, uint32_t seed)

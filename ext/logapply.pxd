# The engine's logged page update and log append (ext/logapply.pyx), shared with
# ext/treeleaf.pyx, whose B+tree changes inside one leaf log through them from C.

from libc.stdint cimport uint32_t, uint64_t

from .logbuffer cimport _LogBuffer
from .pagepin cimport PinTable


cdef class LogAppender:
    cdef _LogBuffer buffer
    cdef object insert
    cdef readonly uint32_t epoch, seed
    cdef public uint64_t trunc_lsn
    cdef uint64_t pressure_at, limit, system_limit, region
    cdef object on_pressure, log_full
    cdef public uint64_t records

    cdef tuple put(self, unsigned int rtype, uint64_t xid, uint64_t prev_lsn, uint64_t page, unsigned int opcode,
                   uint64_t undo_next, const char *payload, Py_ssize_t plen, bint system)


cdef class PageApplier:
    cdef LogAppender log
    cdef PinTable pins
    cdef object pin_slow, registry, lookup, first_change, active

    cdef tuple append_tx(self, tx, unsigned int rtype, uint64_t page, unsigned int opcode, uint64_t undo_next,
                         const char *payload, Py_ssize_t plen, new_state)
    cdef object apply_op(self, tx, pid, unsigned int opcode, payload, unsigned int rtype, uint64_t undo_next,
                         bint fresh)
    cdef object update_op(self, tx, pid, unsigned int opcode, payload, bint fresh)

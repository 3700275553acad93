# The buffer's page access (ext/pagepin.pyx), shared with ext/nodesearch.pyx, whose B+tree
# descent pins, latches and reads each level's page from C.

cdef class Frame:
    cdef public object pid
    cdef public object data
    cdef public long pins
    cdef public bint dirty
    cdef public object rec_lsn
    cdef public object latch
    cdef public object loaded
    cdef public bint ready
    cdef public object error


cdef class PinTable:
    cdef object frames
    cdef object lock_acquire, lock_release, move_to_end
    cdef public unsigned long long hits

    cpdef Frame pin_resident(self, pid)
    cpdef void unpin(self, Frame f)

# The buffer's page access (ext/pagepin.pyx), shared with ext/nodesearch.pyx, whose B+tree
# descent pins, latches and reads each level's page from C, and with ext/treeleaf.pyx and
# ext/logapply.pyx, which take latches from C.

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass


cdef class Latch:
    cdef pthread_mutex_t mu
    cdef unsigned long owner
    cdef long count
    cdef bint reentrant
    cdef bint take_nowait(self) noexcept
    cdef int take(self) except -1
    cdef int give(self) except -1


# a latch from C: a Latch without a Python call, any other lock (a test's threading.RLock)
# through its methods
cdef inline bint latch_try(object latch) except -1:
    if type(latch) is Latch:
        return (<Latch>latch).take_nowait()
    return latch.acquire(False)


cdef inline int latch_take(object latch) except -1:
    if type(latch) is Latch:
        return (<Latch>latch).take()
    latch.acquire()
    return 0


cdef inline int latch_give(object latch) except -1:
    if type(latch) is Latch:
        return (<Latch>latch).give()
    latch.release()
    return 0

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
    cdef object lock
    cdef object move_to_end
    cdef public unsigned long long hits

    cpdef Frame pin_resident(self, pid)
    cpdef void unpin(self, Frame f)

# cython: language_level=3, boundscheck=False, wraparound=False
"""The buffer manager's page access in C: frames, the pin of a resident page, and
``with engine.page(pid) as frame`` (pin + latch, then unlatch + unpin).

Every structure operation goes through here several times: a B+tree put pins ~8 pages (the
header, each level of the descent, the leaf, the pages its log records change), and in Python
each access — a context manager, the table lock, an ``OrderedDict`` lookup and move, a latch —
cost ~1.3 µs, about a quarter of the put. Here it is one C call each way.

Only the common case is handled: the page is resident and loaded. Anything else (a miss, a page
still loading, a failed load) goes to
``BufferManager.pin`` in Python, which owns loading, eviction and errors. The rules are the
buffer manager's (``traxfs.fs.engine.buffer``): pin counts change only under the table lock;
an LRU move per pin; the latch taken after the pin and released before the unpin (the B+tree
descent in ``nodesearch`` pins through the same table: the classes are declared in
``pagepin.pxd``). Like every module of ``ext``, it imports nothing of the package: the buffer
hands in its table and its lock.

**Latches** (:class:`Latch`): the frames' latches, the buffer's table lock and the B+tree's
latch are taken several times per B+tree change, mostly from C. A ``threading.Lock`` or
``RLock`` called from C parses its arguments and reads the clock on every ``acquire`` (about a
dozen pairs per put, ~0.2–0.3 µs each); a ``Latch`` is a pthread mutex (the GIL released only
while waiting) with the same Python face (``acquire`` with ``blocking`` and ``timeout``,
``release``, ``with``, ``locked``) and C entry points that take no arguments (``latch_try`` /
``latch_take`` / ``latch_give`` in ``pagepin.pxd``). Unlike ``threading.Lock``, only the
thread holding a latch may release it, and a thread taking a lock (not re-entrant) it already
holds gets an error instead of waiting for ever.
"""

from cpython.pythread cimport PyThread_get_thread_ident
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec


cdef extern from "<pthread.h>" nogil:
    int pthread_mutex_init(pthread_mutex_t *mutex, const void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *mutex)
    int pthread_mutex_lock(pthread_mutex_t *mutex)
    int pthread_mutex_trylock(pthread_mutex_t *mutex)
    int pthread_mutex_unlock(pthread_mutex_t *mutex)
    int pthread_mutex_timedlock(pthread_mutex_t *mutex, const timespec *abstime)


cdef class Latch:
    """A lock; re-entrant (as ``threading.RLock``: the owner may take it again, and must give
    it back as often) when made with ``reentrant=True``. A pthread mutex: the thread that takes
    it gives it back (CPython's own locks read the clock on every acquire, even a non-blocking
    one). Owner and count change only under the GIL, by the thread holding the mutex."""

    def __cinit__(self, bint reentrant=False):
        if pthread_mutex_init(&self.mu, NULL) != 0:
            raise MemoryError("no mutex")
        self.reentrant = reentrant

    def __dealloc__(self):
        pthread_mutex_destroy(&self.mu)

    cdef bint take_nowait(self) noexcept:
        cdef unsigned long me = <unsigned long>PyThread_get_thread_ident()
        if self.count and self.owner == me:
            if not self.reentrant:
                return False
            self.count += 1
            return True
        if pthread_mutex_trylock(&self.mu) == 0:
            self.owner, self.count = me, 1
            return True
        return False

    cdef int take(self) except -1:
        cdef unsigned long me
        if self.take_nowait():
            return 0
        me = <unsigned long>PyThread_get_thread_ident()
        if self.count and self.owner == me:  # a lock (not re-entrant) its holder takes again
            raise RuntimeError("deadlock: the thread holding this latch takes it again")
        with nogil:
            pthread_mutex_lock(&self.mu)
        self.owner, self.count = me, 1
        return 0

    cdef int give(self) except -1:
        if self.count == 0 or self.owner != <unsigned long>PyThread_get_thread_ident():
            raise RuntimeError("cannot release un-acquired lock")
        self.count -= 1
        if self.count == 0:
            self.owner = 0
            pthread_mutex_unlock(&self.mu)
        return 0

    def acquire(self, bint blocking=True, double timeout=-1) -> bool:
        cdef timespec until
        cdef int got
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if timeout < 0 and timeout != -1:
            raise ValueError("timeout value must be a non-negative number")
        if self.take_nowait():
            return True
        if not blocking:
            return False
        if timeout < 0:
            self.take()
            return True
        if self.count and self.owner == <unsigned long>PyThread_get_thread_ident():
            raise RuntimeError("deadlock: the thread holding this latch takes it again")
        clock_gettime(CLOCK_REALTIME, &until)
        until.tv_sec += <long>timeout
        until.tv_nsec += <long>((timeout - <long>timeout) * 1e9)
        if until.tv_nsec >= 1000000000:
            until.tv_sec += 1
            until.tv_nsec -= 1000000000
        with nogil:
            got = pthread_mutex_timedlock(&self.mu, &until)
        if got != 0:
            return False
        self.owner, self.count = <unsigned long>PyThread_get_thread_ident(), 1
        return True

    def release(self) -> None:
        self.give()

    def locked(self) -> bool:
        return self.count > 0

    def __enter__(self):
        self.take()
        return True

    def __exit__(self, *exc):
        self.give()


cdef class Frame:
    """One page in memory (see ``traxfs.fs.engine.buffer``). ``pins`` starts at 1: the thread
    that creates a frame holds it while it loads."""

    def __init__(self, pid, data, latch, loaded):
        self.pid = pid
        self.data = data  # a bytearray of one page
        self.pins = 1
        self.dirty = False
        self.rec_lsn = 0
        self.latch = latch  # a threading.RLock: protects the page's bytes during an operation
        self.loaded = loaded  # a threading.Event, set once loading ended, well or not
        self.ready = False  # loaded without error: the flag the fast pin reads
        self.error = None

    @property
    def lsn(self) -> int:
        return int.from_bytes(self.data[16:24], "little")


cdef class PinTable:
    """The fast half of the buffer's frame table: pin a resident page, unpin any."""

    def __init__(self, frames, lock):
        self.frames = frames  # the buffer's OrderedDict pid -> Frame (LRU order)
        self.lock = lock  # the buffer's table lock (a Latch)
        self.move_to_end = frames.move_to_end
        self.hits = 0

    cpdef Frame pin_resident(self, pid):
        """The frame of ``pid`` pinned, if resident and loaded; else None (nothing changed)."""
        cdef Frame f
        latch_take(self.lock)
        try:
            o = self.frames.get(pid)
            if o is None:
                return None
            f = <Frame>o
            if not f.ready:
                return None
            f.pins += 1
            self.move_to_end(pid)
            self.hits += 1
            return f
        finally:
            latch_give(self.lock)

    cpdef void unpin(self, Frame f):
        latch_take(self.lock)
        f.pins -= 1
        latch_give(self.lock)


cdef class PinnedPage:
    """``with PinnedPage(buffer, pid) as frame``: pin and latch a page for the block, release
    both after (the pin is dropped if the latch cannot be taken)."""

    cdef object buffer
    cdef PinTable table
    cdef object pid
    cdef Frame frame

    def __init__(self, buffer, pid):
        self.buffer = buffer
        self.table = buffer.pins
        self.pid = pid

    def __enter__(self):
        cdef Frame f = self.table.pin_resident(self.pid)
        if f is None:
            f = self.buffer.pin(self.pid)
        try:
            latch_take(f.latch)
        except BaseException:
            self.table.unpin(f)
            raise
        self.frame = f
        return f

    def __exit__(self, *exc):
        cdef Frame f = self.frame
        latch_give(f.latch)
        self.table.unpin(f)

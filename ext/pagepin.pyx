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
"""


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
        self.lock_acquire, self.lock_release = lock.acquire, lock.release
        self.move_to_end = frames.move_to_end
        self.hits = 0

    cpdef Frame pin_resident(self, pid):
        """The frame of ``pid`` pinned, if resident and loaded; else None (nothing changed)."""
        cdef Frame f
        self.lock_acquire()
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
            self.lock_release()

    cpdef void unpin(self, Frame f):
        self.lock_acquire()
        f.pins -= 1
        self.lock_release()


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
            f.latch.acquire()
        except BaseException:
            self.table.unpin(f)
            raise
        self.frame = f
        return f

    def __exit__(self, *exc):
        cdef Frame f = self.frame
        f.latch.release()
        self.table.unpin(f)

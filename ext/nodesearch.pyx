# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""B+tree node search in C: binary search over a slotted page's records without building a key
object per probe.

In Python every probe of a node search unpacked a slot, sliced the key out into a new bytes
object and compared it (``bisect`` with a key function): about ten probes and thirty calls per
inner node, a fifth of a B+tree put's time.  Here a probe is a bounds check and a ``memcmp``.

Page layout (``traxfs.fs.engine.slotted``): ``nslots`` u16 at byte ``HEADER_SIZE`` (32), then
the slot directory at ``DIR_START`` (36): ``(offset u16, length u16)`` per slot, in key order.
Leaf records (``traxfs.fs.struct.btree``) are ``klen u16 | key | value``; inner records are
``child u64 | key``.  Keys compare as Python bytes do (``memcmp``, then length).  A slot that
points outside the page raises ``ValueError`` naming it (a damaged page must not be read past its
end).  tests/test_nodesearch.py compares both searches with ``bisect`` over the keys.

:func:`descend` walks a B+tree from a node to the leaf that covers a key in one call: each
level's page is pinned and latched through the buffer's :class:`~traxfs.ext.pagepin.PinTable`
(``pagepin.pxd``), searched on its bytes, released. In Python the walk was a third of a put.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Check, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.string cimport memcmp

from .pagepin cimport Frame, PinTable, latch_give, latch_take

DIR_START = 36
cdef Py_ssize_t C_DIR_START = 36
cdef Py_ssize_t NSLOTS_AT = 32
ctypedef const unsigned char *Page


cdef inline int cmp_keys(const unsigned char *a, Py_ssize_t na, const unsigned char *b, Py_ssize_t nb) noexcept nogil:
    cdef Py_ssize_t m = na if na < nb else nb
    cdef int c
    if m:
        c = memcmp(a, b, <size_t>m)
        if c:
            return c
    return (na > nb) - (na < nb)


cdef inline Py_ssize_t nslots(Page buf, Py_ssize_t size) except -1:
    cdef Py_ssize_t n
    if size < C_DIR_START:
        raise ValueError(f"page of {size} bytes is too short for a slotted page")
    n = buf[NSLOTS_AT] | (buf[NSLOTS_AT + 1] << 8)
    if C_DIR_START + 4 * n > size:
        raise ValueError(f"slotted page claims {n} slots: the directory would pass the page end")
    return n


cdef inline int slot_key(Page buf, Py_ssize_t size, Py_ssize_t i, bint leaf, const unsigned char **key,
                         Py_ssize_t *klen) except -1:
    cdef Py_ssize_t d = C_DIR_START + 4 * i
    cdef Py_ssize_t off = buf[d] | (buf[d + 1] << 8)
    cdef Py_ssize_t ln = buf[d + 2] | (buf[d + 3] << 8)
    cdef Py_ssize_t kl
    if off + ln > size:
        raise ValueError(f"slot {i} ([{off}, {off + ln})) passes the page end")
    if leaf:
        if ln < 2:
            raise ValueError(f"leaf slot {i} holds {ln} bytes, too few for a key length")
        kl = buf[off] | (buf[off + 1] << 8)
        if 2 + kl > ln:
            raise ValueError(f"leaf slot {i}: key of {kl} bytes in a {ln}-byte record")
        key[0] = &buf[off + 2]
        klen[0] = kl
    else:
        if ln < 8:
            raise ValueError(f"inner slot {i} holds {ln} bytes, too few for a child pointer")
        key[0] = &buf[off + 8]
        klen[0] = ln - 8
    return 0


cdef inline void leaf_value(Page buf, Py_ssize_t i, Py_ssize_t kl, Py_ssize_t *voff, Py_ssize_t *vlen) noexcept:
    """Where leaf slot ``i``'s value is, its key of ``kl`` bytes (``slot_key`` checked the slot)."""
    cdef Py_ssize_t d = C_DIR_START + 4 * i
    voff[0] = (buf[d] | (buf[d + 1] << 8)) + 2 + kl
    vlen[0] = (buf[d + 2] | (buf[d + 3] << 8)) - 2 - kl


cdef inline Page start(const unsigned char[::1] view) noexcept:
    return &view[0] if view.shape[0] else NULL


def leaf_bisect(const unsigned char[::1] buf, const unsigned char[::1] key, bint right=False):
    """(index, slot count): the index of the first leaf key ``>= key`` (``right``: ``> key``)."""
    cdef Page b = start(buf)
    cdef Py_ssize_t size = buf.shape[0]
    cdef Py_ssize_t n = nslots(b, size)
    cdef Py_ssize_t lo = 0, hi = n, mid, kl
    cdef const unsigned char *k
    cdef Page probe = start(key)
    cdef int c
    while lo < hi:
        mid = (lo + hi) >> 1
        slot_key(b, size, mid, True, &k, &kl)
        c = cmp_keys(k, kl, probe, key.shape[0])
        if c < 0 or (right and c == 0):
            lo = mid + 1
        else:
            hi = mid
    return lo, n


cdef Py_ssize_t inner_index(Page b, Py_ssize_t size, Py_ssize_t n, Page probe, Py_ssize_t plen) except -1:
    """The child that covers the probe: the number of separators ``key[1..n-1] <= probe``
    (slot 0's key is unused, its child takes everything below slot 1)."""
    cdef Py_ssize_t lo = 1, hi = n, mid, kl
    cdef const unsigned char *k
    while lo < hi:
        mid = (lo + hi) >> 1
        slot_key(b, size, mid, False, &k, &kl)
        if cmp_keys(k, kl, probe, plen) <= 0:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


cdef unsigned long long inner_child(Page b, Py_ssize_t size, Py_ssize_t i) except? 0:
    cdef Py_ssize_t d = C_DIR_START + 4 * i
    cdef Py_ssize_t off = b[d] | (b[d + 1] << 8)
    cdef Py_ssize_t ln = b[d + 2] | (b[d + 3] << 8)
    cdef unsigned long long child = 0
    cdef int j
    if ln < 8 or off + ln > size:
        raise ValueError(f"inner slot {i} ([{off}, {off + ln})) holds no child pointer inside the page")
    for j in range(7, -1, -1):
        child = (child << 8) | b[off + j]
    return child


cdef int leaf_lookup(const unsigned char *b, Py_ssize_t size, const unsigned char *probe, Py_ssize_t plen,
                     Py_ssize_t *idx, Py_ssize_t *n_out, Py_ssize_t *voff, Py_ssize_t *vlen) except -1:
    """``leaf_find`` on a page in memory: 1 when ``probe`` is there (its value at ``voff``,
    ``vlen`` bytes), else 0; ``idx`` the index of the first key ``>= probe``, ``n_out`` the
    slot count."""
    cdef Py_ssize_t n = nslots(b, size)
    cdef Py_ssize_t lo = 0, hi = n, mid, kl
    cdef const unsigned char *k
    while lo < hi:
        mid = (lo + hi) >> 1
        slot_key(b, size, mid, True, &k, &kl)
        if cmp_keys(k, kl, probe, plen) < 0:
            lo = mid + 1
        else:
            hi = mid
    idx[0], n_out[0] = lo, n
    if lo < n:
        slot_key(b, size, lo, True, &k, &kl)
        if cmp_keys(k, kl, probe, plen) == 0:
            leaf_value(b, lo, kl, voff, vlen)
            return 1
    return 0


cdef list leaf_run(const unsigned char *b, Py_ssize_t size, Py_ssize_t i, object stop, bint *ended):
    """The entries ``(key, value)`` of a leaf from slot ``i`` whose keys are below ``stop``
    (bytes; None: unbounded); ``ended`` tells whether a key ``>= stop`` was met (else the run
    reached the leaf's last slot)."""
    cdef Py_ssize_t n = nslots(b, size)
    cdef Py_ssize_t kl, voff, vlen
    cdef const unsigned char *k
    cdef const unsigned char *s = NULL
    cdef Py_ssize_t slen = 0
    cdef list out = []
    if stop is not None:
        s = <const unsigned char *>PyBytes_AS_STRING(stop)
        slen = PyBytes_GET_SIZE(stop)
    ended[0] = False
    while i < n:
        slot_key(b, size, i, True, &k, &kl)
        if s != NULL and cmp_keys(k, kl, s, slen) >= 0:
            ended[0] = True
            break
        leaf_value(b, i, kl, &voff, &vlen)
        out.append((PyBytes_FromStringAndSize(<const char *>k, kl),
                    PyBytes_FromStringAndSize(<const char *>b + voff, vlen)))
        i += 1
    return out


def leaf_find(const unsigned char[::1] buf, const unsigned char[::1] key):
    """(index, slot count, value): the index of the first leaf key ``>= key``, and the value
    stored under ``key`` when that key is ``key`` itself (else None)."""
    cdef Py_ssize_t i, n, voff, vlen
    if leaf_lookup(start(buf), buf.shape[0], start(key), key.shape[0], &i, &n, &voff, &vlen):
        return i, n, bytes(buf[voff : voff + vlen])
    return i, n, None


def descend(PinTable table, pin, pid, bytes key, int inner_type, list path=None):
    """The leaf page that covers ``key``, from node ``pid`` down; ``path`` (if given) collects
    ``(inner pid, child index, slot count)`` per level. Each page is pinned (``table``, or
    ``pin(pid)`` — the buffer's loading path — when it is not resident), latched, searched and
    released before the next; the caller holds the tree's latch, so the walk is consistent."""
    return descend_to_leaf(table, pin, pid, key, inner_type, path)


cdef object descend_to_leaf(PinTable table, object pin, object pid, bytes key, int inner_type, list path):
    """``descend``, for C callers (``traxfs.ext.treeleaf``)."""
    cdef Frame f
    cdef Page b
    cdef Py_ssize_t size, n, i
    cdef unsigned long long child
    while True:
        f = table.pin_resident(pid)
        if f is None:
            f = pin(pid)
        try:
            latch_take(f.latch)
            try:
                data = f.data
                if not PyByteArray_Check(data):
                    raise TypeError(f"page {pid}: frame bytes are {type(data).__name__}, not a bytearray")
                b = <Page>PyByteArray_AS_STRING(data)
                size = PyByteArray_GET_SIZE(data)
                if size < 4 or b[3] != inner_type:
                    return pid
                n = nslots(b, size)
                if n == 0:
                    raise ValueError(f"inner node {pid} without children")
                i = inner_index(b, size, n, <Page>key, len(key))
                child = inner_child(b, size, i)
            finally:
                latch_give(f.latch)
        finally:
            table.unpin(f)
        if path is not None:
            path.append((pid, i, n))
        pid = child

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
"""

from libc.string cimport memcmp

DIR_START = 36
cdef Py_ssize_t C_DIR_START = 36
cdef Py_ssize_t NSLOTS_AT = 32


cdef inline int cmp_keys(const unsigned char *a, Py_ssize_t na, const unsigned char *b, Py_ssize_t nb) noexcept nogil:
    cdef Py_ssize_t m = na if na < nb else nb
    cdef int c
    if m:
        c = memcmp(a, b, <size_t>m)
        if c:
            return c
    return (na > nb) - (na < nb)


cdef inline Py_ssize_t nslots(const unsigned char[::1] buf) except -1:
    cdef Py_ssize_t n
    if buf.shape[0] < C_DIR_START:
        raise ValueError(f"page of {buf.shape[0]} bytes is too short for a slotted page")
    n = buf[NSLOTS_AT] | (buf[NSLOTS_AT + 1] << 8)
    if C_DIR_START + 4 * n > buf.shape[0]:
        raise ValueError(f"slotted page claims {n} slots: the directory would pass the page end")
    return n


cdef inline int slot_key(const unsigned char[::1] buf, Py_ssize_t i, bint leaf, const unsigned char **key,
                         Py_ssize_t *klen) except -1:
    cdef Py_ssize_t d = C_DIR_START + 4 * i
    cdef Py_ssize_t off = buf[d] | (buf[d + 1] << 8)
    cdef Py_ssize_t ln = buf[d + 2] | (buf[d + 3] << 8)
    cdef Py_ssize_t kl
    if off + ln > buf.shape[0]:
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


def leaf_bisect(const unsigned char[::1] buf, const unsigned char[::1] key, bint right=False):
    """(index, slot count): the index of the first leaf key ``>= key`` (``right``: ``> key``)."""
    cdef Py_ssize_t n = nslots(buf)
    cdef Py_ssize_t lo = 0, hi = n, mid, kl
    cdef const unsigned char *k
    cdef const unsigned char *probe = &key[0] if key.shape[0] else NULL
    cdef int c
    while lo < hi:
        mid = (lo + hi) >> 1
        slot_key(buf, mid, True, &k, &kl)
        c = cmp_keys(k, kl, probe, key.shape[0])
        if c < 0 or (right and c == 0):
            lo = mid + 1
        else:
            hi = mid
    return lo, n


def inner_bisect(const unsigned char[::1] buf, const unsigned char[::1] key):
    """(index, slot count): the child that covers ``key`` -- the number of separators
    ``key[1..n-1] <= key`` (slot 0's key is unused, its child takes everything below slot 1)."""
    cdef Py_ssize_t n = nslots(buf)
    cdef Py_ssize_t lo = 1, hi = n, mid, kl
    cdef const unsigned char *k
    cdef const unsigned char *probe = &key[0] if key.shape[0] else NULL
    if n == 0:
        return 0, 0
    while lo < hi:
        mid = (lo + hi) >> 1
        slot_key(buf, mid, False, &k, &kl)
        if cmp_keys(k, kl, probe, key.shape[0]) <= 0:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1, n


def inner_step(const unsigned char[::1] buf, const unsigned char[::1] key):
    """(index, slot count, child page): :func:`inner_bisect` and the child it picks, in one
    call (a B+tree descent makes one per level)."""
    cdef Py_ssize_t n = nslots(buf)
    cdef Py_ssize_t lo = 1, hi = n, mid, kl, d, off, ln
    cdef const unsigned char *k
    cdef const unsigned char *probe = &key[0] if key.shape[0] else NULL
    cdef unsigned long long child = 0
    cdef int b
    if n == 0:
        raise ValueError("inner node without children")
    while lo < hi:
        mid = (lo + hi) >> 1
        slot_key(buf, mid, False, &k, &kl)
        if cmp_keys(k, kl, probe, key.shape[0]) <= 0:
            lo = mid + 1
        else:
            hi = mid
    d = C_DIR_START + 4 * (lo - 1)
    off = buf[d] | (buf[d + 1] << 8)
    ln = buf[d + 2] | (buf[d + 3] << 8)
    if ln < 8 or off + ln > buf.shape[0]:
        raise ValueError(f"inner slot {lo - 1} ([{off}, {off + ln})) holds no child pointer inside the page")
    for b in range(7, -1, -1):
        child = (child << 8) | buf[off + b]
    return lo - 1, n, child


def leaf_find(const unsigned char[::1] buf, const unsigned char[::1] key):
    """(index, slot count, value): the index of the first leaf key ``>= key``, and the value
    stored under ``key`` when that key is ``key`` itself (else None)."""
    cdef Py_ssize_t n = nslots(buf)
    cdef Py_ssize_t lo = 0, hi = n, mid, kl, d, off, ln
    cdef const unsigned char *k
    cdef const unsigned char *probe = &key[0] if key.shape[0] else NULL
    while lo < hi:
        mid = (lo + hi) >> 1
        slot_key(buf, mid, True, &k, &kl)
        if cmp_keys(k, kl, probe, key.shape[0]) < 0:
            lo = mid + 1
        else:
            hi = mid
    if lo < n:
        slot_key(buf, lo, True, &k, &kl)
        if cmp_keys(k, kl, probe, key.shape[0]) == 0:
            d = C_DIR_START + 4 * lo
            off = buf[d] | (buf[d + 1] << 8)
            ln = buf[d + 2] | (buf[d + 3] << 8)
            return lo, n, bytes(buf[off + 2 + kl : off + ln])
    return lo, n, None

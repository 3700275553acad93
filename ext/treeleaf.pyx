# cython: language_level=3, boundscheck=False, wraparound=False
"""The common case of a B+tree get, put and delete in one C call each: a lookup; a range that
lies in one leaf (``range``: the few records of one inode a file's destruction reads, where
``BTree.items``'s generator cost more than the search); a change that stays inside one leaf —
a new key that fits, a value overwritten by one of the same length, a key deleted from a leaf
that stays at least a quarter full (or is the root).

A put or a delete is a nested top action (``traxfs.fs.struct.common``): under the tree's latch,
read the root from the header, descend, find the key in the leaf, log and apply one slot
operation, close the action with its logical undo. In Python that bookkeeping — about twenty
calls — cost more than half of a put; here it is one call, and the descent, the leaf search, the
engine's update (``PageApplier``) and the action's end (its ``LOGICAL`` record, appended as
``Engine.nta_end`` does) are C calls into the modules that own them; only the operation's redo
is Python.
Anything else — a split, a value of another length, a merge or a leaf to free, a version 1
header, a latch or page someone holds, a page not resident — is declined *before anything
changes* (``(False, None)``) and the caller takes the general path (``BTree._put`` / ``_delete``
under ``LoggedMap``), which decides the same way for the cases taken here: the two paths must log
the same records (tests/test_btree.py checks).

Like every module of ``ext`` it imports nothing of the package: the tree hands in the engine's
methods, its page layout and its opcodes.
"""

import struct

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint64_t
from libc.string cimport memcmp

from .logapply cimport PageApplier
from .nodesearch cimport descend_to_leaf, leaf_lookup, leaf_run
from .pagepin cimport Frame, PinTable, latch_give, latch_try
from .slotpage cimport diff_bytes, free_bytes


cdef object U16 = struct.Struct("<H").pack
cdef object UNDO_HEAD = struct.Struct("<QQ").pack  # header pid, the action's start LSN
cdef object UNDO_PUT_HEAD = struct.Struct("<BH").pack  # had_old, key length
cdef tuple NOT_HERE = (False, None)


cdef struct Place:
    # where a key is: the tree's root, the leaf's bytes (valid while its frame is latched), the
    # index of the first key >= it and the slot count, and its value when ``present``
    uint64_t root
    const unsigned char *page
    Py_ssize_t size, i, n, voff, vlen
    bint present
cdef uint64_t NO_PAGE = <uint64_t>-1


cdef inline uint64_t get_u64(const unsigned char *p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int j
    for j in range(7, -1, -1):
        v = (v << 8) | p[j]
    return v


cdef class LeafChange:
    """The put and delete of one tree inside a leaf (``BTree.put``, ``BTree.delete``)."""

    cdef PinTable pins
    cdef PageApplier applier
    cdef object pin, rollback_to, active, lock
    cdef uint64_t header
    cdef int inner_type, version
    cdef Py_ssize_t version_off, root_off, capacity, underfull
    cdef unsigned int logical, op_insert, op_patch, op_delete, undo_put, undo_patch, undo_delete

    def __init__(self, engine, uint64_t header, lock, active, unsigned int logical, int inner_type, int version,
                 Py_ssize_t version_off, Py_ssize_t root_off, Py_ssize_t capacity, Py_ssize_t underfull,
                 unsigned int op_insert, unsigned int op_patch, unsigned int op_delete, unsigned int undo_put,
                 unsigned int undo_patch, unsigned int undo_delete):
        self.pins, self.pin, self.applier = engine.pin_table, engine.pin, engine.applier
        self.rollback_to = engine.rollback_to
        self.header, self.lock = header, lock  # the tree's header page and its latch's lock
        self.active, self.logical = active, logical  # TxState.ACTIVE, RecType.LOGICAL
        self.inner_type, self.version = inner_type, version
        self.version_off, self.root_off = version_off, root_off
        self.capacity, self.underfull = capacity, underfull  # a slotted page's bytes; the merge threshold
        self.op_insert, self.op_patch, self.op_delete = op_insert, op_patch, op_delete  # OP_SLOT_*
        # the tree's logical undos (registered when its module was imported, as nta_end checks)
        self.undo_put, self.undo_patch, self.undo_delete = undo_put, undo_patch, undo_delete

    cdef Frame pin_latched(self, pid):
        """The frame of ``pid`` pinned and latched, if resident and its latch free; else None."""
        cdef Frame f = self.pins.pin_resident(pid)
        if f is None:
            return None
        if not latch_try(f.latch):
            self.pins.unpin(f)
            return None
        return f

    cdef void release(self, Frame f):
        latch_give(f.latch)
        self.pins.unpin(f)

    cdef void release_locked(self, Frame f):
        """A reader's end (``get``, ``range``): the leaf released, then the tree's lock."""
        self.release(f)
        latch_give(self.lock)

    cdef object root(self):
        """The root page, read from the header; None when declined (version 1, held, not resident)."""
        cdef Frame f = self.pin_latched(self.header)
        cdef const unsigned char *b
        if f is None:
            return None
        try:
            b = <const unsigned char *>PyByteArray_AS_STRING(f.data)
            if PyByteArray_GET_SIZE(f.data) < self.root_off + 8:
                return None
            if (b[self.version_off] | (b[self.version_off + 1] << 8)) != self.version:
                return None
            return get_u64(b + self.root_off)
        finally:
            self.release(f)

    cdef Frame locate(self, tx, bytes key, Place *at):
        """The leaf that covers ``key``, pinned and latched, the tree's lock taken, and where
        ``key`` is in it (``at``); None when declined (the transaction not active, the lock or a
        page busy, a page not resident, a version 1 header), nothing held then. The caller
        releases the frame, then the lock."""
        if tx.state is not self.active:
            return None
        return self.find_locked(key, at)

    cdef Frame find_locked(self, bytes key, Place *at):
        """``locate`` for any reader: the tree's lock taken (not waited for), then ``find``;
        None, nothing held, when either declines."""
        cdef Frame f
        if not latch_try(self.lock):
            return None
        try:
            f = self.find(key, at)
        except BaseException:
            latch_give(self.lock)
            raise
        if f is None:
            latch_give(self.lock)
        return f

    cdef Frame find(self, bytes key, Place *at):
        """``locate``'s walk, the lock held: the leaf's frame (None: declined, nothing pinned)."""
        cdef Frame f
        root = self.root()
        if root is None:
            return None
        f = self.pin_latched(descend_to_leaf(self.pins, self.pin, root, key, self.inner_type, None))
        if f is None:
            return None
        try:
            at.root = root
            at.page = <const unsigned char *>PyByteArray_AS_STRING(f.data)
            at.size = PyByteArray_GET_SIZE(f.data)
            at.present = leaf_lookup(at.page, at.size, <const unsigned char *>PyBytes_AS_STRING(key), len(key),
                                     &at.i, &at.n, &at.voff, &at.vlen)
        except BaseException:  # a damaged leaf: nothing stays pinned
            self.release(f)
            raise
        return f

    cdef object close(self, tx, uint64_t start_lsn, unsigned int undo, bytes undo_tail):
        """End the nested top action begun at ``start_lsn`` with its logical undo (the record
        ``Engine.nta_end`` appends); if that fails, roll the action's record back (its
        savepoint) before the error goes on."""
        cdef bytes payload = UNDO_HEAD(self.header, start_lsn) + undo_tail
        try:
            self.applier.append_tx(tx, self.logical, NO_PAGE, undo, start_lsn, PyBytes_AS_STRING(payload),
                                   PyBytes_GET_SIZE(payload), None)
        except BaseException:
            if tx.last_lsn != start_lsn:
                self.rollback_to(tx, start_lsn)
            raise

    def get(self, bytes key, declined):
        """The value stored under ``key``, None if there is none, or ``declined`` (nothing
        held): the tree's lock or the leaf busy, a page not resident, a version 1 header."""
        cdef Place at
        cdef Frame f = self.find_locked(key, &at)
        if f is None:
            return declined
        try:
            if not at.present:
                return None
            return PyBytes_FromStringAndSize(<const char *>at.page + at.voff, at.vlen)
        finally:
            self.release_locked(f)

    def range(self, bytes start, stop, declined):
        """The entries ``(key, value)`` with ``start <= key < stop`` (``stop``: bytes, or None
        for unbounded) when the leaf covering ``start`` holds them all — a key ``>= stop`` is
        in it, or it is the last leaf — else ``declined`` (and as ``get`` declines)."""
        cdef Place at
        cdef bint ended
        cdef Frame f = self.find_locked(start, &at)
        if f is None:
            return declined
        try:
            items = leaf_run(at.page, at.size, at.i, stop, &ended)
            if not ended and at.size >= 32 and get_u64(at.page + 24) != 0:  # the right link
                return declined
            return items
        finally:
            self.release_locked(f)

    def put(self, tx, bytes key, bytes value) -> tuple:
        """Put ``key`` → ``value`` (sizes already checked): ``(True, old value or None)`` when
        done here, ``(False, None)`` when nothing was done."""
        cdef Place at
        cdef Py_ssize_t klen = len(key), vlen = len(value)
        cdef uint64_t start_lsn
        cdef const unsigned char *new
        cdef Frame f = self.locate(tx, key, &at)
        if f is None:
            return NOT_HERE
        try:
            try:
                if not at.present:
                    old = None
                    rec = U16(klen) + key + value
                    if free_bytes(at.page, at.size) < len(rec) + 4:
                        return NOT_HERE
                    opcode, page_payload = self.op_insert, U16(at.i) + rec
                    undo, undo_tail = self.undo_put, UNDO_PUT_HEAD(0, klen) + key
                elif at.vlen != vlen:
                    return NOT_HERE
                elif memcmp(at.page + at.voff, PyBytes_AS_STRING(value), <size_t>vlen) == 0:
                    return True, value
                else:  # only the bytes that changed are logged
                    old = PyBytes_FromStringAndSize(<const char *>at.page + at.voff, at.vlen)
                    new = <const unsigned char *>PyBytes_AS_STRING(value)
                    opcode, page_payload = self.op_patch, U16(at.i) + diff_bytes(at.page + at.voff, new, vlen, 2 + klen)
                    undo, undo_tail = self.undo_patch, U16(klen) + key + diff_bytes(at.page + at.voff, new, vlen, 0)
                start_lsn = tx.last_lsn
                self.applier.update_op(tx, f.pid, opcode, page_payload, False)
            finally:
                self.release(f)
            self.close(tx, start_lsn, undo, undo_tail)
            return True, old
        finally:
            latch_give(self.lock)

    def delete(self, tx, bytes key) -> tuple:
        """Delete ``key``: ``(True, its value or None)`` when done here, ``(False, None)`` when
        nothing was done (the leaf would be freed or merged)."""
        cdef Place at
        cdef Py_ssize_t klen = len(key), used_after
        cdef uint64_t start_lsn
        cdef Frame f = self.locate(tx, key, &at)
        if f is None:
            return NOT_HERE
        try:
            try:
                if not at.present:
                    return True, None
                old = PyBytes_FromStringAndSize(<const char *>at.page + at.voff, at.vlen)
                rec = U16(klen) + key + old
                # the bytes the leaf uses once the record and its slot are gone (as BTree._delete
                # measures them): below a quarter of a page, or empty, it is merged or freed
                used_after = self.capacity - free_bytes(at.page, at.size) - len(rec) - 4
                if f.pid != at.root and (at.n == 1 or used_after < self.underfull):
                    return NOT_HERE
                start_lsn = tx.last_lsn
                self.applier.update_op(tx, f.pid, self.op_delete, U16(at.i) + rec, False)
            finally:
                self.release(f)
            self.close(tx, start_lsn, self.undo_delete, U16(klen) + key + old)
            return True, old
        finally:
            latch_give(self.lock)

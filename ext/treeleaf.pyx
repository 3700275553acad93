# cython: language_level=3, boundscheck=False, wraparound=False
"""The common case of a B+tree put and delete in one C call each: the change stays inside one
leaf — a new key that fits, a value overwritten by one of the same length, a key deleted from a
leaf that stays at least a quarter full (or is the root).

A put or a delete is a nested top action (``traxfs.fs.struct.common``): under the tree's latch,
read the root from the header, descend, find the key in the leaf, log and apply one slot
operation, close the action with its logical undo. In Python that bookkeeping — about twenty
calls — cost more than half of a put; here it is one call, and what it calls (the descent, the
leaf search, the engine's update and the action's end) is C already or the engine's public face.
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
from libc.stdint cimport uint64_t

from .nodesearch import descend, leaf_find
from .pagepin cimport Frame, PinTable
from .slotpage import diff_runs, free_space

cdef object U16 = struct.Struct("<H").pack
cdef object UNDO_HEAD = struct.Struct("<QQ").pack  # header pid, the action's start LSN
cdef object UNDO_PUT_HEAD = struct.Struct("<BH").pack  # had_old, key length
cdef tuple NOT_HERE = (False, None)


cdef inline uint64_t get_u64(const unsigned char *p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int j
    for j in range(7, -1, -1):
        v = (v << 8) | p[j]
    return v


cdef class LeafChange:
    """The put and delete of one tree inside a leaf (``BTree.put``, ``BTree.delete``)."""

    cdef PinTable pins
    cdef object pin, update, nta_begin, nta_end, rollback_to, active, lock
    cdef uint64_t header
    cdef int inner_type, version
    cdef Py_ssize_t version_off, root_off, capacity, underfull
    cdef unsigned int op_insert, op_patch, op_delete, undo_put, undo_patch, undo_delete

    def __init__(self, engine, uint64_t header, lock, active, int inner_type, int version, Py_ssize_t version_off,
                 Py_ssize_t root_off, Py_ssize_t capacity, Py_ssize_t underfull, unsigned int op_insert,
                 unsigned int op_patch, unsigned int op_delete, unsigned int undo_put, unsigned int undo_patch,
                 unsigned int undo_delete):
        self.pins, self.pin = engine.pin_table, engine.pin
        self.update, self.rollback_to = engine.update, engine.rollback_to
        self.nta_begin, self.nta_end = engine.nta_begin, engine.nta_end
        self.header, self.lock = header, lock  # the tree's header page and its latch's lock
        self.active = active  # TxState.ACTIVE
        self.inner_type, self.version = inner_type, version
        self.version_off, self.root_off = version_off, root_off
        self.capacity, self.underfull = capacity, underfull  # a slotted page's bytes; the merge threshold
        self.op_insert, self.op_patch, self.op_delete = op_insert, op_patch, op_delete  # OP_SLOT_*
        self.undo_put, self.undo_patch, self.undo_delete = undo_put, undo_patch, undo_delete  # the tree's

    cdef Frame pin_latched(self, pid):
        """The frame of ``pid`` pinned and latched, if resident and its latch free; else None."""
        cdef Frame f = self.pins.pin_resident(pid)
        if f is None:
            return None
        if not f.latch.acquire(False):
            self.pins.unpin(f)
            return None
        return f

    cdef void release(self, Frame f):
        f.latch.release()
        self.pins.unpin(f)

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

    cdef object close(self, tx, nta, unsigned int undo, bytes undo_tail):
        """End the nested top action with its logical undo; if that fails, roll the action's
        record back (its savepoint) before the error goes on."""
        try:
            self.nta_end(nta, undo, UNDO_HEAD(self.header, nta.start_lsn) + undo_tail)
        except BaseException:
            if tx.last_lsn != nta.start_lsn:
                self.rollback_to(tx, nta.start_lsn)
            raise

    def put(self, tx, bytes key, bytes value) -> tuple:
        """Put ``key`` → ``value`` (sizes already checked): ``(True, old value or None)`` when
        done here, ``(False, None)`` when nothing was done."""
        cdef Frame f
        cdef Py_ssize_t klen = len(key)
        if tx.state is not self.active or not self.lock.acquire(False):
            return NOT_HERE
        try:
            root = self.root()
            if root is None:
                return NOT_HERE
            leaf = descend(self.pins, self.pin, root, key, self.inner_type, None)
            f = self.pin_latched(leaf)
            if f is None:
                return NOT_HERE
            try:
                i, _n, old = leaf_find(f.data, key)
                if old is None:
                    rec = U16(klen) + key + value
                    if free_space(f.data) < len(rec) + 4:
                        return NOT_HERE
                    opcode, page_payload = self.op_insert, U16(i) + rec
                    undo, undo_tail = self.undo_put, UNDO_PUT_HEAD(0, klen) + key
                elif old == value:
                    return True, old
                elif len(old) == len(value):  # only the bytes that changed are logged
                    opcode, page_payload = self.op_patch, U16(i) + diff_runs(old, value, 2 + klen)
                    undo, undo_tail = self.undo_patch, U16(klen) + key + diff_runs(old, value)
                else:
                    return NOT_HERE
                nta = self.nta_begin(tx)
                self.update(tx, leaf, opcode, page_payload)
            finally:
                self.release(f)
            self.close(tx, nta, undo, undo_tail)
            return True, old
        finally:
            self.lock.release()

    def delete(self, tx, bytes key) -> tuple:
        """Delete ``key``: ``(True, its value or None)`` when done here, ``(False, None)`` when
        nothing was done (the leaf would be freed or merged)."""
        cdef Frame f
        cdef Py_ssize_t klen = len(key), used_after
        if tx.state is not self.active or not self.lock.acquire(False):
            return NOT_HERE
        try:
            root = self.root()
            if root is None:
                return NOT_HERE
            leaf = descend(self.pins, self.pin, root, key, self.inner_type, None)
            f = self.pin_latched(leaf)
            if f is None:
                return NOT_HERE
            try:
                i, n, old = leaf_find(f.data, key)
                if old is None:
                    return True, None
                rec = U16(klen) + key + old
                # the bytes the leaf uses once the record and its slot are gone (as BTree._delete
                # measures them): below a quarter of a page, or empty, it is merged or freed
                used_after = self.capacity - free_space(f.data) - len(rec) - 4
                if leaf != root and (n == 1 or used_after < self.underfull):
                    return NOT_HERE
                nta = self.nta_begin(tx)
                self.update(tx, leaf, self.op_delete, U16(i) + rec)
            finally:
                self.release(f)
            self.close(tx, nta, self.undo_delete, U16(klen) + key + old)
            return True, old
        finally:
            self.lock.release()

# cython: language_level=3, boundscheck=False, wraparound=False
"""A B+tree put's common case in one C call: the key goes into its leaf without a split (new
and fitting, or overwritten by a value of the same length).

A put is a nested top action (``traxfs.fs.struct.common``): under the tree's latch, read the
root from the header, descend, find the key in the leaf, log and apply one slot operation, close
the action with its logical undo. In Python that bookkeeping — about twenty calls — cost more
than half of a put; here it is one call, and what it calls (the descent, the leaf search, the
engine's update and the action's end) is C already or the engine's public face. Anything else —
a split, a value of another length, a version 1 header, a latch or page someone holds, a page
not resident — is refused *before anything changes* (``put`` returns ``(False, None)``) and the
caller takes the general path (``BTree._put`` under ``LoggedMap.put``), which decides the same
way for these cases: the two paths must log the same records (tests/test_btree.py checks).

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


cdef class LeafPut:
    """The fast put of the trees of one engine (``BTree.put``)."""

    cdef PinTable pins
    cdef object pin, update, nta_begin, nta_end, rollback_to, active
    cdef int inner_type, version
    cdef Py_ssize_t version_off, root_off
    cdef unsigned int op_insert, op_patch, undo_put, undo_patch

    def __init__(self, engine, active, int inner_type, int version, Py_ssize_t version_off, Py_ssize_t root_off,
                 unsigned int op_insert, unsigned int op_patch, unsigned int undo_put, unsigned int undo_patch):
        self.pins, self.pin = engine.pin_table, engine.pin
        self.update, self.rollback_to = engine.update, engine.rollback_to
        self.nta_begin, self.nta_end = engine.nta_begin, engine.nta_end
        self.active = active  # TxState.ACTIVE
        self.inner_type, self.version = inner_type, version
        self.version_off, self.root_off = version_off, root_off
        self.op_insert, self.op_patch = op_insert, op_patch  # OP_SLOT_INSERT, OP_SLOT_PATCH
        self.undo_put, self.undo_patch = undo_put, undo_patch  # the tree's logical undos

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

    def put(self, tx, lock, uint64_t header, bytes key, bytes value) -> tuple:
        """Put ``key`` → ``value`` (sizes already checked) in the tree whose header is ``header``
        and whose latch's lock is ``lock``: ``(True, old value or None)`` when done here,
        ``(False, None)`` when nothing was done."""
        cdef Frame f
        cdef const unsigned char *b
        cdef Py_ssize_t klen = len(key)
        if tx.state is not self.active or not lock.acquire(False):
            return NOT_HERE
        try:
            f = self.pin_latched(header)
            if f is None:
                return NOT_HERE
            try:
                b = <const unsigned char *>PyByteArray_AS_STRING(f.data)
                if PyByteArray_GET_SIZE(f.data) < self.root_off + 8:
                    return NOT_HERE
                if (b[self.version_off] | (b[self.version_off + 1] << 8)) != self.version:
                    return NOT_HERE
                root = get_u64(b + self.root_off)
            finally:
                self.release(f)
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
            try:
                self.nta_end(nta, undo, UNDO_HEAD(header, nta.start_lsn) + undo_tail)
            except BaseException:  # the action is not closed: roll its record back (the savepoint)
                if tx.last_lsn != nta.start_lsn:
                    self.rollback_to(tx, nta.start_lsn)
                raise
            return True, old
        finally:
            lock.release()

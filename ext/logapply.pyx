# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The engine's logged page update in C: Stasis' ``Tupdate`` and the log append under it.

Every change a structure makes is one ``Engine.apply`` (pin and latch the page, run the
operation's redo on a copy, log the record, install the copy, stamp the page LSN) and every
record one ``LogManager.append`` (encode, check the log region's room, insert into the log
buffer). In Python the two cost about 4 µs per record, a third of a B+tree put; here each is one
C call, and the operation's redo (a Python function of ``traxfs.fs.engine.opcodes``, mostly C
itself) is the only Python left on the way.

The rules are the engine's (``traxfs.fs.engine.engine``, which binds these methods when its log
starts and documents them): the redo runs on a scratch copy first, so an operation that refuses
its arguments changes nothing and logs nothing; a page is marked dirty, and its full image
logged, before the first record that changes it (the engine's ``first_change``); the record and
the transaction row's first/last LSN change under the transaction's latch. Like every module of
``ext`` it imports nothing of the package: the engine hands in its buffer's pin table and pin,
the operation registry, and the exception ``LogFull``.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcpy

from .logbuffer cimport _LogBuffer, ld_u64
from .logcodec cimport encode_record
from .pagepin cimport Frame, PinTable, latch_give, latch_take

cdef enum:
    PAGE_SIZE = 4096
    REC_UPDATE = 1  # RecType.UPDATE

cdef uint64_t NO_PAGE = <uint64_t>-1


cdef inline void put_u64(char *p, uint64_t v) noexcept nogil:
    cdef int i
    for i in range(8):
        p[i] = <char>((v >> (8 * i)) & 0xff)


cdef class LogAppender:
    """``LogManager.append``: encode a record, refuse it if the log region has no room for it,
    insert it into the log buffer. Past ``pressure_at`` bytes still needed by recovery (LSNs
    from ``trunc_lsn``) it asks for a checkpoint; past ``limit`` (``system_limit`` for the
    checkpoint's own records) it raises ``log_full``."""

    def __init__(self, _LogBuffer buffer not None, uint32_t epoch, uint32_t seed, uint64_t trunc_lsn,
                 uint64_t pressure_at, uint64_t limit, uint64_t system_limit, uint64_t region, on_pressure,
                 log_full):
        self.buffer = buffer
        self.insert = buffer.insert
        self.epoch, self.seed, self.trunc_lsn = epoch, seed, trunc_lsn
        self.pressure_at, self.limit, self.system_limit, self.region = pressure_at, limit, system_limit, region
        self.on_pressure, self.log_full = on_pressure, log_full
        self.records = 0

    cdef tuple put(self, unsigned int rtype, uint64_t xid, uint64_t prev_lsn, uint64_t page, unsigned int opcode,
                   uint64_t undo_next, const char *payload, Py_ssize_t plen, bint system):
        cdef bytes rec = encode_record(rtype, xid, prev_lsn, page, opcode, undo_next, payload, plen, self.epoch,
                                       self.seed)
        cdef uint64_t n = <uint64_t>PyBytes_GET_SIZE(rec)
        cdef int64_t used = <int64_t>(ld_u64(&self.buffer.lb.cur_lsn) + n) - <int64_t>self.trunc_lsn
        if used > <int64_t>self.pressure_at:
            if self.on_pressure is not None:
                self.on_pressure()
            if used > <int64_t>(self.system_limit if system else self.limit):
                raise self.log_full(f"log region full: {used} of {self.region} bytes still needed by recovery "
                                    "(a transaction too large for the log, or checkpoints cannot keep up)")
        lsn = self.insert(rec)
        self.records += 1
        return lsn, lsn + n

    def append(self, unsigned int rtype, uint64_t xid=0, uint64_t prev_lsn=0, uint64_t page=NO_PAGE,
               unsigned int opcode=0, uint64_t undo_next=0, payload=b"", bint system=False) -> tuple:
        """Insert a record; return (lsn, end lsn). Not durable until flushed."""
        cdef Py_buffer view
        PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
        try:
            return self.put(rtype, xid, prev_lsn, page, opcode, undo_next, <const char *>view.buf, view.len, system)
        finally:
            PyBuffer_Release(&view)


cdef class PageApplier:
    """The engine's ``apply``, ``update`` and ``_append`` (see the module docstring; the
    engine's docstring says what each promises)."""

    def __init__(self, LogAppender log not None, PinTable pins not None, pin_slow, dict registry, lookup,
                 first_change, active):
        self.log, self.pins, self.pin_slow = log, pins, pin_slow  # pin_slow: BufferManager.pin(pid, load)
        self.registry, self.lookup = registry, lookup  # opcodes.REGISTRY and opcodes.lookup (which names the unknown)
        self.first_change = first_change  # engine: mark the frame dirty and log its image, before its first record
        self.active = active  # TxState.ACTIVE

    cdef tuple append_tx(self, tx, unsigned int rtype, uint64_t page, unsigned int opcode, uint64_t undo_next,
                         const char *payload, Py_ssize_t plen, new_state):
        latch = tx.latch
        latch_take(latch)
        try:
            lsn, end = self.log.put(rtype, tx.xid, tx.last_lsn, page, opcode, undo_next, payload, plen, False)
            if tx.first_lsn == 0:
                tx.first_lsn = lsn
            tx.last_lsn = lsn
            if new_state is not None:
                tx.state = new_state
        finally:
            latch_give(latch)
        return lsn, end

    def append(self, tx, unsigned int rtype, uint64_t page=NO_PAGE, unsigned int opcode=0, uint64_t undo_next=0,
               payload=b"", new_state=None) -> tuple:
        """Append a record of ``tx`` and update its row (``Engine._append``)."""
        cdef Py_buffer view
        PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
        try:
            return self.append_tx(tx, rtype, page, opcode, undo_next, <const char *>view.buf, view.len, new_state)
        finally:
            PyBuffer_Release(&view)

    def apply(self, tx, pid, unsigned int opcode, payload, unsigned int rtype=REC_UPDATE, uint64_t undo_next=0,
              bint fresh=False) -> int:
        """Log and perform one page operation (``Engine.apply``); returns the record's LSN."""
        return self.apply_op(tx, pid, opcode, payload, rtype, undo_next, fresh)

    cdef object apply_op(self, tx, pid, unsigned int opcode, payload, unsigned int rtype, uint64_t undo_next,
                         bint fresh):
        cdef Frame f
        cdef Py_buffer view
        cdef char *page
        op = self.registry.get(opcode)
        if op is None:
            op = self.lookup(opcode)  # raises UnknownOperation, naming the opcode
        redo = op.redo
        if redo is None:
            raise ValueError(f"operation {op.name} has no page redo")
        f = self.pins.pin_resident(pid)
        if f is None:
            f = <Frame?>self.pin_slow(pid, not fresh)
        try:
            latch = f.latch
            latch_take(latch)
            try:
                data = f.data
                if type(data) is not bytearray or PyByteArray_GET_SIZE(data) != PAGE_SIZE:
                    raise TypeError(f"page {pid}: frame holds {type(data).__name__} of {len(data)} bytes")
                scratch = PyByteArray_FromStringAndSize(PyByteArray_AS_STRING(data), PAGE_SIZE)
                redo(scratch, payload)  # refuses bad arguments before anything is logged
                if PyByteArray_GET_SIZE(scratch) != PAGE_SIZE:
                    raise ValueError(f"operation {op.name} changed the page size: refused")
                if not f.dirty:
                    self.first_change(f)
                PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
                try:
                    lsn, end = self.append_tx(tx, rtype, <uint64_t>pid, opcode, undo_next, <const char *>view.buf,
                                              view.len, None)
                finally:
                    PyBuffer_Release(&view)
                page = PyByteArray_AS_STRING(data)
                memcpy(page, PyByteArray_AS_STRING(scratch), PAGE_SIZE)
                put_u64(page + 16, <uint64_t>end)  # the page LSN: the end of its latest record
            finally:
                latch_give(latch)
        finally:
            self.pins.unpin(f)
        return lsn

    def update(self, tx, pid, unsigned int opcode, payload, bint fresh=False) -> int:
        """``apply`` by an active transaction (``Engine.update``)."""
        return self.update_op(tx, pid, opcode, payload, fresh)

    cdef object update_op(self, tx, pid, unsigned int opcode, payload, bint fresh):
        if tx.state is not self.active:
            tx.require_active()  # raises, saying the state
        return self.apply_op(tx, pid, opcode, payload, REC_UPDATE, 0, fresh)

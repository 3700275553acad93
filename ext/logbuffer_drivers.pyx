# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Native drivers of the Aether log buffers (``traxfs.ext.logbuffer``), for the benchmark and the
stress tests: pthreads that insert and a flusher that consumes, with no GIL anywhere, so they
measure and exercise the algorithms themselves rather than CPython's GIL hand-offs.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

from .logbuffer cimport (
    _LogBuffer,
    add_i64,
    lb_insert,
    lb_mark_flushed,
    lb_wait_released,
    ld_i64,
    ld_u64,
    now_ns,
    pthread_create,
    pthread_join,
    pthread_t,
    ring_get,
    sleep_ns,
    spin_then_block,
    st_i64,
    tfx_lb,
)

ctypedef struct native_ctl:
    tfx_lb *lb
    int64_t stop              # workers stop when set (bench mode)
    int64_t workers_left
    char *capture             # stress: the flushed stream is copied here (NULL: scratch copy only)
    uint64_t capture_len
    char *scratch             # bench: flusher's "write" target
    uint64_t start_lsn
    uint64_t flush_rounds
    uint64_t violations       # released moved backwards or exceeded reserved, or capture overflow


ctypedef struct native_worker:
    native_ctl *ctl
    const char **recs
    uint64_t *lens
    uint64_t nrecs
    uint64_t *lsns_out        # stress: LSN of each record
    int loop                  # bench: cycle over recs until ctl.stop
    uint64_t inserts
    uint64_t nbytes


cdef void *native_worker_main(void *arg) noexcept nogil:
    cdef native_worker *w = <native_worker *>arg
    cdef tfx_lb *lb = w.ctl.lb
    cdef uint64_t i = 0, lsn
    cdef uint64_t done = 0, nbytes = 0
    if w.loop:
        while ld_i64(&w.ctl.stop) == 0:
            lb_insert(lb, w.recs[i], w.lens[i])
            nbytes += w.lens[i]
            done += 1
            i += 1
            if i == w.nrecs:
                i = 0
    else:
        for i in range(w.nrecs):
            lsn = lb_insert(lb, w.recs[i], w.lens[i])
            w.lsns_out[i] = lsn
            nbytes += w.lens[i]
            done += 1
    w.inserts = done
    w.nbytes = nbytes
    add_i64(&w.ctl.workers_left, -1)
    return NULL


cdef void *native_flusher_main(void *arg) noexcept nogil:
    cdef native_ctl *ctl = <native_ctl *>arg
    cdef tfx_lb *lb = ctl.lb
    cdef uint64_t f = ld_u64(&lb.flushed), r, last = f, reserved
    cdef int spins = 0
    while True:
        r = ld_u64(&lb.released)
        reserved = ld_u64(&lb.cur_lsn)
        if r < last or r > reserved:
            ctl.violations += 1
        last = r
        if r > f:
            if ctl.capture != NULL:
                if r - ctl.start_lsn > ctl.capture_len:
                    ctl.violations += 1
                    r = ctl.start_lsn + ctl.capture_len
                ring_get(lb, f, ctl.capture + (f - ctl.start_lsn), r - f)
            else:
                ring_get(lb, f, ctl.scratch, r - f)
            lb_mark_flushed(lb, r)
            f = r
            ctl.flush_rounds += 1
            spins = 0
        elif ld_i64(&ctl.workers_left) == 0 and ld_u64(&lb.released) == f:
            break
        elif spin_then_block(&spins):        # wait for a quarter ring or 1 ms: batch the copies
            lb_wait_released(lb, f + lb.capacity // 4, 0.001)
    return NULL


cdef object _run_native(_LogBuffer buf, list per_thread, bint loop, double seconds, bint capture,
                        uint64_t capture_len):
    cdef tfx_lb *lb = buf.lb
    cdef int nthreads = len(per_thread)
    cdef int t, k
    cdef uint64_t j
    cdef native_ctl ctl
    cdef native_worker *workers = NULL
    cdef pthread_t *tids = NULL
    cdef pthread_t ftid
    cdef uint64_t t0, t1
    cdef int started = 0
    cdef bint flusher_started = False
    memset(&ctl, 0, sizeof(ctl))
    ctl.lb = lb
    ctl.start_lsn = ld_u64(&lb.flushed)
    if ld_u64(&lb.released) != ctl.start_lsn or ld_u64(&lb.cur_lsn) != ctl.start_lsn:
        raise ValueError("native drivers need a buffer with nothing pending (flushed == reserved)")
    ctl.workers_left = nthreads
    workers = <native_worker *>malloc(sizeof(native_worker) * nthreads)
    tids = <pthread_t *>malloc(sizeof(pthread_t) * nthreads)
    if workers == NULL or tids == NULL:
        free(workers)
        free(tids)
        raise MemoryError()
    memset(workers, 0, sizeof(native_worker) * nthreads)
    try:
        ctl.scratch = <char *>malloc(lb.capacity)
        if capture:
            ctl.capture = <char *>malloc(capture_len if capture_len else 1)
            ctl.capture_len = capture_len
        if ctl.scratch == NULL or (capture and ctl.capture == NULL):
            raise MemoryError()
        for t in range(nthreads):
            recs = per_thread[t]
            workers[t].ctl = &ctl
            workers[t].nrecs = len(recs)
            workers[t].loop = loop
            workers[t].recs = <const char **>malloc(sizeof(char *) * max(1, len(recs)))
            workers[t].lens = <uint64_t *>malloc(sizeof(uint64_t) * max(1, len(recs)))
            workers[t].lsns_out = <uint64_t *>malloc(sizeof(uint64_t) * max(1, len(recs)))
            if workers[t].recs == NULL or workers[t].lens == NULL or workers[t].lsns_out == NULL:
                raise MemoryError()
            if loop and len(recs) == 0:
                raise ValueError("bench mode needs at least one record per thread")
            for k, rec in enumerate(recs):
                if type(rec) is not bytes:
                    raise TypeError("records must be bytes")
                if len(rec) < 16 or <uint64_t>len(rec) > lb.max_group:
                    raise ValueError(f"record length {len(rec)} outside 16..{lb.max_group}")
                workers[t].recs[k] = PyBytes_AS_STRING(rec)
                workers[t].lens[k] = <uint64_t>PyBytes_GET_SIZE(rec)
        with nogil:
            if pthread_create(&ftid, NULL, native_flusher_main, &ctl) == 0:
                flusher_started = True
                t0 = now_ns()
                for t in range(nthreads):
                    if pthread_create(&tids[t], NULL, native_worker_main, &workers[t]) != 0:
                        break
                    started += 1
                if started < nthreads:
                    add_i64(&ctl.workers_left, started - nthreads)
                    st_i64(&ctl.stop, 1)
                if loop:
                    sleep_ns(<uint64_t>(seconds * 1e9))
                    st_i64(&ctl.stop, 1)
                for t in range(started):
                    pthread_join(tids[t], NULL)
                t1 = now_ns()
                pthread_join(ftid, NULL)
        if not flusher_started or started < nthreads:
            raise OSError("pthread_create failed")
        inserts = 0
        nbytes = 0
        for t in range(nthreads):
            inserts += workers[t].inserts
            nbytes += workers[t].nbytes
        result = {
            "seconds": (t1 - t0) / 1e9,
            "inserts": inserts,
            "bytes": nbytes,
            "flush_rounds": ctl.flush_rounds,
            "violations": ctl.violations,
        }
        if not loop:
            lsns = []
            for t in range(nthreads):
                lsns.append([workers[t].lsns_out[j] for j in range(workers[t].nrecs)])
            result["lsns"] = lsns
        if capture:
            result["stream"] = PyBytes_FromStringAndSize(ctl.capture, <Py_ssize_t>capture_len)
        return result
    finally:
        for t in range(nthreads):
            free(workers[t].recs)
            free(workers[t].lens)
            free(workers[t].lsns_out)
        free(workers)
        free(tids)
        free(ctl.scratch)
        free(ctl.capture)


def _native_bench(_LogBuffer buf, int threads, bytes record, double seconds):
    """Benchmark driver without the GIL: ``threads`` pthreads insert ``record`` in a loop for
    ``seconds`` while a native flusher thread copies [flushed, released) out and marks it flushed.
    Returns {seconds, inserts, bytes, flush_rounds, violations}."""
    if threads < 1:
        raise ValueError("threads must be >= 1")
    return _run_native(buf, [[record] for _ in range(threads)], True, seconds, False, 0)


def _native_stress(_LogBuffer buf, list per_thread_records):
    """Correctness driver without the GIL: thread ``i`` inserts ``per_thread_records[i]`` (a list of
    bytes) once, in order; a native flusher copies the released stream out.  Returns {..., lsns:
    per-thread list of LSNs, stream: the flushed bytes from the starting LSN}."""
    total = sum(len(r) for recs in per_thread_records for r in recs)
    return _run_native(buf, per_thread_records, False, 0.0, True, total)

# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The Aether log buffer: the single-mutex baseline and the consolidated + decoupled ("CD") buffer.

(Why one module of this length: an insert's acquire, fill and release, for both algorithms and
the GIL-held fast path, must be one C translation unit so the compiler inlines them into each
other; a sixth of the module is this description.)

Two classes with one API (SPEC §3, ``digests/aether.md`` §4, §5, §9 items 2-6):

``MutexLogBuffer``        Algorithm 1 (digest §4): one mutex ``L`` around all three phases of an
                          insert -- acquire (LSN generation + space), fill (memcpy), release.
``ConsolidatedLogBuffer`` "CD" (digest §5.1-§5.3), Aether's default: a consolidation array of 4
                          slots backed by a slot pool (C) combined with decoupled fill and in-order
                          release through ``next_release_lsn`` (D).

LSNs are byte offsets in the log; the buffer is a ring of ``capacity`` bytes and byte ``lsn`` lives
at ``buf[lsn % capacity]``, so generating an LSN also reserves ring space (digest §4).  Three LSN
watermarks, all monotonic, ``flushed <= released <= reserved``:

* ``reserved``  (``cur_lsn``) -- next LSN to hand out; written only while holding ``L``.
* ``released``  (``next_release_lsn``) -- every byte below it has been filled; the gap-free prefix
                the flusher may write (digest §4: release must follow LSN order, the log has no gaps).
* ``flushed``   -- set by the flusher (``mark_flushed``); ring space below it may be reused.  An
                acquire of ``size`` bytes at ``lsn`` waits while ``lsn + size - flushed > capacity``.

Insert, baseline (Algorithm 1)::

    lock(L); lsn = cur; wait for space; cur += size; fill(lsn); released = lsn + size; unlock(L)

Insert, CD (Algorithm 2 with Algorithm 3's acquire/release, digest §5.1-§5.3)::

    if try_lock(L):                          # uncontended: a group of one, decoupled (D)
        lsn = acquire(size); unlock(L); fill(lsn); release_in_order(lsn, size); return lsn
    s, offset = slot_join(size)              # random probe of slot_array[4]; CAS state += size
    if offset == 0:                          # leader
        lock(L); group = slot_close(s)       # fresh slot from the pool installed, s.state <- PENDING
        lsn = acquire(group); unlock(L)      # D: L covers only LSN + space allocation
        slot_notify(s, lsn, group)           # s.state <- DONE - group
    else:
        lsn, group = slot_wait(s)            # spin while s.state > DONE
    fill(lsn + offset)                       # members fill their sub-regions in parallel
    if slot_release(s, size) == DONE:        # atomic add; the last one out ...
        s.state <- FREE                      # ... frees the slot (lsn, group are in its locals),
        release_in_order(lsn, group)         #     spins until next_release_lsn == lsn, then sets
                                             #     next_release_lsn = lsn + group

Slot states (one ``int64`` per slot, digest §5.1 "Algorithm 5"): ``FREE`` (in the pool),
``OPEN`` = ``READY + joined bytes`` (>= READY, accepting joins), ``PENDING`` (closed, the leader
is acquiring), ``COPYING`` = ``DONE - bytes still being copied`` (<= DONE).  Numerically
``COPYING <= DONE(0) < PENDING(1) < FREE(2) < READY(2**40) <= OPEN``, so ``slot_join`` accepts only
states ``>= READY`` and ``slot_wait`` spins while ``state > DONE``.  ``slot_close`` runs under ``L``
and needs no atomics to pick the pool slot; it installs the fresh slot (state READY, its array index
recorded in it) *before* swapping the old one to PENDING, so arrivals never see a closed array
entry for long.  A thread holding a stale slot pointer can only join a slot whose state is OPEN at
the instant of its CAS, i.e. a slot that really is open (in whatever incarnation) -- the state word
alone decides membership, so pool reuse is ABA-safe.  A group never grows past ``capacity // 2``
bytes (a joiner that would overflow it probes another slot), so every group can eventually get
ring space.  At most ``ARRAY_SIZE`` leaders wait for ``L`` (contention bounded by slots, digest §5.1).
Aether frees the slot only after the release because its release queue may still use it (§5.4);
here every releaser works from its own copies of ``lsn``/``group``/``ticket``, so the last one out
frees the slot first and the pool recycles faster.

Options of ``ConsolidatedLogBuffer`` (defaults = the CD above, as in the paper):

* ``slots`` (default 4, digest §5.1: the optimum is 3-4) -- size of the consolidation array.
* ``fast_path="locked"`` -- the uncontended try-lock path keeps ``L`` through fill and release
  (Algorithm 2's first line read with C's buffer_acquire instead of D's).  Contended inserts
  still go through the array with decoupled fill.
* ``release="delegated"`` -- CDME-style delegated release (digest §5.4, Algorithm 4) instead of
  in-order spinning.  The explicit queue is a ring of ``TFX_REL_RING`` entries indexed by a
  ticket taken under ``L`` (so ticket order = LSN order) rather than Scott's MCS list: an owner
  whose predecessor is still pending CASes its entry WAITING -> DELEGATED and returns; the thread
  holding the head releases its region, then CASes the successor WAITING -> GRANTED (hand-off) or,
  finding it DELEGATED, releases it too.  1/32 of the owners refuse to delegate, but only for a
  short spin (a deviation, see ``release_delegated``).

Why the options exist -- measured on this project's 2-vCPU VM (see ``tools/bench_logbuffer.py``):
Aether assumes threads <= hardware contexts.  With more runnable threads than cores, a thread is
often preempted between its acquire and its release; under strict in-order release everybody
behind it then waits for it to be scheduled again, and the running threads keep creating new
dependencies on the waiting ones -- a convoy with a context switch per insert.  The paper's CD
collapses here to a few percent of the mutex baseline at 2-8 threads; the locked fast path and
delegated release do not wait on a descheduled thread and stay near the baseline.

Atomics are GCC builtins (``__atomic_load_n``, ``__atomic_store_n``, ``__atomic_compare_exchange_n``,
``__atomic_fetch_add``, ``__atomic_exchange_n``) wrapped in the verbatim C block below.  Waiting
never burns a core for long (digest §8: with 64 threads on 2 cores pure spinning livelocks):
``slot_wait``, in-order release and ``wait_released`` spin ``SPIN_LIMIT`` pauses, ``sched_yield``
a few times, then sleep in a Linux futex on the low 32 bits of the word they watch (the slot
state, ``released``), re-checking at least every 2 ms; whoever changes the word wakes the futex
when somebody registered (a waiter count, or the lowest target LSN of ``wait_released`` callers,
so a flusher waiting for a big chunk is not woken per record).  A full ring blocks the acquirer
(holding ``L``, as in the paper) on a pthread condition that ``mark_flushed`` signals.  Rare
polls with nothing to block on (every slot closed, slot pool or release ring exhausted) back off
to 50 us sleeps.

The GIL: ``insert`` parses its argument with the GIL, then runs acquire, fill, release and every
wait inside ``with nogil``, so Python threads inserting concurrently really run in parallel --
but each thread needs the GIL again between two inserts, and CPython hands the GIL over through a
condition variable, so Python-thread throughput is bounded by the GIL, not by the buffer.
``traxfs.tools.bench_logbuffer`` measures both that and, with native pthreads and no GIL at all
(``_native_bench``), the algorithms themselves.

Concurrency contract: any number of threads may ``insert``; exactly one flusher thread calls
``read`` and ``mark_flushed`` (as the log daemon would).  ``released``, ``reserved``, ``flushed``
and ``wait_released`` are safe from any thread (with several concurrent ``wait_released`` callers
a wake-up can come up to 2 ms late: one registration word holds the lowest target).

Test hooks (underscore names): ``_set_fill_delay`` (random sleep inside every fill),
``_set_chaos`` (random pauses at the interleaving points), ``_set_backoff`` (module-wide spin /
yield / sleep limits). The pthread drivers without the GIL (``_native_bench``, ``_native_stress``)
are in ``traxfs.ext.logbuffer_drivers``, the durable flush path (``DirectLogWriter``) in
``traxfs.ext.logwriter``; both reach the buffer's C core through ``logbuffer.pxd``.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memmove, memset

import os


cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>

    static tfx_lb *tfx_lb_alloc(void) {
        void *p = NULL;
        if (posix_memalign(&p, 64, sizeof(tfx_lb)) != 0) return NULL;
        memset(p, 0, sizeof(tfx_lb));
        return (tfx_lb *)p;
    }

    static tfx_rel *tfx_rel_alloc(int n) {
        void *p = NULL;
        if (posix_memalign(&p, 64, sizeof(tfx_rel) * (size_t)n) != 0) return NULL;
        memset(p, 0, sizeof(tfx_rel) * (size_t)n);
        return (tfx_rel *)p;
    }

    static tfx_slot *tfx_pool_alloc(int n) {
        void *p = NULL;
        if (posix_memalign(&p, 64, sizeof(tfx_slot) * (size_t)n) != 0) return NULL;
        memset(p, 0, sizeof(tfx_slot) * (size_t)n);
        return (tfx_slot *)p;
    }
    """
    tfx_lb *lb_alloc "tfx_lb_alloc"() noexcept nogil
    tfx_slot *pool_alloc "tfx_pool_alloc"(int n) noexcept nogil
    tfx_rel *rel_alloc "tfx_rel_alloc"(int n) noexcept nogil


# Backoff: SPIN_LIMIT pauses, then sched_yield until YIELD_LIMIT, then short sleeps.  With more
# threads than cores (8 on 2 here), the thread being waited for is often not running at all.
cdef int SPIN_LIMIT = 64
cdef int YIELD_LIMIT = 64 + 8
cdef uint64_t SLEEP_NS = 50000

cdef enum:
    COND_SLICE_NS = 20000000        # condition waits re-check at least every 20 ms
    FUTEX_SLICE_NS = 2000000        # futex waits re-check at least every 2 ms
    MODE_MUTEX = 0
    MODE_CD = 1
    GIL_HELD_MAX = 16384            # records up to this size may be copied with the GIL held


def _set_backoff(int spin, int yields, int sleep_ns):
    """Tuning hook: pauses before yielding, sched_yields before blocking (futex) or sleeping,
    sleep step in ns for the waits that have nothing to block on."""
    global SPIN_LIMIT, YIELD_LIMIT, SLEEP_NS
    SPIN_LIMIT = spin
    YIELD_LIMIT = spin + yields
    SLEEP_NS = sleep_ns


cdef bint spin_then_block(int *spins) noexcept nogil:
    """One step of a wait that can block: pause, then yield; True once it is time to block."""
    if spins[0] < SPIN_LIMIT:
        spins[0] += 1
        cpu_relax()
        return False
    if spins[0] < YIELD_LIMIT:
        spins[0] += 1
        sched_yield()
        return False
    return True


cdef inline void backoff(int *spins) noexcept nogil:
    spins[0] += 1
    if spins[0] < SPIN_LIMIT:
        cpu_relax()
    elif spins[0] < YIELD_LIMIT:
        sched_yield()
    else:
        sleep_ns(SLEEP_NS)


# ---------------------------------------------------------------- phases shared by both buffers

cdef inline bint has_space(tfx_lb *lb, uint64_t end) noexcept nogil:
    return end - ld_u64_sc(&lb.flushed) <= lb.capacity


cdef void wait_space(tfx_lb *lb, uint64_t end) noexcept nogil:
    """Wait (caller holds L) until ring bytes below ``end`` are free: end - flushed <= capacity."""
    cdef int spins = 0
    if has_space(lb, end):
        return
    lb.n_space_waits += 1
    while spins < YIELD_LIMIT:
        backoff(&spins)
        if has_space(lb, end):
            return
    pthread_mutex_lock(&lb.space_mtx)
    add_i64_sc(&lb.space_waiters, 1)       # Dekker with mark_flushed: store flushed, load waiters
    while not has_space(lb, end):
        cond_wait_ns(&lb.space_cond, &lb.space_mtx, COND_SLICE_NS)
    add_i64_sc(&lb.space_waiters, -1)
    pthread_mutex_unlock(&lb.space_mtx)


cdef inline void ring_put(tfx_lb *lb, uint64_t lsn, const char *src, uint64_t n) noexcept nogil:
    cdef uint64_t pos = lsn % lb.capacity
    cdef uint64_t first = lb.capacity - pos
    if first >= n:
        memcpy(lb.buf + pos, src, n)
    else:                                   # split at the end of the ring
        memcpy(lb.buf + pos, src, first)
        memcpy(lb.buf, src + first, n - first)


cdef void ring_get(tfx_lb *lb, uint64_t lsn, char *dst, uint64_t n) noexcept nogil:
    cdef uint64_t pos = lsn % lb.capacity
    cdef uint64_t first = lb.capacity - pos
    if first >= n:
        memcpy(dst, lb.buf + pos, n)
    else:
        memcpy(dst, lb.buf + pos, first)
        memcpy(dst + first, lb.buf, n - first)


cdef inline void chaos(tfx_lb *lb) noexcept nogil:
    """Test hook: at a point where another thread's interleaving matters, sometimes yield or
    sleep up to 30 us, to widen race windows (digest §8: randomized delays)."""
    cdef uint32_t r
    if lb.chaos_one_in:
        r = fast_rand()
        if r % lb.chaos_one_in == 0:
            if r & 0x10000:
                sched_yield()
            else:
                sleep_ns((r >> 17) % 30000)


cdef void buffer_fill(tfx_lb *lb, uint64_t lsn, const char *data, uint64_t size) noexcept nogil:
    """Copy the record to ring position ``lsn`` and patch its own LSN (LE u64) at [lsn+8, lsn+16)."""
    cdef unsigned char le[8]
    cdef int i
    ring_put(lb, lsn, data, size)
    for i in range(8):
        le[i] = <unsigned char>((lsn >> (8 * i)) & 0xff)
    ring_put(lb, lsn + 8, <const char *>le, 8)
    if lb.fill_delay_ns:
        sleep_ns(fast_rand() % lb.fill_delay_ns)


cdef void publish_released(tfx_lb *lb, uint64_t new_released) noexcept nogil:
    """Advance ``released``; wake in-order releasers (any change matters to them) and
    wait_released callers whose target is reached (not on every record)."""
    cdef bint wake = False
    st_u64_sc(&lb.released, new_released)
    # Dekker with the waiters: they register (seq_cst), then re-load released before sleeping
    if ld_i64_sc(&lb.rel_waiters) > 0:
        wake = True
    if new_released >= ld_u64_sc(&lb.rel_target):
        xchg_u64(&lb.rel_target, <uint64_t>-1)     # satisfied; unsatisfied waiters re-register
        wake = True
    if wake:
        add_i64(&lb.n_wakes, 1)
        futex_wake_all(&lb.released)


cdef inline void block_on_released(tfx_lb *lb, uint64_t seen, uint64_t timeout_ns) noexcept nogil:
    """Sleep until ``released`` differs from ``seen`` (or timeout / spurious wake-up)."""
    add_i64_sc(&lb.rel_waiters, 1)
    if ld_u64_sc(&lb.released) == seen:
        futex_wait(&lb.released, <uint32_t>seen, timeout_ns)
    add_i64_sc(&lb.rel_waiters, -1)


cdef void release_in_order(tfx_lb *lb, uint64_t lsn, uint64_t size) noexcept nogil:
    """D's buffer_release (Algorithm 3): wait for our turn on next_release_lsn, then advance it.
    The predecessor may be descheduled (more threads than cores): spin, yield, then futex-wait."""
    cdef int spins = 0
    cdef uint64_t r
    while True:
        r = ld_u64(&lb.released)
        if r == lsn:
            break
        if spin_then_block(&spins):
            add_i64(&lb.n_release_blocks, 1)
            block_on_released(lb, r, FUTEX_SLICE_NS)
    chaos(lb)
    publish_released(lb, lsn + size)


# ---------------------------------------------------------------- Algorithm 1: the baseline

cdef uint64_t mutex_insert(tfx_lb *lb, const char *data, uint64_t size) noexcept nogil:
    cdef uint64_t lsn
    pthread_mutex_lock(&lb.L)
    lsn = lb.cur_lsn
    wait_space(lb, lsn + size)
    st_u64(&lb.cur_lsn, lsn + size)
    buffer_fill(lb, lsn, data, size)
    publish_released(lb, lsn + size)
    pthread_mutex_unlock(&lb.L)
    return lsn


# ---------------------------------------------------------------- CD: consolidation array + decoupled fill

cdef tfx_slot *slot_join(tfx_lb *lb, uint64_t size, int64_t *offset) noexcept nogil:
    """Random probe of slot_array; CAS state -> state + size on an OPEN slot (Algorithm 5)."""
    cdef int spins = 0
    cdef tfx_slot *s
    cdef int64_t old
    cdef int64_t limit = <int64_t>lb.max_group
    while True:
        s = ld_slot(&lb.slot_array[fast_rand() % <uint32_t>lb.nslots])
        old = ld_i64(&s.state)
        while old >= READY and (old - READY) + <int64_t>size <= limit:
            if cas_i64(&s.state, &old, old + <int64_t>size):
                offset[0] = old - READY
                return s
            # CAS failure reloaded ``old``: retry on the same slot while it stays open
        backoff(&spins)


cdef int64_t slot_close(tfx_lb *lb, tfx_slot *s) noexcept nogil:
    """Leader, holding L: install a fresh slot from the pool, then swap ``s`` to PENDING."""
    cdef int spins = 0
    cdef int scanned = 0
    cdef tfx_slot *fresh
    cdef int idx = s.idx
    while True:
        fresh = &lb.pool[lb.pool_next]
        lb.pool_next += 1
        if lb.pool_next == POOL_SIZE:
            lb.pool_next = 0
        if ld_i64(&fresh.state) == FREE:
            break
        scanned += 1
        if scanned >= POOL_SIZE:            # pool exhausted by unreleased groups: they finish without L
            backoff(&spins)
            scanned = 0
    fresh.idx = idx
    st_i64(&fresh.state, READY)
    st_slot(&lb.slot_array[idx], fresh)
    chaos(lb)                               # late joiners still reach the old slot meanwhile
    return xchg_i64(&s.state, PENDING) - READY


cdef inline void slot_notify(tfx_slot *s, uint64_t lsn, int64_t group_size) noexcept nogil:
    s.lsn = lsn
    s.group_size = group_size
    st_i64_sc(&s.state, DONE - group_size)  # publishes lsn and group_size
    if ld_i64_sc(&s.waiters) > 0:
        futex_wake_all(&s.state)


cdef inline void slot_wait(tfx_lb *lb, tfx_slot *s, uint64_t *lsn, int64_t *group_size) noexcept nogil:
    cdef int spins = 0
    cdef int64_t st
    while True:
        st = ld_i64(&s.state)
        if st <= DONE:                      # COPYING: the leader has published lsn, group_size
            break
        if spin_then_block(&spins):         # OPEN or PENDING: the leader may be waiting for L
            add_i64_sc(&s.waiters, 1)
            add_i64(&lb.n_slot_blocks, 1)
            st = ld_i64_sc(&s.state)
            if st > DONE:
                futex_wait(&s.state, <uint32_t><uint64_t>st, FUTEX_SLICE_NS)
            add_i64_sc(&s.waiters, -1)
    lsn[0] = s.lsn
    group_size[0] = s.group_size


# ---------------------------------------------------------------- CDME-style delegated release (digest §5.4)

cdef inline uint64_t ticket_take(tfx_lb *lb) noexcept nogil:
    """Under L (so ticket order = LSN order): the region's entry in the release ring."""
    cdef int spins = 0
    cdef uint64_t t = lb.next_ticket
    while t - ld_u64(&lb.released_tickets) >= <uint64_t>REL_RING:   # ring full: > REL_RING regions pending
        backoff(&spins)
    lb.next_ticket = t + 1
    return t


cdef void release_delegated(tfx_lb *lb, uint64_t t) noexcept nogil:
    """Release ticket ``t``'s region (filled).  A region whose predecessor is still pending is left
    to that predecessor (WAITING -> DELEGATED) and the caller returns at once; the thread holding
    the head releases its region, then hands the head to the successor (WAITING -> GRANTED) or,
    if the successor already delegated, releases that one too, and so on.  With probability 1/32
    an owner refuses to delegate and waits for the head, which breaks endless release chains
    (the "treadmill").  Deviation: the refusal is bounded by a short spin -- if the head does not
    arrive (the predecessor is descheduled: more threads than cores), the owner delegates after
    all, instead of convoying behind a thread that is not running."""
    cdef tfx_rel *e = &lb.rel_ring[t % <uint64_t>REL_RING]
    cdef tfx_rel *n
    cdef int64_t exp
    cdef int spins
    if (fast_rand() & 31) == 0:             # refuse for a while: wait for the head on-CPU
        add_i64(&lb.n_refusals, 1)
        spins = 0
        while spins < SPIN_LIMIT and ld_i64(&e.status) != REL_GRANTED:
            spins += 1
            cpu_relax()
    chaos(lb)
    exp = REL_WAITING
    if cas_i64(&e.status, &exp, REL_DELEGATED):
        add_i64(&lb.n_delegated, 1)
        return
    # the CAS failed on GRANTED: we hold the head, every region below ours is released
    while True:
        st_i64(&e.status, REL_WAITING)      # entry free for ticket t + REL_RING
        st_u64(&lb.released_tickets, t + 1)
        publish_released(lb, e.end)         # before the hand-off, so released never moves back
        chaos(lb)
        t += 1
        n = &lb.rel_ring[t % <uint64_t>REL_RING]
        exp = REL_WAITING
        if cas_i64(&n.status, &exp, REL_GRANTED):
            chaos(lb)
            return
        e = n                               # it delegated: it is filled, release it too


# ---------------------------------------------------------------- CD insert

cdef inline uint64_t cd_acquire(tfx_lb *lb, uint64_t size, uint64_t *ticket) noexcept nogil:
    """buffer_acquire under L: wait for ring space, hand out the LSN (and the release ticket)."""
    cdef uint64_t lsn = lb.cur_lsn
    wait_space(lb, lsn + size)
    if lb.delegated:
        ticket[0] = ticket_take(lb)
        lb.rel_ring[ticket[0] % <uint64_t>REL_RING].end = lsn + size
    st_u64(&lb.cur_lsn, lsn + size)
    return lsn


cdef inline void cd_release(tfx_lb *lb, uint64_t lsn, uint64_t size, uint64_t ticket) noexcept nogil:
    if lb.delegated:
        release_delegated(lb, ticket)
    else:
        release_in_order(lb, lsn, size)


cdef uint64_t cd_insert(tfx_lb *lb, const char *data, uint64_t size) noexcept nogil:
    cdef uint64_t lsn
    cdef uint64_t ticket = 0
    cdef int64_t offset = 0
    cdef int64_t group_size
    cdef tfx_slot *s
    if pthread_mutex_trylock(&lb.L) == 0:  # uncontended: skip the array (Algorithm 2, first line)
        lsn = cd_acquire(lb, size, &ticket)
        lb.n_fast += 1
        if lb.locked_fast_path:
            buffer_fill(lb, lsn, data, size)
            cd_release(lb, lsn, size, ticket)
            pthread_mutex_unlock(&lb.L)
            return lsn
        pthread_mutex_unlock(&lb.L)         # D: release L right after acquire
        chaos(lb)
        buffer_fill(lb, lsn, data, size)
        cd_release(lb, lsn, size, ticket)
        return lsn
    s = slot_join(lb, size, &offset)
    chaos(lb)
    if offset == 0:                         # group leader
        pthread_mutex_lock(&lb.L)
        group_size = slot_close(lb, s)
        lsn = cd_acquire(lb, <uint64_t>group_size, &ticket)
        lb.n_groups += 1
        lb.n_group_bytes += <uint64_t>group_size
        pthread_mutex_unlock(&lb.L)         # D: release L right after acquire
        s.ticket = ticket
        chaos(lb)
        slot_notify(s, lsn, group_size)
    else:
        slot_wait(lb, s, &lsn, &group_size)
        ticket = s.ticket
    buffer_fill(lb, lsn + <uint64_t>offset, data, size)
    if add_i64(&s.state, <int64_t>size) + <int64_t>size == DONE:   # slot_release: last one out
        st_i64(&s.state, FREE)              # lsn, group_size, ticket are in locals already
        chaos(lb)
        cd_release(lb, lsn, <uint64_t>group_size, ticket)
    return lsn + <uint64_t>offset


cdef bint try_insert_now(tfx_lb *lb, const char *data, uint64_t size, uint64_t *lsn) noexcept nogil:
    """Insert at once or not at all: only when L is free, no reserved region is still unreleased
    and the ring has space -- the state every insert from a lone Python thread finds.  Nothing
    here can wait, so the caller may run it holding the GIL (see ``insert``)."""
    if pthread_mutex_trylock(&lb.L) != 0:
        return False
    lsn[0] = lb.cur_lsn
    if ld_u64(&lb.released) != lsn[0] or not has_space(lb, lsn[0] + size):
        pthread_mutex_unlock(&lb.L)
        return False
    st_u64(&lb.cur_lsn, lsn[0] + size)
    buffer_fill(lb, lsn[0], data, size)
    publish_released(lb, lsn[0] + size)
    lb.n_gil_held += 1
    pthread_mutex_unlock(&lb.L)
    return True


cdef uint64_t lb_insert(tfx_lb *lb, const char *data, uint64_t size) noexcept nogil:
    if lb.mode == MODE_CD:
        return cd_insert(lb, data, size)
    return mutex_insert(lb, data, size)


cdef void lb_mark_flushed(tfx_lb *lb, uint64_t lsn) noexcept nogil:
    st_u64_sc(&lb.flushed, lsn)
    if ld_i64_sc(&lb.space_waiters) > 0:
        pthread_mutex_lock(&lb.space_mtx)
        pthread_cond_broadcast(&lb.space_cond)
        pthread_mutex_unlock(&lb.space_mtx)


cdef uint64_t lb_wait_released(tfx_lb *lb, uint64_t lsn, double timeout) noexcept nogil:
    cdef int spins = 0
    cdef uint64_t deadline, now, r
    r = ld_u64(&lb.released)
    if r >= lsn or timeout <= 0:
        return r
    deadline = now_ns() + <uint64_t>(timeout * 1e9) if timeout < 1e9 else <uint64_t>-1
    while True:
        r = ld_u64(&lb.released)
        if r >= lsn:
            return r
        if spin_then_block(&spins):
            now = now_ns()
            if now >= deadline:
                return r
            min_u64(&lb.rel_target, lsn)   # register, then re-check before sleeping
            r = ld_u64_sc(&lb.released)
            if r >= lsn:
                return r
            futex_wait(&lb.released, <uint32_t>r, min(deadline - now, <uint64_t>FUTEX_SLICE_NS))


# ---------------------------------------------------------------- Python classes

cdef class _LogBuffer:
    """Common implementation; use :class:`MutexLogBuffer` or :class:`ConsolidatedLogBuffer`.
    Its fields and C core are declared in ``logbuffer.pxd``, for the modules that drive a buffer
    from C (``logwriter``, ``logbuffer_drivers``)."""

    def __cinit__(self, *args, **kwargs):
        self.lb = NULL
        self.gil_fast_path = True

    cdef _setup(self, capacity, start_lsn, int mode, int slots, bint locked_fast_path=False,
                bint delegated=False):
        cdef int i
        cdef tfx_lb *lb
        if capacity < 32:
            raise ValueError(f"capacity must be >= 32 bytes, got {capacity}")
        if start_lsn < 0:
            raise ValueError(f"start_lsn must be >= 0, got {start_lsn}")
        if not 1 <= slots <= MAX_SLOTS:
            raise ValueError(f"slots must be in 1..{MAX_SLOTS}, got {slots}")
        lb = lb_alloc()
        if lb == NULL:
            raise MemoryError()
        self.lb = lb
        lb.buf = <char *>malloc(<size_t>capacity)
        lb.pool = pool_alloc(POOL_SIZE)
        if lb.buf == NULL or lb.pool == NULL:
            raise MemoryError()
        memset(lb.buf, 0, <size_t>capacity)
        lb.capacity = capacity
        lb.max_group = capacity // 2
        lb.mode = mode
        lb.nslots = slots
        lb.locked_fast_path = locked_fast_path
        lb.delegated = delegated
        if delegated:
            lb.rel_ring = rel_alloc(REL_RING)
            if lb.rel_ring == NULL:
                raise MemoryError()
            lb.rel_ring[0].status = REL_GRANTED     # the first region has no predecessor
        lb.cur_lsn = start_lsn
        lb.released = start_lsn
        lb.flushed = start_lsn
        lb.rel_target = <uint64_t>-1
        pthread_mutex_init(&lb.L, NULL)
        pthread_mutex_init(&lb.space_mtx, NULL)
        pthread_cond_init(&lb.space_cond, NULL)
        for i in range(POOL_SIZE):
            lb.pool[i].state = FREE
        for i in range(slots):
            lb.pool[i].state = READY
            lb.pool[i].idx = i
            lb.slot_array[i] = &lb.pool[i]
        lb.pool_next = slots
        self.capacity = capacity
        self.max_record = capacity // 2

    def __dealloc__(self):
        cdef tfx_lb *lb = self.lb
        if lb == NULL:
            return
        pthread_mutex_destroy(&lb.L)
        pthread_mutex_destroy(&lb.space_mtx)
        pthread_cond_destroy(&lb.space_cond)
        free(lb.buf)
        free(lb.pool)
        free(lb.rel_ring)
        free(lb)
        self.lb = NULL

    def insert(self, record) -> int:
        """Reserve ``len(record)`` bytes at the current LSN, copy the record in with its own LSN
        patched (little-endian u64) into bytes [8, 16), release it; return the LSN.  Blocks, with
        the GIL released, while the ring lacks space.  ``16 <= len(record) <= capacity // 2``."""
        cdef const char *p
        cdef Py_ssize_t n
        cdef uint64_t lsn
        cdef Py_buffer view
        cdef tfx_lb *lb = self.lb
        if type(record) is bytes:
            p = PyBytes_AS_STRING(record)
            n = PyBytes_GET_SIZE(record)
            if n < 16 or <uint64_t>n > lb.max_group:
                raise ValueError(f"record length {n} outside 16..{lb.max_group}")
            if self.gil_fast_path and n <= GIL_HELD_MAX and not (lb.fill_delay_ns or lb.chaos_one_in) \
                    and try_insert_now(lb, p, <uint64_t>n, &lsn):
                return lsn
            with nogil:
                lsn = lb_insert(lb, p, <uint64_t>n)
            return lsn
        PyObject_GetBuffer(record, &view, PyBUF_SIMPLE)
        try:
            n = view.len
            if n < 16 or <uint64_t>n > lb.max_group:
                raise ValueError(f"record length {n} outside 16..{lb.max_group}")
            p = <const char *>view.buf
            with nogil:
                lsn = lb_insert(lb, p, <uint64_t>n)
        finally:
            PyBuffer_Release(&view)
        return lsn

    def released(self) -> int:
        """Every byte below this LSN has been filled (the gap-free prefix)."""
        return ld_u64(&self.lb.released)

    def reserved(self) -> int:
        """The next LSN to hand out."""
        return ld_u64(&self.lb.cur_lsn)

    def flushed(self) -> int:
        """The LSN last passed to :meth:`mark_flushed` (``start_lsn`` initially)."""
        return ld_u64(&self.lb.flushed)

    def read(self, start, end) -> bytes:
        """A copy of log bytes [start, end); needs flushed <= start <= end <= released()."""
        cdef tfx_lb *lb = self.lb
        cdef uint64_t s, e, f, r
        cdef char *dst
        if start < 0 or end < 0:
            raise ValueError(f"read [{start}, {end}): negative LSN")
        s = start
        e = end
        f = ld_u64(&lb.flushed)
        r = ld_u64(&lb.released)
        if not (f <= s <= e <= r):
            raise ValueError(f"read [{s}, {e}) outside the readable range [{f}, {r})")
        out = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>(e - s))
        dst = PyBytes_AS_STRING(out)
        with nogil:
            ring_get(lb, s, dst, e - s)
        return out

    def mark_flushed(self, lsn) -> None:
        """The flusher wrote everything below ``lsn``: that ring space may be reused."""
        cdef tfx_lb *lb = self.lb
        cdef uint64_t v, f, r
        if lsn < 0:
            raise ValueError(f"mark_flushed({lsn}): negative LSN")
        v = lsn
        f = ld_u64(&lb.flushed)
        r = ld_u64(&lb.released)
        if not (f <= v <= r):
            raise ValueError(f"mark_flushed({v}) outside [flushed {f}, released {r}]")
        with nogil:
            lb_mark_flushed(lb, v)

    def wait_released(self, lsn, timeout) -> int:
        """Block, GIL released, until released() >= lsn or ``timeout`` seconds (None: no limit)
        have passed; return released()."""
        cdef uint64_t target, r
        cdef double t = 1e18 if timeout is None else float(timeout)
        if lsn <= 0:
            return ld_u64(&self.lb.released)
        target = lsn
        with nogil:
            r = lb_wait_released(self.lb, target, t)
        return r

    def stats(self) -> dict:
        """Counters (approximate while inserts run): try-lock fast-path inserts, consolidation
        groups and their bytes, acquires that waited for ring space, futex sleeps of in-order
        releasers and slot members, futex wake-ups issued, delegated releases and refusals."""
        cdef tfx_lb *lb = self.lb
        return {
            "fast_path_inserts": lb.n_fast,
            "gil_held_inserts": lb.n_gil_held,
            "groups": lb.n_groups,
            "group_bytes": lb.n_group_bytes,
            "space_waits": lb.n_space_waits,
            "release_blocks": lb.n_release_blocks,
            "slot_blocks": lb.n_slot_blocks,
            "futex_wakes": lb.n_wakes,
            "delegated_releases": lb.n_delegated,
            "delegation_refusals": lb.n_refusals,
        }

    def _set_fill_delay(self, max_us) -> None:
        """Test hook: every fill then sleeps a random 0..max_us microseconds (GIL released), which
        scrambles the order in which fills complete (digest §8: delays injected inside fill)."""
        self.lb.fill_delay_ns = <uint64_t>(max_us * 1000)

    def _set_chaos(self, one_in) -> None:
        """Test hook: at the algorithm's interleaving points (between acquire and fill, slot
        install and close, hand-offs, ...) pause one time in ``one_in`` (0: never)."""
        self.lb.chaos_one_in = <uint32_t>one_in

    def __repr__(self):
        return (f"{type(self).__name__}(capacity={self.capacity}, flushed={self.flushed()}, "
                f"released={self.released()}, reserved={self.reserved()})")


cdef class MutexLogBuffer(_LogBuffer):
    """Aether's Algorithm 1: one mutex around acquire + fill + release (the baseline)."""

    def __init__(self, capacity: int, start_lsn: int = 0):
        self._setup(capacity, start_lsn, MODE_MUTEX, 1)


cdef class ConsolidatedLogBuffer(_LogBuffer):
    """Aether's CD buffer: consolidation array (``slots``, default 4) + decoupled fill with
    in-order release.  ``fast_path="locked"`` keeps the mutex through fill and release on the
    uncontended try-lock path; ``release="delegated"`` replaces in-order spinning by CDME-style
    delegated release (see the module docstring for when that matters)."""

    def __init__(self, capacity: int, start_lsn: int = 0, slots: int = 4, fast_path: str = "decoupled",
                 release: str = "in-order"):
        if fast_path not in ("decoupled", "locked"):
            raise ValueError(f"fast_path must be 'decoupled' or 'locked', got {fast_path!r}")
        if release not in ("in-order", "delegated"):
            raise ValueError(f"release must be 'in-order' or 'delegated', got {release!r}")
        self._setup(capacity, start_lsn, MODE_CD, slots, fast_path == "locked", release == "delegated")

# The C core of the Aether log buffers (ext/logbuffer.pyx), shared with the modules that drive a
# buffer from C without the GIL: ext/logwriter.pyx (DirectLogWriter, the durable flush path) and
# ext/logbuffer_drivers.pyx (the pthread benchmark and stress drivers). The verbatim C below
# (structs, atomics, futex and timing helpers) is compiled into each module that cimports this
# file; the functions declared after it live in logbuffer and are called through Cython's
# cross-module function table.

from libc.stdint cimport int64_t, uint32_t, uint64_t

cdef extern from *:
    """
    #include <stdint.h>
    #include <stdlib.h>
    #include <string.h>
    #include <errno.h>
    #include <sched.h>
    #include <time.h>
    #include <pthread.h>
    #include <limits.h>
    #ifdef __linux__
    #include <linux/futex.h>
    #include <sys/syscall.h>
    #include <unistd.h>
    #endif

    #define TFX_DONE      ((int64_t)0)
    #define TFX_PENDING   ((int64_t)1)
    #define TFX_FREE      ((int64_t)2)
    #define TFX_READY     ((int64_t)1 << 40)
    #define TFX_MAX_SLOTS 16
    #define TFX_POOL_SIZE 256

    /* One consolidation slot per cache line. */
    typedef struct __attribute__((aligned(64))) tfx_slot {
        int64_t state;        /* FREE / OPEN (>= READY) / PENDING / COPYING (<= DONE) */
        uint64_t lsn;         /* group base LSN, published by slot_notify */
        int64_t group_size;   /* group bytes, published by slot_notify */
        int32_t idx;          /* index in slot_array while installed (written under L) */
        int64_t waiters;      /* members blocked in futex_wait on state */
        uint64_t ticket;      /* the group's release ticket (delegated release), published by notify */
    } tfx_slot;

    /* Delegated release (CDME-style, as in Aether): one entry per acquired region, in LSN order. */
    #define TFX_REL_WAITING   ((int64_t)0)
    #define TFX_REL_DELEGATED ((int64_t)1)
    #define TFX_REL_GRANTED   ((int64_t)2)
    #define TFX_REL_RING      1024
    typedef struct __attribute__((aligned(64))) tfx_rel {
        int64_t status;       /* WAITING -> DELEGATED (owner left) or -> GRANTED (predecessor handed off) */
        uint64_t end;         /* end LSN of the region, written under L */
    } tfx_rel;

    /* The buffer.  Fields written by different parties sit on different cache lines. */
    typedef struct tfx_lb {
        char *buf;
        uint64_t capacity;
        uint64_t max_group;
        int mode;                                   /* 0 = mutex baseline, 1 = CD */
        int nslots;
        int locked_fast_path;                       /* CD: hold L through fill+release when uncontended */
        int delegated;                              /* CD: delegated release instead of in-order spinning */
        tfx_rel *rel_ring;
        uint64_t fill_delay_ns;                     /* test hook: random delay inside fill */
        uint32_t chaos_one_in;                      /* test hook: random pauses at interleaving points */
        tfx_slot *pool;
        tfx_slot *slot_array[TFX_MAX_SLOTS] __attribute__((aligned(64)));
        /* acquire side: protected by L */
        pthread_mutex_t L __attribute__((aligned(64)));
        uint64_t cur_lsn;                           /* reserved(); atomic stores so others may peek */
        uint64_t next_ticket;                       /* delegated release: next ticket to hand out */
        int pool_next;
        uint64_t n_fast, n_groups, n_group_bytes, n_space_waits;
        uint64_t n_gil_held;                        /* inserts done at once, GIL held */
        /* release side */
        uint64_t released __attribute__((aligned(64)));   /* next_release_lsn */
        int64_t rel_waiters __attribute__((aligned(64)));   /* in-order releasers in futex_wait on released */
        uint64_t rel_target;                        /* min LSN a wait_released caller sleeps for (or ~0) */
        int64_t n_release_blocks, n_slot_blocks, n_wakes;     /* slow-path counters (atomic adds) */
        int64_t n_delegated, n_refusals;
        uint64_t released_tickets __attribute__((aligned(64)));   /* delegated: tickets below are released */
        /* flush side */
        uint64_t flushed __attribute__((aligned(64)));
        int64_t space_waiters;
        pthread_mutex_t space_mtx;
        pthread_cond_t space_cond;
    } tfx_lb;

    static inline uint64_t tfx_ld_u64(uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline uint64_t tfx_ld_u64_sc(uint64_t *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
    static inline void tfx_st_u64(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    static inline void tfx_st_u64_sc(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
    static inline int64_t tfx_ld_i64(int64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline int64_t tfx_ld_i64_sc(int64_t *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
    static inline void tfx_st_i64(int64_t *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    static inline void tfx_st_i64_sc(int64_t *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
    static inline int tfx_cas_i64(int64_t *p, int64_t *expected, int64_t desired) {
        return __atomic_compare_exchange_n(p, expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    /* fetch-and-add; returns the old value */
    static inline int64_t tfx_add_i64(int64_t *p, int64_t v) { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }
    static inline int64_t tfx_add_i64_sc(int64_t *p, int64_t v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
    static inline int64_t tfx_xchg_i64(int64_t *p, int64_t v) { return __atomic_exchange_n(p, v, __ATOMIC_ACQ_REL); }
    static inline uint64_t tfx_xchg_u64(uint64_t *p, uint64_t v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
    /* atomic min: lower *p to v */
    static inline void tfx_min_u64(uint64_t *p, uint64_t v) {
        uint64_t cur = __atomic_load_n(p, __ATOMIC_SEQ_CST);
        while (v < cur && !__atomic_compare_exchange_n(p, &cur, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    }
    static inline tfx_slot *tfx_ld_slot(tfx_slot **p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline void tfx_st_slot(tfx_slot **p, tfx_slot *v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

    static inline void tfx_cpu_relax(void) {
    #if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
    #elif defined(__aarch64__)
        __asm__ __volatile__("yield" ::: "memory");
    #else
        __asm__ __volatile__("" ::: "memory");
    #endif
    }

    /* Per-thread xorshift32 for the random slot probe. */
    static __thread uint32_t tfx_rng_state;
    static inline uint32_t tfx_rand(void) {
        uint32_t x = tfx_rng_state;
        if (x == 0) x = (uint32_t)(uintptr_t)&tfx_rng_state ^ 0x9e3779b9u ^ (uint32_t)clock();
        if (x == 0) x = 1;
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        tfx_rng_state = x;
        return x;
    }

    static inline uint64_t tfx_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    }

    static inline void tfx_sleep_ns(uint64_t ns) {
        struct timespec ts;
        ts.tv_sec = (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        nanosleep(&ts, NULL);
    }

    /* pthread_cond_timedwait for at most ns nanoseconds (the condition uses CLOCK_REALTIME). */
    static inline int tfx_cond_wait_ns(pthread_cond_t *c, pthread_mutex_t *m, uint64_t ns) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t nsec = (uint64_t)ts.tv_nsec + ns % 1000000000ull;
        ts.tv_sec += (time_t)(ns / 1000000000ull + nsec / 1000000000ull);
        ts.tv_nsec = (long)(nsec % 1000000000ull);
        return pthread_cond_timedwait(c, m, &ts);
    }

    /* futex on the low 32 bits of a 64-bit word: wait while it still holds ``expected``. */
    static inline uint32_t *tfx_lo32(void *p) {
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        return (uint32_t *)p + 1;
    #else
        return (uint32_t *)p;
    #endif
    }
    static inline void tfx_futex_wait(void *word, uint32_t expected, uint64_t timeout_ns) {
        struct timespec ts;
        ts.tv_sec = (time_t)(timeout_ns / 1000000000ull);
        ts.tv_nsec = (long)(timeout_ns % 1000000000ull);
    #ifdef __linux__
        syscall(SYS_futex, tfx_lo32(word), FUTEX_WAIT_PRIVATE, expected, &ts, NULL, 0);
    #else
        (void)word; (void)expected;
        if (ts.tv_sec == 0 && ts.tv_nsec > 50000) ts.tv_nsec = 50000;
        nanosleep(&ts, NULL);
    #endif
    }
    static inline void tfx_futex_wake_all(void *word) {
    #ifdef __linux__
        syscall(SYS_futex, tfx_lo32(word), FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    #else
        (void)word;
    #endif
    }
    """
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    ctypedef unsigned long pthread_t

    int64_t DONE "TFX_DONE"
    int64_t PENDING "TFX_PENDING"
    int64_t FREE "TFX_FREE"
    int64_t READY "TFX_READY"
    int MAX_SLOTS "TFX_MAX_SLOTS"
    int POOL_SIZE "TFX_POOL_SIZE"

    ctypedef struct tfx_slot:
        int64_t state
        uint64_t lsn
        int64_t group_size
        int idx
        int64_t waiters
        uint64_t ticket

    int64_t REL_WAITING "TFX_REL_WAITING"
    int64_t REL_DELEGATED "TFX_REL_DELEGATED"
    int64_t REL_GRANTED "TFX_REL_GRANTED"
    int REL_RING "TFX_REL_RING"

    ctypedef struct tfx_rel:
        int64_t status
        uint64_t end

    ctypedef struct tfx_lb:
        char *buf
        uint64_t capacity
        uint64_t max_group
        int mode
        int nslots
        int locked_fast_path
        int delegated
        tfx_rel *rel_ring
        uint64_t fill_delay_ns
        uint32_t chaos_one_in
        tfx_slot *pool
        tfx_slot *slot_array[16]
        pthread_mutex_t L
        uint64_t cur_lsn
        uint64_t next_ticket
        int pool_next
        uint64_t n_fast
        uint64_t n_groups
        uint64_t n_group_bytes
        uint64_t n_space_waits
        uint64_t n_gil_held
        uint64_t released
        int64_t rel_waiters
        uint64_t rel_target
        int64_t n_release_blocks
        int64_t n_slot_blocks
        int64_t n_wakes
        int64_t n_delegated
        int64_t n_refusals
        uint64_t released_tickets
        uint64_t flushed
        int64_t space_waiters
        pthread_mutex_t space_mtx
        pthread_cond_t space_cond

    uint64_t ld_u64 "tfx_ld_u64"(uint64_t *p) noexcept nogil
    uint64_t ld_u64_sc "tfx_ld_u64_sc"(uint64_t *p) noexcept nogil
    void st_u64 "tfx_st_u64"(uint64_t *p, uint64_t v) noexcept nogil
    void st_u64_sc "tfx_st_u64_sc"(uint64_t *p, uint64_t v) noexcept nogil
    int64_t ld_i64 "tfx_ld_i64"(int64_t *p) noexcept nogil
    int64_t ld_i64_sc "tfx_ld_i64_sc"(int64_t *p) noexcept nogil
    void st_i64 "tfx_st_i64"(int64_t *p, int64_t v) noexcept nogil
    void st_i64_sc "tfx_st_i64_sc"(int64_t *p, int64_t v) noexcept nogil
    bint cas_i64 "tfx_cas_i64"(int64_t *p, int64_t *expected, int64_t desired) noexcept nogil
    int64_t add_i64 "tfx_add_i64"(int64_t *p, int64_t v) noexcept nogil
    int64_t add_i64_sc "tfx_add_i64_sc"(int64_t *p, int64_t v) noexcept nogil
    int64_t xchg_i64 "tfx_xchg_i64"(int64_t *p, int64_t v) noexcept nogil
    uint64_t xchg_u64 "tfx_xchg_u64"(uint64_t *p, uint64_t v) noexcept nogil
    void min_u64 "tfx_min_u64"(uint64_t *p, uint64_t v) noexcept nogil
    tfx_slot *ld_slot "tfx_ld_slot"(tfx_slot **p) noexcept nogil
    void st_slot "tfx_st_slot"(tfx_slot **p, tfx_slot *v) noexcept nogil
    void cpu_relax "tfx_cpu_relax"() noexcept nogil
    uint32_t fast_rand "tfx_rand"() noexcept nogil
    uint64_t now_ns "tfx_now_ns"() noexcept nogil
    void sleep_ns "tfx_sleep_ns"(uint64_t ns) noexcept nogil
    int cond_wait_ns "tfx_cond_wait_ns"(pthread_cond_t *c, pthread_mutex_t *m, uint64_t ns) noexcept nogil
    void futex_wait "tfx_futex_wait"(void *word, uint32_t expected, uint64_t timeout_ns) noexcept nogil
    void futex_wake_all "tfx_futex_wake_all"(void *word) noexcept nogil

    int pthread_mutex_init(pthread_mutex_t *m, void *attr) noexcept nogil
    int pthread_mutex_destroy(pthread_mutex_t *m) noexcept nogil
    int pthread_mutex_lock(pthread_mutex_t *m) noexcept nogil
    int pthread_mutex_trylock(pthread_mutex_t *m) noexcept nogil
    int pthread_mutex_unlock(pthread_mutex_t *m) noexcept nogil
    int pthread_cond_init(pthread_cond_t *c, void *attr) noexcept nogil
    int pthread_cond_destroy(pthread_cond_t *c) noexcept nogil
    int pthread_cond_broadcast(pthread_cond_t *c) noexcept nogil
    int pthread_create(pthread_t *t, void *attr, void *(*fn)(void *) noexcept nogil, void *arg) noexcept nogil
    int pthread_join(pthread_t t, void **ret) noexcept nogil
    int sched_yield() noexcept nogil


cdef bint spin_then_block(int *spins) noexcept nogil
cdef void ring_get(tfx_lb *lb, uint64_t lsn, char *dst, uint64_t n) noexcept nogil
cdef uint64_t lb_insert(tfx_lb *lb, const char *data, uint64_t size) noexcept nogil
cdef void lb_mark_flushed(tfx_lb *lb, uint64_t lsn) noexcept nogil
cdef uint64_t lb_wait_released(tfx_lb *lb, uint64_t lsn, double timeout) noexcept nogil


cdef class _LogBuffer:
    cdef tfx_lb *lb
    cdef readonly uint64_t capacity
    cdef readonly uint64_t max_record
    # insert() first tries ``try_insert_now`` with the GIL held: an uncontended insert from
    # Python then costs no GIL hand-off (two OS context switches with 8 threads on 2 cores).
    # False: always release the GIL, as the Python-thread rows of bench_logbuffer measure.
    cdef public bint gil_fast_path

    cdef _setup(self, capacity, start_lsn, int mode, int slots, bint locked_fast_path=*, bint delegated=*)

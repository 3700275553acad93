# cython: language_level=3
"""FUSE low-level handlers next to pyfuse3's: the operations pyfuse3 does not carry (``lseek``,
``fallocate``, ``ioctl``) and the hot ones it carries too slowly (lookup, getattr, forget,
create, open, read, write, flush, release, fsync, getxattr, unlink, mkdir, rmdir, rename,
setattr, opendir, releasedir, readdirplus, symlink, link, mknod, readlink, statfs,
listxattr, setxattr, removexattr, fsyncdir), added without forking pyfuse3.

pyfuse3 fills a ``struct fuse_lowlevel_ops`` and hands it to ``fuse_session_new()``, which
copies it into the session. This module defines ``fuse_session_new`` itself and, as it is
imported, promotes itself into the process's global symbol scope (``dlopen`` with
``RTLD_NOLOAD | RTLD_GLOBAL``). pyfuse3's extension, loaded later, binds its call to ours; ours
copies the table it was given, puts our handlers in the slots we registered (over pyfuse3's for
the hot ones), and calls libfuse's own ``fuse_session_new`` (``dlvsym(RTLD_NEXT, …,
"FUSE_3.0")``). Nothing changes for a process that never registers a handler: the table
passes through as it came.

Why the hot requests bypass pyfuse3: pyfuse3 turns every request into a trio task whose
coroutine awaits the filesystem and answers (~140 µs of Python per request on this machine,
``BENCHMARKS.md``), and a create through the mount is six requests. When a session has our
slots, threads of this module read ``/dev/fuse`` instead of pyfuse3 (as libfuse's
multi-threaded loop does; it also defines ``fuse_session_fd``, ``fuse_session_receive_buf``,
``fuse_session_unmount`` and ``fuse_session_destroy`` for that): a request for one of our slots
is answered start to end by the thread that read it, one call into Python, no hand-off; a
thread that waits (for the device, the log) holds up only its request, since another starts
to read while none is idle, and the spares end when the burst is over; a reader that has just
answered polls the device briefly before it sleeps, so a serial caller's next request costs no
wake-up. Every other request is queued for pyfuse3's tasks, which wait on a pipe instead of the
device.

Import order matters and is checked loudly: the ``traxfs`` package imports this module first,
before anything under it can import pyfuse3 (Python opens extensions ``RTLD_NOW``, so a pyfuse3
loaded earlier is bound to libfuse for good). :func:`install` refuses when pyfuse3 was loaded
first, and :func:`installed` tells, after ``pyfuse3.init()``, which slots the session really got.

Each request is answered exactly once: with the callable's result, with the errno of what it
raised (an exception with an ``errno`` attribute: ``FsError``, ``FUSEError``, ``OSError``),
with EIO and a log line for anything else, or with EIO at unmount if its reader has not
answered by then (``DRAIN_TIMEOUT``). The kernel refuses a reply only once the connection is aborted (a request it
has sent waits for its answer even when the caller is killed): the session is over then, so
what the result took (a lookup reference, an open handle) goes with it; the refusal is logged.
"""

import errno as _errno
import logging
import sys
import threading

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memset

cdef extern from *:
    """
    #define FUSE_USE_VERSION 312
    #ifndef _GNU_SOURCE
    #define _GNU_SOURCE
    #endif
    #include <dlfcn.h>
    #include <errno.h>
    #include <fcntl.h>
    #include <sys/epoll.h>
    #include <pthread.h>
    #include <sched.h>
    #include <stdint.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include <time.h>
    #include <string.h>
    #include <unistd.h>
    #include <sys/stat.h>
    #include <fuse_lowlevel.h>

    /* The handlers this module adds: filled by the Cython side before a session is made. Each
       non-NULL slot goes into the session's table, over pyfuse3's if it had one. */
    static struct fuse_lowlevel_ops traxll_extra;
    /* Which slots the last session got from us (bit per TRAXLL_* op), and how many sessions
       were made through us: zero after pyfuse3.init() means pyfuse3 bypassed this module. */
    enum { TRAXLL_LSEEK = 1, TRAXLL_FALLOCATE = 2, TRAXLL_IOCTL = 4, TRAXLL_LOOKUP = 8, TRAXLL_GETATTR = 16,
           TRAXLL_FORGET = 32, TRAXLL_CREATE = 64, TRAXLL_WRITE = 128, TRAXLL_FLUSH = 256,
           TRAXLL_RELEASE = 512, TRAXLL_FSYNC = 1024, TRAXLL_GETXATTR = 2048, TRAXLL_UNLINK = 4096,
           TRAXLL_READ = 8192, TRAXLL_OPEN = 16384, TRAXLL_MKDIR = 32768, TRAXLL_RMDIR = 65536,
           TRAXLL_RENAME = 131072, TRAXLL_SETATTR = 262144, TRAXLL_OPENDIR = 524288,
           TRAXLL_RELEASEDIR = 1048576, TRAXLL_READDIRPLUS = 2097152, TRAXLL_SYMLINK = 4194304,
           TRAXLL_LINK = 8388608, TRAXLL_MKNOD = 16777216, TRAXLL_READLINK = 33554432,
           TRAXLL_STATFS = 67108864, TRAXLL_LISTXATTR = 134217728, TRAXLL_SETXATTR = 268435456,
           TRAXLL_REMOVEXATTR = 536870912, TRAXLL_FSYNCDIR = 1073741824 };
    static unsigned traxll_filled;
    static unsigned long traxll_sessions;
    static void (*traxll_before_destroy)(void);
    static double (*traxll_drain_seconds)(void);  /* reads DRAIN_TIMEOUT (GIL taken) */

    typedef struct fuse_session *(*traxll_new_fn)(struct fuse_args *, const struct fuse_lowlevel_ops *,
                                                  size_t, void *);
    typedef void (*traxll_destroy_fn)(struct fuse_session *);

    static void *traxll_real(const char *name) {
        void *fn = dlvsym(RTLD_NEXT, name, "FUSE_3.0");
        if (fn == NULL)
            fprintf(stderr, "traxfs: libfuse's %s@FUSE_3.0 not found: %s\\n", name, dlerror());
        return fn;
    }

    #define TRAXLL_TAKE(slot, bit) \\
        if (traxll_extra.slot != NULL) { ops.slot = traxll_extra.slot; traxll_filled |= (bit); }

    __attribute__((visibility("default")))
    struct fuse_session *fuse_session_new(struct fuse_args *args, const struct fuse_lowlevel_ops *op,
                                          size_t op_size, void *userdata) {
        static traxll_new_fn real;
        struct fuse_lowlevel_ops ops;
        if (real == NULL && (real = (traxll_new_fn) traxll_real("fuse_session_new")) == NULL)
            return NULL;
        memset(&ops, 0, sizeof ops);
        memcpy(&ops, op, op_size < sizeof ops ? op_size : sizeof ops);
        traxll_filled = 0;
        TRAXLL_TAKE(lseek, TRAXLL_LSEEK)
        TRAXLL_TAKE(fallocate, TRAXLL_FALLOCATE)
        TRAXLL_TAKE(ioctl, TRAXLL_IOCTL)
        TRAXLL_TAKE(lookup, TRAXLL_LOOKUP)
        TRAXLL_TAKE(getattr, TRAXLL_GETATTR)
        TRAXLL_TAKE(create, TRAXLL_CREATE)
        TRAXLL_TAKE(read, TRAXLL_READ)
        TRAXLL_TAKE(open, TRAXLL_OPEN)
        TRAXLL_TAKE(mkdir, TRAXLL_MKDIR)
        TRAXLL_TAKE(rmdir, TRAXLL_RMDIR)
        TRAXLL_TAKE(rename, TRAXLL_RENAME)
        TRAXLL_TAKE(setattr, TRAXLL_SETATTR)
        TRAXLL_TAKE(opendir, TRAXLL_OPENDIR)
        TRAXLL_TAKE(releasedir, TRAXLL_RELEASEDIR)
        TRAXLL_TAKE(readdirplus, TRAXLL_READDIRPLUS)
        TRAXLL_TAKE(symlink, TRAXLL_SYMLINK)
        TRAXLL_TAKE(link, TRAXLL_LINK)
        TRAXLL_TAKE(mknod, TRAXLL_MKNOD)
        TRAXLL_TAKE(readlink, TRAXLL_READLINK)
        TRAXLL_TAKE(statfs, TRAXLL_STATFS)
        TRAXLL_TAKE(listxattr, TRAXLL_LISTXATTR)
        TRAXLL_TAKE(setxattr, TRAXLL_SETXATTR)
        TRAXLL_TAKE(removexattr, TRAXLL_REMOVEXATTR)
        TRAXLL_TAKE(fsyncdir, TRAXLL_FSYNCDIR)
        TRAXLL_TAKE(flush, TRAXLL_FLUSH)
        TRAXLL_TAKE(release, TRAXLL_RELEASE)
        TRAXLL_TAKE(fsync, TRAXLL_FSYNC)
        TRAXLL_TAKE(getxattr, TRAXLL_GETXATTR)
        TRAXLL_TAKE(unlink, TRAXLL_UNLINK)
        if (traxll_extra.forget != NULL) {  /* one and many: both or neither */
            ops.forget = traxll_extra.forget;
            ops.forget_multi = traxll_extra.forget_multi;
            traxll_filled |= TRAXLL_FORGET;
        }
        if (traxll_extra.write != NULL) {  /* libfuse prefers write_buf: pyfuse3's must go */
            ops.write = traxll_extra.write;
            ops.write_buf = NULL;
            traxll_filled |= TRAXLL_WRITE;
        }
        traxll_sessions++;
        return real(args, &ops, sizeof ops, userdata);
    }

    /* ----- the session's reader threads -----------------------------------------------------
       pyfuse3 reads each request in a trio task: a lock, an epoll registration, a wake-up and a
       scheduler round per request, and our handler then handed anything that could wait to a
       worker thread (a second wake-up). When this module serves slots, threads of its own read
       /dev/fuse instead, like libfuse's multi-threaded loop: a request for one of our slots is
       answered by the thread that read it, start to end (it takes the GIL for its call into
       Python; a thread that waits for the device or the log holds up only its own request,
       since another thread is started to read while none is idle). Any other request is
       queued for pyfuse3, whose tasks wait on a pipe instead of the device
       (``fuse_session_fd`` returns its read end) and take it from the queue
       (``fuse_session_receive_buf``). Replies go to the session's own descriptor as before. */
    #define TRAXLL_MAX_READERS 64  /* requests of ours answered at once (each may wait for I/O) */
    /* a reader that finds this many others idle ends. Spares are kept so that a request that
       arrives while one is answered finds a reader waiting: with 2, a serial workload whose
       requests overlap (an unlink and the forget it causes) started and ended a thread, with
       its Python thread state, every few requests */
    #define TRAXLL_MAX_IDLE 8

    typedef int (*traxll_fd_fn)(struct fuse_session *);
    typedef int (*traxll_recv_fn)(struct fuse_session *, struct fuse_buf *);
    typedef void (*traxll_proc_fn)(struct fuse_session *, const struct fuse_buf *);

    struct traxll_queued { struct traxll_queued *next; size_t size; void *mem; };

    static struct {
        struct fuse_session *se;  /* the session read, while ``running`` */
        int running;  /* readers started for ``se`` and not yet stopped */
        int stopping;  /* the session is being destroyed: readers end */
        int done;  /* the device ended (unmounted, aborted): pyfuse3's receive gets 0 */
        int threads, idle, peak;  /* readers alive; of them waiting for a request; most alive */
        int dropping;  /* readers in traxll_drop_written (they use the session and the device) */
        unsigned long gen;  /* the readers' generation: a reader of an older session (still busy
                               when that session ended) only finishes and leaves */
        int dev;  /* our own descriptor of the session's /dev/fuse (dup, non-blocking) */
        /* The idle readers all wait in this one epoll set: a set wakes its waiters last come,
           first woken, so a request goes to the reader that finished last (its stack and
           thread state warm), and one request wakes one reader — the device is registered
           EPOLLONESHOT and re-armed by the reader it woke as soon as that one has read. (poll(2)
           woke every idle reader for every request, so spares could not be kept and readers
           were started and ended every few requests; a set per reader with EPOLLEXCLUSIVE
           wakes one, but the one idle longest.) The stop pipe is level-triggered: a stop wakes
           them all, one after another. */
        int ep;
        int wake_r, wake_w;  /* one byte per request queued for pyfuse3 (+1 once done) */
        int stop_r, stop_w;  /* written at destroy: every reader wakes and ends */
        pthread_mutex_t lock;  /* all of the above but the descriptors' use */
        pthread_cond_t gone;  /* a reader ended */
        struct traxll_queued *head, *tail;
        unsigned long direct, queued;  /* requests answered by readers / queued for pyfuse3 */
        unsigned long started;  /* readers started since the session started */
    } traxll_rd = { .lock = PTHREAD_MUTEX_INITIALIZER, .gone = PTHREAD_COND_INITIALIZER, .dev = -1,
                    .wake_r = -1, .wake_w = -1, .stop_r = -1, .stop_w = -1, .ep = -1 };
    static traxll_proc_fn traxll_process;

    /* Is this opcode (linux/fuse.h) one of the slots the session got from us? */
    static int traxll_ours(uint32_t opcode) {
        switch (opcode) {
        case 1: return traxll_filled & TRAXLL_LOOKUP;
        case 2: case 42: return traxll_filled & TRAXLL_FORGET;  /* FORGET, BATCH_FORGET */
        case 3: return traxll_filled & TRAXLL_GETATTR;
        case 4: return traxll_filled & TRAXLL_SETATTR;
        case 9: return traxll_filled & TRAXLL_MKDIR;
        case 10: return traxll_filled & TRAXLL_UNLINK;
        case 11: return traxll_filled & TRAXLL_RMDIR;
        case 12: case 45: return traxll_filled & TRAXLL_RENAME;  /* RENAME, RENAME2 */
        case 14: return traxll_filled & TRAXLL_OPEN;
        case 15: return traxll_filled & TRAXLL_READ;
        case 16: return traxll_filled & TRAXLL_WRITE;
        case 18: return traxll_filled & TRAXLL_RELEASE;
        case 20: return traxll_filled & TRAXLL_FSYNC;
        case 22: return traxll_filled & TRAXLL_GETXATTR;
        case 25: return traxll_filled & TRAXLL_FLUSH;
        case 27: return traxll_filled & TRAXLL_OPENDIR;
        case 29: return traxll_filled & TRAXLL_RELEASEDIR;
        case 44: return traxll_filled & TRAXLL_READDIRPLUS;
        case 5: return traxll_filled & TRAXLL_READLINK;
        case 6: return traxll_filled & TRAXLL_SYMLINK;
        case 8: return traxll_filled & TRAXLL_MKNOD;
        case 13: return traxll_filled & TRAXLL_LINK;
        case 17: return traxll_filled & TRAXLL_STATFS;
        case 23: return traxll_filled & TRAXLL_LISTXATTR;
        case 21: return traxll_filled & TRAXLL_SETXATTR;
        case 24: return traxll_filled & TRAXLL_REMOVEXATTR;
        case 30: return traxll_filled & TRAXLL_FSYNCDIR;
        case 35: return traxll_filled & TRAXLL_CREATE;
        case 39: return traxll_filled & TRAXLL_IOCTL;
        case 43: return traxll_filled & TRAXLL_FALLOCATE;
        case 46: return traxll_filled & TRAXLL_LSEEK;
        default: return 0;
        }
    }

    static void traxll_wake(void) {  /* under the lock: the descriptor is open */
        ssize_t r = write(traxll_rd.wake_w, "r", 1);  /* a full pipe is readable anyway */
        (void) r;
    }

    static void *traxll_reader(void *arg);
    static int traxll_spawn(void);

    /* A write the kernel sent for an O_DIRECT descriptor (not the write-back of a cached page)? */
    static int traxll_direct_write(const struct fuse_file_info *fi) {
        return (fi->flags & O_DIRECT) && !fi->writepage;
    }

    /* Drop the kernel's cached pages of [off, off + len) of ``ino`` (off < 0: its attributes
       only, which waits for nothing): called once a direct write is done and answered, never
       before — an asynchronous direct write holds one of the kernel's 12 background slots until
       answered, a readahead waiting for a slot keeps its pages locked, and this waits for those
       locks (twelve writes dropping before answering hung for good in CI). The kernel drops
       them before it sends the write, and after it only for a write that finished synchronously; a buffered read in between
       (answered, rightly, with the old bytes) would otherwise leave them cached once an
       asynchronous write (libaio, io_uring) completes. Called without the GIL and without any
       of the filesystem's locks: the kernel waits here for pages locked by reads in flight,
       which the readers answer, and writes back a page dirtied through mmap, which another
       reader answers — so one is made sure to be reading first. Not done once the session
       stops (quiesce waits for the ones under way before it closes the descriptors). */
    static void traxll_drop_written(uint64_t ino, int64_t off, int64_t len) {
        pthread_mutex_lock(&traxll_rd.lock);
        struct fuse_session *se = traxll_rd.running && !traxll_rd.stopping ? traxll_rd.se : NULL;
        if (se != NULL) {
            traxll_rd.dropping++;
            if (traxll_rd.idle == 0)
                traxll_spawn();
        }
        pthread_mutex_unlock(&traxll_rd.lock);
        if (se == NULL)
            return;
        int r = fuse_lowlevel_notify_inval_inode(se, ino, off, len);
        if (r != 0 && r != -ENOENT && r != -ENODEV)  /* ENOENT: no page of it cached; ENODEV: unmounted */
            fprintf(stderr, "traxfs: dropping the kernel's cache of inode %llu (from %lld): %s\\n",
                    (unsigned long long) ino, (long long) off, strerror(-r));
        pthread_mutex_lock(&traxll_rd.lock);
        traxll_rd.dropping--;
        pthread_cond_broadcast(&traxll_rd.gone);
        pthread_mutex_unlock(&traxll_rd.lock);
    }

    /* Answer EIO every request queued for pyfuse3 that it will never take (its loop has ended):
       under the lock, the device still open. A read the kernel holds a page locked for would
       otherwise wait for the connection to end, and a reader dropping that page with it. */
    static void traxll_answer_queued(void) {
        while (traxll_rd.head != NULL) {
            struct traxll_queued *q = traxll_rd.head;
            traxll_rd.head = q->next;
            uint32_t opcode;
            struct { uint32_t len; int32_t error; uint64_t unique; } out = {16, -EIO, 0};
            memcpy(&opcode, (char *) q->mem + 4, sizeof opcode);
            memcpy(&out.unique, (char *) q->mem + 8, sizeof out.unique);
            if (opcode != 2 && opcode != 42 && opcode != 36) {  /* FORGET, BATCH_FORGET, INTERRUPT: no answer */
                ssize_t r = write(traxll_rd.dev, &out, sizeof out);
                (void) r;  /* ENOENT: the caller was interrupted; ENODEV: the connection ended */
            }
            free(q->mem);
            free(q);
        }
        traxll_rd.tail = NULL;
    }

    /* Register (EPOLL_CTL_ADD) or re-arm (EPOLL_CTL_MOD) the device in the readers' set, one
       shot: the next request wakes one idle reader. 0, or -1 with errno. */
    static int traxll_arm_device(int op) {
        struct epoll_event ev;
        memset(&ev, 0, sizeof ev);
        ev.events = EPOLLIN | EPOLLONESHOT;
        ev.data.fd = traxll_rd.dev;
        return epoll_ctl(traxll_rd.ep, op, traxll_rd.dev, &ev);
    }

    static int traxll_spawn(void) {  /* under the lock */
        pthread_t t;
        pthread_attr_t attr;
        int ok;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        ok = pthread_create(&t, &attr, traxll_reader, (void *) (uintptr_t) traxll_rd.gen) == 0;
        pthread_attr_destroy(&attr);
        if (ok) {
            traxll_rd.threads++;
            traxll_rd.started++;
            if (traxll_rd.threads > traxll_rd.peak)
                traxll_rd.peak = traxll_rd.threads;
        }
        return ok;
    }

    /* How long a reader that has answered a request keeps polling the device before it sleeps
       (nanoseconds; 0: never), one reader at a time. A serial caller sends its next request a
       few microseconds after its answer; a reader asleep by then costs a wake-up on an idle
       CPU, which on a virtual machine (the halted vCPU exits to the host) was more than half of
       a request's round trip here (a FLUSH: 44 µs, 20 µs with the poll). One poller at most,
       and it yields the CPU between reads: a burst of requests answered at once must not leave
       every reader burning a CPU, nor a poll delay a thread with work (pyfuse3's, a worker). */
    static uint64_t traxll_spin_ns = 50000;
    static int traxll_spinning;  /* a reader is polling (atomic) */

    static uint64_t traxll_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
    }

    /* Poll the (non-blocking) device for up to traxll_spin_ns: 1 with the result of a read in
       ``*n`` (a request, or an error other than "nothing yet"), 0 when nothing came (sleep). */
    static int traxll_spin(char *mem, size_t cap, ssize_t *n) {
        uint64_t until;
        int got = 0;
        if (traxll_spin_ns == 0 || __atomic_exchange_n(&traxll_spinning, 1, __ATOMIC_ACQ_REL))
            return 0;
        until = traxll_now_ns() + traxll_spin_ns;
        for (;;) {
            *n = read(traxll_rd.dev, mem, cap);
            if (*n >= 0 || (errno != EAGAIN && errno != EINTR && errno != ENOENT)) {
                got = 1;
                break;
            }
            if (__atomic_load_n(&traxll_rd.stopping, __ATOMIC_RELAXED) || traxll_now_ns() >= until)
                break;
            sched_yield();  /* a thread that can run here runs first: the poll takes only idle time */
        }
        __atomic_store_n(&traxll_spinning, 0, __ATOMIC_RELEASE);
        return got;
    }

    /* The request this reader thread is answering (raw, as read from the device), for what
       libfuse does not hand our handlers: the kill flags of HANDLE_KILLPRIV_V2 below. */
    static __thread const char *traxll_cur;
    static __thread size_t traxll_cur_len;

    /* The INIT request's unique (0: none read yet), whichever thread reads it: its answer is
       the one whose flags ``traxll_io_writev`` adds HANDLE_KILLPRIV_V2 to. */
    #define TRAXLL_OP_INIT 26
    static uint64_t traxll_init_unique;

    static void traxll_note_init(const char *mem) {  /* an INIT request, read whole */
        uint64_t unique;
        memcpy(&unique, mem + 8, sizeof unique);
        __atomic_store_n(&traxll_init_unique, unique, __ATOMIC_RELEASE);
    }

    static void *traxll_reader(void *arg) {
        unsigned long gen = (unsigned long) (uintptr_t) arg;
        struct fuse_session *se;
        /* libfuse's own request buffer size: the largest write the kernel may send, + header */
        size_t cap = 256 * (size_t) sysconf(_SC_PAGESIZE) + 0x1000;
        char *mem = malloc(cap);
        int ended = mem == NULL;  /* the device is gone (or this thread cannot read it) */
        struct epoll_event got[2];
        /* this reader has just answered a request itself (not queued one for pyfuse3, whose
           answer comes later from another thread): its caller's next request may be close */
        int answered = 0;
        /* one Python thread state for the thread's life: the handlers' GIL acquisitions then
           cost a lock, not a new thread state each */
        PyGILState_STATE gil = PyGILState_Ensure();
        PyThreadState *ts = PyEval_SaveThread();
        pthread_mutex_lock(&traxll_rd.lock);
        se = traxll_rd.se;
        while (!ended && gen == traxll_rd.gen && !traxll_rd.stopping && !traxll_rd.done
               && traxll_rd.idle < TRAXLL_MAX_IDLE) {
            traxll_rd.idle++;
            pthread_mutex_unlock(&traxll_rd.lock);
            ssize_t n = -1;
            uint32_t dev_events = 0, stop_events = 0;
            int k = 0, spun = answered && traxll_spin(mem, cap, &n);
            answered = 0;  /* one poll per request answered */
            if (!spun)
                k = epoll_wait(traxll_rd.ep, got, 2, -1);
            if (k < 0 && errno != EINTR) {
                perror("traxfs: waiting on the FUSE device");
                ended = 1;
            }
            for (int i = 0; i < k; i++) {
                if (got[i].data.fd == traxll_rd.stop_r) stop_events |= got[i].events;
                else dev_events |= got[i].events;
            }
            if (spun || k <= 0 || stop_events) {
                ;  /* a request read while spinning, interrupted, or stopping: seen at the top */
            } else if (dev_events & EPOLLIN) {
                n = read(traxll_rd.dev, mem, cap);
            } else if (dev_events & (EPOLLERR | EPOLLHUP)) {
                ended = 1;  /* unmounted or aborted */
            }
            if (spun || (dev_events & EPOLLIN)) {
                /* EAGAIN: another reader took it; ENOENT: interrupted, retry; ENODEV: unmounted */
                if (n < 0 && errno != EINTR && errno != EAGAIN && errno != ENOENT) {
                    if (errno != ENODEV)
                        perror("traxfs: reading the FUSE device");
                    ended = 1;
                } else if (n >= 0 && n < 40) {  /* shorter than struct fuse_in_header */
                    fprintf(stderr, "traxfs: short read on the FUSE device (%zd bytes)\\n", n);
                    ended = 1;
                    n = -1;
                }
            }
            pthread_mutex_lock(&traxll_rd.lock);
            /* re-armed while still counted idle: the set is not closed yet */
            if (dev_events && traxll_arm_device(EPOLL_CTL_MOD) != 0 && !ended) {
                perror("traxfs: waiting on the FUSE device");
                ended = 1;
            }
            traxll_rd.idle--;
            if (traxll_rd.stopping)  /* the stopper waits for no reader to use the descriptors */
                pthread_cond_broadcast(&traxll_rd.gone);
            if (n < 0)
                continue;
            uint32_t opcode;
            memcpy(&opcode, mem + 4, sizeof opcode);
            if (opcode == TRAXLL_OP_INIT)
                traxll_note_init(mem);
            if (traxll_ours(opcode)) {
                if (traxll_rd.idle == 0 && traxll_rd.threads < TRAXLL_MAX_READERS && !traxll_rd.stopping)
                    traxll_spawn();  /* someone must read while this one answers */
                pthread_mutex_unlock(&traxll_rd.lock);
                struct fuse_buf b;
                memset(&b, 0, sizeof b);
                b.size = (size_t) n;
                b.mem = mem;
                b.fd = -1;
                traxll_cur = mem;
                traxll_cur_len = (size_t) n;
                traxll_process(se, &b);  /* our handler takes the GIL itself */
                traxll_cur = NULL;
                __atomic_add_fetch(&traxll_rd.direct, 1, __ATOMIC_RELAXED);
                answered = 1;
                pthread_mutex_lock(&traxll_rd.lock);
                continue;
            }
            struct traxll_queued *q = malloc(sizeof *q);
            void *copy = malloc((size_t) n);
            if (q == NULL || copy == NULL) {
                free(q); free(copy);
                fprintf(stderr, "traxfs: out of memory queueing a FUSE request\\n");
                ended = 1;
                continue;
            }
            memcpy(copy, mem, (size_t) n);
            q->next = NULL; q->size = (size_t) n; q->mem = copy;
            if (traxll_rd.tail != NULL) traxll_rd.tail->next = q; else traxll_rd.head = q;
            traxll_rd.tail = q;
            traxll_rd.queued++;
            traxll_wake();
        }
        if (gen == traxll_rd.gen) {  /* else: its session is gone, the counts are another's */
            if (ended && !traxll_rd.done && !traxll_rd.stopping) {
                traxll_rd.done = 1;
                fuse_session_exit(se);  /* pyfuse3's tasks end ... */
                traxll_wake();  /* ... woken by a byte never consumed */
            }
            traxll_rd.threads--;
            pthread_cond_broadcast(&traxll_rd.gone);
        }
        pthread_mutex_unlock(&traxll_rd.lock);
        free(mem);
        PyEval_RestoreThread(ts);
        PyGILState_Release(gil);
        return NULL;
    }

    static void traxll_close_fds(void) {
        int *fds[] = {&traxll_rd.ep, &traxll_rd.dev, &traxll_rd.wake_r, &traxll_rd.wake_w, &traxll_rd.stop_r,
                      &traxll_rd.stop_w};
        for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
            if (*fds[i] >= 0) { close(*fds[i]); *fds[i] = -1; }
    }

    /* Start reading ``se`` (whose device descriptor is ``fd``); the descriptor pyfuse3 should
       wait on instead, or ``fd`` itself if no reader could start. */
    static int traxll_start_readers(struct fuse_session *se, int fd) {
        int wake[2], stop[2], ok;
        if (traxll_process == NULL) {
            traxll_process = (traxll_proc_fn) traxll_real("fuse_session_process_buf");
            if (traxll_process == NULL)
                return fd;
        }
        /* our own descriptor, non-blocking (the flag is the open file's: libfuse's descriptor
           shares it, and only ever writes replies, which never block) */
        if ((traxll_rd.dev = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0 ||
                fcntl(traxll_rd.dev, F_SETFL, fcntl(traxll_rd.dev, F_GETFL) | O_NONBLOCK) != 0)
            goto fail;
        if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0)
            goto fail;
        traxll_rd.wake_r = wake[0]; traxll_rd.wake_w = wake[1];
        if (pipe2(stop, O_CLOEXEC) != 0)
            goto fail;
        traxll_rd.stop_r = stop[0]; traxll_rd.stop_w = stop[1];
        if ((traxll_rd.ep = epoll_create1(EPOLL_CLOEXEC)) < 0 || traxll_arm_device(EPOLL_CTL_ADD) != 0)
            goto fail;
        struct epoll_event ev;
        memset(&ev, 0, sizeof ev);
        ev.events = EPOLLIN;
        ev.data.fd = traxll_rd.stop_r;
        if (epoll_ctl(traxll_rd.ep, EPOLL_CTL_ADD, traxll_rd.stop_r, &ev) != 0)
            goto fail;
        pthread_mutex_lock(&traxll_rd.lock);
        traxll_rd.se = se;
        traxll_rd.gen++;
        traxll_rd.stopping = traxll_rd.done = traxll_rd.threads = traxll_rd.idle = traxll_rd.peak = 0;
        traxll_rd.dropping = 0;
        traxll_rd.direct = traxll_rd.queued = traxll_rd.started = 0;
        ok = traxll_spawn();
        traxll_rd.running = ok;
        pthread_mutex_unlock(&traxll_rd.lock);
        if (ok)
            return traxll_rd.wake_r;
    fail:
        perror("traxfs: starting the FUSE reader threads (pyfuse3 reads the device itself)");
        traxll_close_fds();
        return fd;
    }

    /* Stop reading the device: no reader polls or reads it after this, so our descriptors are
       closed (with libfuse's own, closed as it unmounts, the kernel then ends the connection:
       a caller whose request is still being answered gets ENOTCONN instead of waiting on a
       device nobody reads). Readers busy answering a request go on with it. The GIL (held by
       our caller, pyfuse3's close) is released meanwhile: a reader may be waiting for it. */
    static void traxll_quiesce(double wait) {
        PyThreadState *ts = PyGILState_Check() ? PyEval_SaveThread() : NULL;
        struct timespec until;
        int closed = 1;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t) wait + 1;
        pthread_mutex_lock(&traxll_rd.lock);
        if (!traxll_rd.stopping) {
            traxll_rd.stopping = 1;
            ssize_t r = write(traxll_rd.stop_w, "s", 1);
            (void) r;
            while (traxll_rd.idle > 0)  /* polling readers see the stop byte at once */
                if (pthread_cond_timedwait(&traxll_rd.gone, &traxll_rd.lock, &until) == ETIMEDOUT) {
                    closed = 0;
                    break;
                }
            traxll_answer_queued();
            while (closed && traxll_rd.dropping > 0)
                if (pthread_cond_timedwait(&traxll_rd.gone, &traxll_rd.lock, &until) == ETIMEDOUT)
                    closed = 0;
            if (closed)
                traxll_close_fds();
        }
        pthread_mutex_unlock(&traxll_rd.lock);
        if (!closed)
            fprintf(stderr, "traxfs: a FUSE reader thread still polls the device at unmount: descriptors left open\\n");
        if (ts != NULL)
            PyEval_RestoreThread(ts);
    }

    /* End the readers, each after the request it is answering (GIL released meanwhile). A
       reader still busy after ``wait`` seconds is left to finish alone: its request is answered
       EIO by the drain, and it touches neither the session nor the counts again (it belongs to
       an older generation once another session starts). Returns how many of those are still
       dropping cached pages through the session (it must not be freed under them). */
    static int traxll_stop_readers(double wait) {
        traxll_quiesce(wait);
        PyThreadState *ts = PyGILState_Check() ? PyEval_SaveThread() : NULL;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t) wait;
        until.tv_nsec += (long) ((wait - (time_t) wait) * 1e9);
        if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
        pthread_mutex_lock(&traxll_rd.lock);
        int left = 0;
        while (traxll_rd.threads > 0)
            if (pthread_cond_timedwait(&traxll_rd.gone, &traxll_rd.lock, &until) == ETIMEDOUT) {
                left = traxll_rd.threads;
                break;
            }
        traxll_rd.running = 0;
        traxll_rd.se = NULL;
        traxll_answer_queued();  /* queued by a reader quiesce gave up waiting for */
        int dropping = traxll_rd.dropping;
        pthread_mutex_unlock(&traxll_rd.lock);
        if (left)
            fprintf(stderr, "traxfs: %d FUSE reader thread(s) still busy at unmount: left to finish\\n", left);
        if (ts != NULL)
            PyEval_RestoreThread(ts);
        return dropping;
    }

    __attribute__((visibility("default")))
    int fuse_session_fd(struct fuse_session *se) {
        static traxll_fd_fn real;
        if (real == NULL && (real = (traxll_fd_fn) traxll_real("fuse_session_fd")) == NULL)
            return -1;
        int fd = real(se);
        if (traxll_rd.running)
            return se == traxll_rd.se ? traxll_rd.wake_r : fd;
        if (traxll_filled == 0 || fd < 0)  /* a session without our slots: untouched */
            return fd;
        return traxll_start_readers(se, fd);
    }

    __attribute__((visibility("default")))
    int fuse_session_receive_buf(struct fuse_session *se, struct fuse_buf *buf) {
        static traxll_recv_fn real;
        if (!traxll_rd.running || se != traxll_rd.se) {
            if (real == NULL && (real = (traxll_recv_fn) traxll_real("fuse_session_receive_buf")) == NULL)
                return -EIO;
            return real(se, buf);
        }
        pthread_mutex_lock(&traxll_rd.lock);
        struct traxll_queued *q = traxll_rd.head;
        if (q != NULL) {
            traxll_rd.head = q->next;
            if (traxll_rd.head == NULL)
                traxll_rd.tail = NULL;
        }
        int done = traxll_rd.done;
        pthread_mutex_unlock(&traxll_rd.lock);
        if (q == NULL)
            return done ? 0 : -EINTR;  /* 0 ends pyfuse3's task; -EINTR: it waits again */
        char c;
        ssize_t r = read(traxll_rd.wake_r, &c, 1);  /* this request's byte */
        (void) r;
        free(buf->mem);  /* pyfuse3's buffer (malloc'ed by libfuse or by us): replaced */
        buf->mem = q->mem;
        buf->size = q->size;
        buf->flags = 0;
        buf->fd = -1;
        buf->pos = 0;
        free(q);
        return (int) buf->size;
    }

    /* ----- HANDLE_KILLPRIV_V2 -----------------------------------------------------------------
       Without it the kernel asks for ``security.capability`` (a GETXATTR round trip) before
       every write(2) to a file, to know whether the write must drop it, and kills set-user-ID
       and set-group-ID bits itself with a SETATTR. With it (FUSE 7.33) the superblock is
       SB_NOSEC: a file found once without capabilities or set-ID bits is written without the
       question, and the server kills the set-ID bits itself when a request says so (a write,
       a truncating open, a truncate or chown: ``traxll_kill_suidgid``). libfuse 3.14
       cannot ask for it, so its INIT answer goes through our ``writev`` (a custom I/O set as
       the session mounts) and gets the flag there. */
    #define TRAXLL_HANDLE_KILLPRIV_V2 (1u << 28)
    static int traxll_killpriv_v2;  /* the kernel was told: 1 */

    static ssize_t traxll_io_read(int fd, void *buf, size_t len, void *userdata) {
        (void) userdata;
        ssize_t n = read(fd, buf, len);
        uint32_t opcode;
        if (n >= 40) {
            memcpy(&opcode, (const char *) buf + 4, sizeof opcode);
            if (opcode == TRAXLL_OP_INIT)
                traxll_note_init((const char *) buf);
        }
        return n;
    }

    static ssize_t traxll_io_writev(int fd, struct iovec *iov, int count, void *userdata) {
        (void) userdata;
        uint64_t init = __atomic_load_n(&traxll_init_unique, __ATOMIC_ACQUIRE);
        if (init != 0 && count == 2 && iov[0].iov_len == 16 && iov[1].iov_len >= 16 && iov[1].iov_len <= 256) {
            uint64_t unique;
            int32_t error;
            memcpy(&error, (char *) iov[0].iov_base + 4, sizeof error);
            memcpy(&unique, (char *) iov[0].iov_base + 8, sizeof unique);
            if (unique == init && error == 0) {  /* the answer to INIT: struct fuse_init_out */
                char arg[256];
                uint32_t flags;
                struct iovec patched[2] = {iov[0], {arg, iov[1].iov_len}};
                memcpy(arg, iov[1].iov_base, iov[1].iov_len);
                memcpy(&flags, arg + 12, sizeof flags);  /* after major, minor, max_readahead */
                flags |= TRAXLL_HANDLE_KILLPRIV_V2;
                memcpy(arg + 12, &flags, sizeof flags);
                __atomic_store_n(&traxll_init_unique, 0, __ATOMIC_RELEASE);
                ssize_t r = writev(fd, patched, 2);
                if (r >= 0)
                    traxll_killpriv_v2 = 1;
                return r;
            }
        }
        return writev(fd, iov, count);
    }

    typedef int (*traxll_mount_fn)(struct fuse_session *, const char *);

    __attribute__((visibility("default")))
    int fuse_session_mount(struct fuse_session *se, const char *mountpoint) {
        static traxll_mount_fn real;
        static traxll_fd_fn real_fd;
        static const struct fuse_custom_io io = {.writev = traxll_io_writev, .read = traxll_io_read};
        if (real == NULL && (real = (traxll_mount_fn) traxll_real("fuse_session_mount")) == NULL)
            return -1;
        if (real_fd == NULL && (real_fd = (traxll_fd_fn) traxll_real("fuse_session_fd")) == NULL)
            return -1;
        int r = real(se, mountpoint);
        traxll_killpriv_v2 = 0;
        __atomic_store_n(&traxll_init_unique, 0, __ATOMIC_RELEASE);
        /* only where our handlers answer every request that may carry a kill flag */
        unsigned needed = TRAXLL_WRITE | TRAXLL_OPEN | TRAXLL_CREATE | TRAXLL_SETATTR | TRAXLL_FALLOCATE;
        if (r == 0 && (traxll_filled & needed) == needed) {
            int e = fuse_session_custom_io(se, &io, real_fd(se));
            if (e != 0)
                fprintf(stderr, "traxfs: no HANDLE_KILLPRIV_V2 (custom I/O refused: %s)\\n", strerror(-e));
        }
        return r;
    }

    /* Does the request this thread answers ask for the file's set-user-ID bit (and its
       set-group-ID bit, if group-executable) to be cleared? WRITE's write_flags
       (FUSE_WRITE_KILL_SUIDGID: a writer without CAP_FSETID, also sent for direct I/O without
       HANDLE_KILLPRIV_V2), OPEN's open_flags (FUSE_OPEN_KILL_SUIDGID: O_TRUNC), SETATTR's valid
       (FATTR_KILL_SUIDGID: a truncate, a chown). CREATE's is not asked: it makes a new file,
       whose set-ID bits are the ones asked for (an O_TRUNC of a file just made truncates
       nothing, as on a local filesystem). */
    static int traxll_kill_suidgid(void) {
        const char *m = traxll_cur;
        uint32_t opcode, value, mask;
        size_t at;
        if (m == NULL || traxll_cur_len < 40)
            return 0;
        memcpy(&opcode, m + 4, sizeof opcode);
        switch (opcode) {
            case 16: at = 40 + 20; mask = 1u << 2; break;   /* fuse_write_in.write_flags */
            case 14: at = 40 + 4; mask = 1u << 0; break;    /* fuse_open_in.open_flags */
            case 4: at = 40; mask = 1u << 11; break;        /* fuse_setattr_in.valid */
            default: return 0;
        }
        if (at + sizeof value > traxll_cur_len)
            return 0;
        memcpy(&value, m + at, sizeof value);
        return (value & mask) != 0;
    }

    /* libfuse closes its descriptor of the device as it unmounts, so that the kernel ends the
       connection; ours must go first, or the unmounted connection would live on unread. */
    __attribute__((visibility("default")))
    void fuse_session_unmount(struct fuse_session *se) {
        static traxll_destroy_fn real;
        if (real == NULL && (real = (traxll_destroy_fn) traxll_real("fuse_session_unmount")) == NULL)
            return;
        if (traxll_rd.running && se == traxll_rd.se)
            traxll_quiesce(traxll_drain_seconds());
        real(se);
    }

    __attribute__((visibility("default")))
    void fuse_session_destroy(struct fuse_session *se) {
        static traxll_destroy_fn real;
        if (real == NULL && (real = (traxll_destroy_fn) traxll_real("fuse_session_destroy")) == NULL)
            return;
        if (traxll_rd.running && se == traxll_rd.se && traxll_stop_readers(traxll_drain_seconds()) > 0) {
            fprintf(stderr, "traxfs: a FUSE reader still drops cached pages at unmount: the session is left\\n");
            if (traxll_before_destroy != NULL)
                traxll_before_destroy();
            return;
        }
        if (traxll_before_destroy != NULL)
            traxll_before_destroy();
        real(se);
    }

    static void traxll_reader_counts(unsigned long *direct, unsigned long *queued, int *running, int *threads,
                                     int *peak, unsigned long *started) {
        *direct = __atomic_load_n(&traxll_rd.direct, __ATOMIC_RELAXED);
        pthread_mutex_lock(&traxll_rd.lock);
        *queued = traxll_rd.queued;
        *running = traxll_rd.running;
        *threads = traxll_rd.threads;
        *peak = traxll_rd.peak;
        *started = traxll_rd.started;
        pthread_mutex_unlock(&traxll_rd.lock);
    }

    /* Put this module (already loaded, RTLD_LOCAL as Python loads extensions) into the global
       symbol scope, so that extensions loaded after it bind fuse_session_new to ours. */
    static int traxll_promote(void) {
        Dl_info info;
        if (!dladdr((void *) &traxll_promote, &info) || info.dli_fname == NULL)
            return -1;
        return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL) == NULL ? -1 : 0;
    }

    /* An inode's attributes as the kernel takes them (times in nanoseconds since the epoch). */
    static void traxll_fill_attr(struct stat *st, uint64_t ino, unsigned mode, unsigned long nlink,
                                 unsigned uid, unsigned gid, uint64_t rdev, int64_t size, int64_t blocks,
                                 int64_t atime_ns, int64_t mtime_ns, int64_t ctime_ns) {
        memset(st, 0, sizeof *st);
        st->st_ino = ino;
        st->st_mode = mode;
        st->st_nlink = nlink;
        st->st_uid = uid;
        st->st_gid = gid;
        st->st_rdev = rdev;
        st->st_size = size;
        st->st_blksize = 1 << 20;
        st->st_blocks = blocks;
        st->st_atim.tv_sec = atime_ns / 1000000000; st->st_atim.tv_nsec = atime_ns % 1000000000;
        st->st_mtim.tv_sec = mtime_ns / 1000000000; st->st_mtim.tv_nsec = mtime_ns % 1000000000;
        st->st_ctim.tv_sec = ctime_ns / 1000000000; st->st_ctim.tv_nsec = ctime_ns % 1000000000;
    }

    /* A SETATTR's values (times in nanoseconds; "now" — the ``*_NOW`` flags: touch, utimensat
       UTIME_NOW — read from the realtime clock, as pyfuse3 does). */
    static int64_t traxll_ns(struct timespec t) { return (int64_t) t.tv_sec * 1000000000 + t.tv_nsec; }
    static void traxll_setattr_values(const struct stat *a, int to_set, unsigned *mode, unsigned *uid,
                                      unsigned *gid, int64_t *size, int64_t *atime_ns, int64_t *mtime_ns,
                                      int64_t *ctime_ns) {
        struct timespec now = {0, 0};
        if (to_set & (FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW))
            clock_gettime(CLOCK_REALTIME, &now);
        *mode = a->st_mode; *uid = a->st_uid; *gid = a->st_gid; *size = a->st_size;
        *atime_ns = traxll_ns(to_set & FUSE_SET_ATTR_ATIME ? a->st_atim : now);
        *mtime_ns = traxll_ns(to_set & FUSE_SET_ATTR_MTIME ? a->st_mtim : now);
        *ctime_ns = traxll_ns(a->st_ctim);
    }

    static int traxll_reply_statfs(fuse_req_t req, unsigned long bsize, uint64_t blocks, uint64_t bfree,
                                   uint64_t files, uint64_t ffree, unsigned long namemax) {
        struct statvfs st;
        memset(&st, 0, sizeof st);
        st.f_bsize = st.f_frsize = bsize;
        st.f_blocks = blocks;
        st.f_bfree = st.f_bavail = bfree;
        st.f_files = files;
        st.f_ffree = st.f_favail = ffree;
        st.f_namemax = namemax;
        return fuse_reply_statfs(req, &st);
    }

    static void traxll_set_open(struct fuse_file_info *fi, uint64_t fh, int direct_io, int keep_cache,
                                int nonseekable, int noflush) {
        fi->fh = fh;
        fi->direct_io = direct_io ? 1 : 0;
        fi->keep_cache = keep_cache ? 1 : 0;
        fi->nonseekable = nonseekable ? 1 : 0;
        fi->noflush = noflush ? 1 : 0;  /* FOPEN_NOFLUSH: close(2) sends no FLUSH (Linux >= 5.17) */
    }
    """
    ctypedef struct fuse_req:
        pass
    ctypedef fuse_req* fuse_req_t
    ctypedef uint64_t fuse_ino_t
    ctypedef long off_t
    ctypedef unsigned mode_t
    ctypedef unsigned uid_t
    ctypedef unsigned gid_t
    ctypedef int pid_t
    ctypedef unsigned long dev_t
    struct stat:
        pass
    struct fuse_file_info:
        int flags
        uint64_t fh
    struct fuse_entry_param:
        fuse_ino_t ino
        uint64_t generation
        stat attr
        double attr_timeout
        double entry_timeout
    struct fuse_ctx:
        uid_t uid
        gid_t gid
        pid_t pid
    struct fuse_forget_data:
        uint64_t ino
        uint64_t nlookup
    struct fuse_lowlevel_ops:
        void (*lookup)(fuse_req_t, fuse_ino_t, const char*) noexcept
        void (*forget)(fuse_req_t, fuse_ino_t, uint64_t) noexcept
        void (*forget_multi)(fuse_req_t, size_t, fuse_forget_data*) noexcept
        void (*getattr)(fuse_req_t, fuse_ino_t, fuse_file_info*) noexcept
        void (*setattr)(fuse_req_t, fuse_ino_t, stat*, int, fuse_file_info*) noexcept
        void (*mkdir)(fuse_req_t, fuse_ino_t, const char*, mode_t) noexcept
        void (*unlink)(fuse_req_t, fuse_ino_t, const char*) noexcept
        void (*rmdir)(fuse_req_t, fuse_ino_t, const char*) noexcept
        void (*rename)(fuse_req_t, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned int) noexcept
        void (*create)(fuse_req_t, fuse_ino_t, const char*, mode_t, fuse_file_info*) noexcept
        void (*open)(fuse_req_t, fuse_ino_t, fuse_file_info*) noexcept
        void (*read)(fuse_req_t, fuse_ino_t, size_t, off_t, fuse_file_info*) noexcept
        void (*write)(fuse_req_t, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) noexcept
        void (*flush)(fuse_req_t, fuse_ino_t, fuse_file_info*) noexcept
        void (*release)(fuse_req_t, fuse_ino_t, fuse_file_info*) noexcept
        void (*fsync)(fuse_req_t, fuse_ino_t, int, fuse_file_info*) noexcept
        void (*opendir)(fuse_req_t, fuse_ino_t, fuse_file_info*) noexcept
        void (*releasedir)(fuse_req_t, fuse_ino_t, fuse_file_info*) noexcept
        void (*readdirplus)(fuse_req_t, fuse_ino_t, size_t, off_t, fuse_file_info*) noexcept
        void (*symlink)(fuse_req_t, const char*, fuse_ino_t, const char*) noexcept
        void (*link)(fuse_req_t, fuse_ino_t, fuse_ino_t, const char*) noexcept
        void (*mknod)(fuse_req_t, fuse_ino_t, const char*, mode_t, dev_t) noexcept
        void (*readlink)(fuse_req_t, fuse_ino_t) noexcept
        void (*statfs)(fuse_req_t, fuse_ino_t) noexcept
        void (*listxattr)(fuse_req_t, fuse_ino_t, size_t) noexcept
        void (*setxattr)(fuse_req_t, fuse_ino_t, const char*, const char*, size_t, int) noexcept
        void (*removexattr)(fuse_req_t, fuse_ino_t, const char*) noexcept
        void (*fsyncdir)(fuse_req_t, fuse_ino_t, int, fuse_file_info*) noexcept
        void (*getxattr)(fuse_req_t, fuse_ino_t, const char*, size_t) noexcept
        void (*lseek)(fuse_req_t, fuse_ino_t, off_t, int, fuse_file_info*) noexcept
        void (*fallocate)(fuse_req_t, fuse_ino_t, int, off_t, off_t, fuse_file_info*) noexcept
        void (*ioctl)(fuse_req_t, fuse_ino_t, unsigned int, void*, fuse_file_info*, unsigned int, const void*,
                      size_t, size_t) noexcept
    fuse_lowlevel_ops traxll_extra
    unsigned TRAXLL_LSEEK, TRAXLL_FALLOCATE, TRAXLL_IOCTL, TRAXLL_LOOKUP, TRAXLL_GETATTR, TRAXLL_FORGET
    unsigned TRAXLL_CREATE, TRAXLL_WRITE, TRAXLL_FLUSH, TRAXLL_RELEASE, TRAXLL_FSYNC, TRAXLL_GETXATTR
    unsigned TRAXLL_UNLINK, TRAXLL_READ, TRAXLL_OPEN, TRAXLL_MKDIR, TRAXLL_RMDIR, TRAXLL_RENAME, TRAXLL_SETATTR
    unsigned TRAXLL_OPENDIR, TRAXLL_RELEASEDIR, TRAXLL_READDIRPLUS, TRAXLL_SYMLINK, TRAXLL_LINK, TRAXLL_MKNOD
    unsigned TRAXLL_READLINK, TRAXLL_STATFS, TRAXLL_LISTXATTR, TRAXLL_SETXATTR, TRAXLL_REMOVEXATTR, TRAXLL_FSYNCDIR
    int traxll_reply_statfs(fuse_req_t req, unsigned long bsize, uint64_t blocks, uint64_t bfree, uint64_t files,
                            uint64_t ffree, unsigned long namemax) nogil
    int FUSE_SET_ATTR_MODE, FUSE_SET_ATTR_UID, FUSE_SET_ATTR_GID, FUSE_SET_ATTR_SIZE, FUSE_SET_ATTR_ATIME
    int FUSE_SET_ATTR_MTIME, FUSE_SET_ATTR_ATIME_NOW, FUSE_SET_ATTR_MTIME_NOW, FUSE_SET_ATTR_CTIME
    void traxll_setattr_values(const stat* a, int to_set, unsigned* mode, unsigned* uid, unsigned* gid,
                               int64_t* size, int64_t* atime_ns, int64_t* mtime_ns, int64_t* ctime_ns)
    unsigned traxll_filled
    unsigned long traxll_sessions
    void (*traxll_before_destroy)() noexcept
    void traxll_reader_counts(unsigned long* direct, unsigned long* queued, int* running, int* threads, int* peak,
                              unsigned long* started)
    int TRAXLL_MAX_IDLE
    double (*traxll_drain_seconds)() noexcept
    int traxll_promote()
    void traxll_fill_attr(stat* st, uint64_t ino, unsigned mode, unsigned long nlink, unsigned uid,
                          unsigned gid, uint64_t rdev, int64_t size, int64_t blocks, int64_t atime_ns,
                          int64_t mtime_ns, int64_t ctime_ns)
    void traxll_set_open(fuse_file_info* fi, uint64_t fh, int direct_io, int keep_cache, int nonseekable,
                         int noflush)
    int traxll_direct_write(const fuse_file_info* fi)
    void traxll_drop_written(uint64_t ino, int64_t off, int64_t len) nogil
    int traxll_kill_suidgid()
    int traxll_killpriv_v2
    const fuse_ctx* fuse_req_ctx(fuse_req_t req)
    int fuse_reply_err(fuse_req_t req, int err) nogil
    void fuse_reply_none(fuse_req_t req) nogil
    int fuse_reply_entry(fuse_req_t req, const fuse_entry_param* e) nogil
    int fuse_reply_create(fuse_req_t req, const fuse_entry_param* e, const fuse_file_info* fi) nogil
    int fuse_reply_open(fuse_req_t req, const fuse_file_info* fi) nogil
    int fuse_reply_attr(fuse_req_t req, const stat* attr, double attr_timeout) nogil
    int fuse_reply_write(fuse_req_t req, size_t count) nogil
    int fuse_reply_buf(fuse_req_t req, const char* buf, size_t size) nogil
    size_t fuse_add_direntry_plus(fuse_req_t req, char* buf, size_t bufsize, const char* name,
                                  const fuse_entry_param* e, off_t off) nogil
    int fuse_reply_xattr(fuse_req_t req, size_t count) nogil
    int fuse_reply_readlink(fuse_req_t req, const char* link) nogil
    int fuse_reply_lseek(fuse_req_t req, off_t off) nogil
    int fuse_reply_ioctl(fuse_req_t req, int result, const void *buf, size_t size) nogil

log = logging.getLogger("traxfs.fuse")

DRAIN_TIMEOUT = 10.0  # at unmount: seconds to wait for readers still answering before EIO

_OPS = {"lseek": TRAXLL_LSEEK, "fallocate": TRAXLL_FALLOCATE, "ioctl": TRAXLL_IOCTL, "lookup": TRAXLL_LOOKUP,
        "getattr": TRAXLL_GETATTR, "forget": TRAXLL_FORGET, "create": TRAXLL_CREATE, "write": TRAXLL_WRITE,
        "flush": TRAXLL_FLUSH, "release": TRAXLL_RELEASE, "fsync": TRAXLL_FSYNC, "getxattr": TRAXLL_GETXATTR,
        "unlink": TRAXLL_UNLINK, "read": TRAXLL_READ, "open": TRAXLL_OPEN, "mkdir": TRAXLL_MKDIR,
        "rmdir": TRAXLL_RMDIR, "rename": TRAXLL_RENAME, "setattr": TRAXLL_SETATTR, "opendir": TRAXLL_OPENDIR,
        "releasedir": TRAXLL_RELEASEDIR, "readdirplus": TRAXLL_READDIRPLUS, "symlink": TRAXLL_SYMLINK,
        "link": TRAXLL_LINK, "mknod": TRAXLL_MKNOD, "readlink": TRAXLL_READLINK, "statfs": TRAXLL_STATFS,
        "listxattr": TRAXLL_LISTXATTR, "setxattr": TRAXLL_SETXATTR, "removexattr": TRAXLL_REMOVEXATTR,
        "fsyncdir": TRAXLL_FSYNCDIR}
_handlers: dict = {}  # op name -> the registered Python callable (run by the reader thread)
_pending: dict = {}  # id -> _Request being answered (a reader still busy at unmount: EIO)
_pending_lock = threading.Lock()
calls = dict.fromkeys(_OPS, 0)  # requests each handler received (tests check the route)
_ioctl_cmds: frozenset = frozenset()  # the ioctl commands the registered handler serves

# pyfuse3 loaded before us is bound to libfuse already: remember it, install() refuses
_late = "pyfuse3" in sys.modules
if traxll_promote() != 0:
    raise ImportError("traxfs.ext.fuse_lowlevel could not make its fuse_session_new visible to pyfuse3 "
                      "(dlopen RTLD_GLOBAL failed)")


cdef int _fill_entry(fuse_entry_param* e, tuple t) except -1:
    """``t``: (ino, generation, entry_timeout, attr_timeout, mode, nlink, uid, gid, rdev, size,
    blocks, atime_ns, mtime_ns, ctime_ns)."""
    memset(e, 0, sizeof(fuse_entry_param))
    e.ino = t[0]
    e.generation = t[1]
    e.entry_timeout = t[2]
    e.attr_timeout = t[3]
    traxll_fill_attr(&e.attr, t[0], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[12], t[13])
    return 0


cdef bytearray _pack_direntries(fuse_req_t req, list entries, size_t size):
    """A READDIRPLUS answer: ``entries`` (name, entry tuple, cookie), each with its attributes,
    in at most ``size`` bytes (the handler chose them by :func:`direntplus_size`); cut to what
    they fill, in place."""
    cdef fuse_entry_param e
    cdef bytearray buf = bytearray(size)
    cdef char* p = buf
    cdef size_t pos = 0, n
    cdef bytes name
    for name, entry, cookie in entries:
        _fill_entry(&e, entry)
        n = fuse_add_direntry_plus(req, p + pos, size - pos, name, &e, cookie)
        if n > size - pos:
            raise AssertionError(f"readdirplus: {name!r} does not fit in what is left of {size} bytes")
        pos += n
    del buf[pos:]
    return buf


def direntplus_size(bytes name) -> int:
    """Bytes the entry ``name`` takes in a READDIRPLUS answer (its attributes included)."""
    return fuse_add_direntry_plus(NULL, NULL, 0, name, NULL, 0)


cdef class _Request:
    """One kernel request: answered once, by whoever gets there first."""
    cdef fuse_req_t req
    cdef str op
    cdef bint answered
    cdef bint pending  # in _pending until answered
    cdef fuse_file_info fi  # create: the kernel's open flags, filled with the handle
    cdef size_t size  # getxattr: the caller's buffer (0: it asks for the size); read: the bytes asked
    cdef fuse_ino_t ino  # write: the file and where (its cached pages dropped after a direct one)
    cdef off_t off

    cdef bint _claim(self):
        """Take the right to answer (the GIL makes check-and-set atomic)."""
        if self.answered:
            return False
        self.answered = True
        if self.pending:
            with _pending_lock:
                _pending.pop(id(self), None)
        return True

    cdef void reply_err(self, int err):
        # the GIL stays held across the reply: fuse_session_destroy (which answers leftovers
        # first) cannot free the session under a reply in progress
        if self._claim():
            fuse_reply_err(self.req, err)

    cdef void reply_result(self, object result) except *:
        """Answer with ``result``; every conversion that can fail comes before the claim."""
        cdef fuse_entry_param e
        cdef off_t off
        cdef size_t n
        cdef Py_buffer view
        cdef bytearray listing
        cdef int ret = 0
        cdef str op = self.op
        if op == "write":
            n = result
            if self._claim():
                ret = fuse_reply_write(self.req, n)
                # after the answer, never before (why: traxll_drop_written)
                if n > 0 and traxll_direct_write(&self.fi):
                    with nogil:
                        traxll_drop_written(self.ino, self.off, n)
        elif op == "open" or op == "opendir":
            traxll_set_open(&self.fi, result[0], result[1], result[2], result[3], result[4])
            if self._claim():
                ret = fuse_reply_open(self.req, &self.fi)
        elif op == "read":
            PyObject_GetBuffer(result, &view, PyBUF_SIMPLE)
            try:
                if <size_t> view.len > self.size:
                    raise ValueError(f"read handler returned {view.len} bytes for a read of {self.size}")
                if self._claim():
                    ret = fuse_reply_buf(self.req, <const char*> view.buf, <size_t> view.len)
            finally:
                PyBuffer_Release(&view)
        elif op in ("flush", "release", "fsync", "unlink", "fallocate", "rmdir", "rename", "releasedir",
                    "setxattr", "removexattr", "fsyncdir"):
            if self._claim():
                ret = fuse_reply_err(self.req, 0)
        elif op in ("lookup", "mkdir", "symlink", "link", "mknod"):
            _fill_entry(&e, result)
            if self._claim():
                ret = fuse_reply_entry(self.req, &e)
        elif op == "readdirplus":
            listing = _pack_direntries(self.req, result, self.size)
            if self._claim():
                ret = fuse_reply_buf(self.req, <const char*> listing, len(listing))
        elif op == "getattr" or op == "setattr":
            _fill_entry(&e, result)
            if self._claim():
                ret = fuse_reply_attr(self.req, &e.attr, e.attr_timeout)
        elif op == "create":
            entry, opened = result
            _fill_entry(&e, entry)
            traxll_set_open(&self.fi, opened[0], opened[1], opened[2], opened[3], opened[4])
            if self._claim():
                ret = fuse_reply_create(self.req, &e, &self.fi)
        elif op == "readlink":
            target = bytes(result)
            if b"\0" in target:
                raise ValueError("a symbolic link's target holds a NUL byte")
            if self._claim():
                ret = fuse_reply_readlink(self.req, <const char*> target)
        elif op == "statfs":
            bsize, blocks, bfree, files, ffree, namemax = result
            if self._claim():
                ret = traxll_reply_statfs(self.req, bsize, blocks, bfree, files, ffree, namemax)
        elif op == "getxattr" or op == "listxattr":
            value = bytes(result) if op == "getxattr" else b"".join(name + b"\0" for name in result)
            if self.size == 0:
                if self._claim():
                    ret = fuse_reply_xattr(self.req, len(value))
            elif <size_t> len(value) > self.size:
                self.reply_err(_errno.ERANGE)
            elif self._claim():
                ret = fuse_reply_buf(self.req, <const char*> value, len(value))
        elif op == "lseek":
            off = result
            if self._claim():
                ret = fuse_reply_lseek(self.req, off)
        elif op == "ioctl":
            out = bytes(result)
            if self._claim():
                ret = fuse_reply_ioctl(self.req, 0, <const char*> out, len(out))
        else:
            raise AssertionError(f"no reply for {op}")
        if ret != 0:
            log.warning("FUSE %s answer refused by the kernel (connection aborted?): errno %d", op, -ret)

    def fail(self, BaseException e):
        """Answer with what ``e`` means to the caller (errno, or EIO for a bug, logged)."""
        err = getattr(e, "errno", None)
        if not isinstance(err, int) or err <= 0:
            log.error("internal error in FUSE %s", self.op, exc_info=e)
            err = _errno.EIO
        self.reply_err(err)


cdef void _dispatch(fuse_req_t req, str op, tuple args, fuse_file_info* fi=NULL, size_t size=0,
                    fuse_ino_t ino=0, off_t off=0) noexcept:
    """On the reader thread that read the request, GIL held: run the filesystem call and answer
    the kernel (the call may wait for the device or the log: other readers go on meanwhile)."""
    cdef _Request r = None
    try:
        r = _Request.__new__(_Request)
        r.req, r.op, r.size, r.ino, r.off = req, op, size, ino, off
        if fi != NULL:
            r.fi = fi[0]
        calls[op] += 1
        r.pending = True
        with _pending_lock:
            _pending[id(r)] = r
        r.reply_result(_handlers[op](*args))
    except BaseException as e:  # noqa: BLE001  (every outcome must answer the request)
        if r is None:
            fuse_reply_err(req, _errno.EIO)
        else:
            r.fail(e)


cdef inline tuple _caller(fuse_req_t req):
    cdef const fuse_ctx* c = fuse_req_ctx(req)
    return (c.pid, c.uid, c.gid)


# ----- the handlers libfuse calls (a reader thread; each takes the GIL) ---------------------------
# Building the arguments can fail only for want of memory; the request is answered EIO then.

cdef void _dispatch_named(fuse_req_t req, str op, fuse_ino_t parent, const char* name) noexcept:
    """A request about ``name`` in ``parent``, on behalf of its caller (lookup, unlink)."""
    try:
        args = (parent, <bytes> name) + _caller(req)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, op, args)


cdef void _ll_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) noexcept with gil:
    _dispatch_named(req, "lookup", parent, name)


cdef void _dispatch_inode(fuse_req_t req, str op, fuse_ino_t ino, fuse_file_info* fi) noexcept:
    """A request about inode ``ino``, on behalf of its caller (getattr, opendir)."""
    try:
        args = (ino,) + _caller(req)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, op, args, fi)


cdef void _ll_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) noexcept with gil:
    _dispatch_inode(req, "getattr", ino, NULL)


cdef void _ll_setattr(fuse_req_t req, fuse_ino_t ino, stat* attr, int to_set, fuse_file_info* fi) noexcept with gil:
    cdef unsigned mode, uid, gid
    cdef int64_t size, atime_ns, mtime_ns, ctime_ns
    try:
        traxll_setattr_values(attr, to_set, &mode, &uid, &gid, &size, &atime_ns, &mtime_ns, &ctime_ns)
        kw = {}  # what to change, as FileSystem.setattr's keywords
        if to_set & FUSE_SET_ATTR_MODE:
            kw["mode"] = mode
        if to_set & FUSE_SET_ATTR_UID:
            kw["uid"] = uid
        if to_set & FUSE_SET_ATTR_GID:
            kw["gid"] = gid
        if to_set & FUSE_SET_ATTR_SIZE:
            kw["size"] = size
        if to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW):
            kw["atime_ns"] = atime_ns
        if to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW):
            kw["mtime_ns"] = mtime_ns
        if to_set & FUSE_SET_ATTR_CTIME:
            kw["ctime_ns"] = ctime_ns
        if traxll_kill_suidgid():
            kw["kill_suidgid"] = True
        args = (ino, kw) + _caller(req)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "setattr", args)


cdef void _forget(list pairs) noexcept:
    try:
        calls["forget"] += 1
        _handlers["forget"](pairs)
    except BaseException:  # noqa: BLE001  (forget has no answer to carry an error)
        log.exception("internal error in FUSE forget")


cdef void _ll_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) noexcept with gil:
    _forget([(ino, nlookup)])
    fuse_reply_none(req)


cdef void _ll_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) noexcept with gil:
    cdef size_t i
    try:
        pairs = [(forgets[i].ino, forgets[i].nlookup) for i in range(count)]
    except BaseException:  # noqa: BLE001
        fuse_reply_none(req)
        return
    _forget(pairs)
    fuse_reply_none(req)


cdef void _ll_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) noexcept with gil:
    _dispatch_named(req, "unlink", parent, name)


cdef void _ll_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) noexcept with gil:
    _dispatch_named(req, "rmdir", parent, name)


cdef void _ll_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) noexcept with gil:
    try:
        args = (parent, <bytes> name, mode) + _caller(req)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "mkdir", args)


cdef void _ll_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
                     const char* newname, unsigned int flags) noexcept with gil:
    try:
        args = (parent, <bytes> name, newparent, <bytes> newname, flags) + _caller(req)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "rename", args)


cdef void _ll_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                     fuse_file_info* fi) noexcept with gil:
    try:
        args = (parent, <bytes> name, mode, fi.flags) + _caller(req)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "create", args, fi)


cdef void _ll_write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
                    fuse_file_info* fi) noexcept with gil:
    try:
        # the request's buffer is libfuse's: copied before the hand-off
        args = (fi.fh, off, buf[:size], bool(traxll_kill_suidgid()), ino)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "write", args, fi, 0, ino, off)


cdef void _ll_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) noexcept with gil:
    try:
        args = (ino, fi.flags, bool(traxll_kill_suidgid())) + _caller(req)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "open", args, fi)


cdef void _ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) noexcept with gil:
    try:
        args = (fi.fh, off, size)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "read", args, NULL, size)


cdef void _ll_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) noexcept with gil:
    _dispatch_inode(req, "opendir", ino, fi)


cdef void _ll_releasedir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) noexcept with gil:
    _dispatch(req, "releasedir", (fi.fh,))


cdef void _ll_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                          fuse_file_info* fi) noexcept with gil:
    _dispatch(req, "readdirplus", (fi.fh, off, size), NULL, size)


cdef void _ll_flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) noexcept with gil:
    _dispatch(req, "flush", (fi.fh,))


cdef void _ll_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) noexcept with gil:
    _dispatch(req, "release", (fi.fh,))


cdef void _ll_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi) noexcept with gil:
    _dispatch(req, "fsync", (fi.fh, datasync != 0))


cdef void _ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) noexcept with gil:
    try:
        args = (ino, <bytes> name)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "getxattr", args, NULL, size)


cdef void _ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) noexcept with gil:
    _dispatch(req, "listxattr", (ino,), NULL, size)


cdef void _ll_setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
                       int flags) noexcept with gil:
    try:
        args = (ino, <bytes> name, value[:size], flags)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "setxattr", args)


cdef void _ll_removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) noexcept with gil:
    try:
        args = (ino, <bytes> name)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "removexattr", args)


cdef void _ll_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi) noexcept with gil:
    _dispatch(req, "fsyncdir", (fi.fh, datasync != 0))


cdef void _ll_readlink(fuse_req_t req, fuse_ino_t ino) noexcept with gil:
    _dispatch(req, "readlink", (ino,))


cdef void _ll_statfs(fuse_req_t req, fuse_ino_t ino) noexcept with gil:
    _dispatch(req, "statfs", ())


cdef void _ll_symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) noexcept with gil:
    try:
        args = (parent, <bytes> name, <bytes> target) + _caller(req)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "symlink", args)


cdef void _ll_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) noexcept with gil:
    try:
        args = (ino, newparent, <bytes> newname) + _caller(req)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "link", args)


cdef void _ll_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) noexcept with gil:
    try:
        args = (parent, <bytes> name, mode, rdev) + _caller(req)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "mknod", args)


cdef void _ll_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, fuse_file_info* fi) noexcept with gil:
    _dispatch(req, "lseek", (ino, off, whence, fi.fh))


cdef void _ll_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t length,
                        fuse_file_info* fi) noexcept with gil:
    # no kill flag comes with it: a caller other than root (CAP_FSETID) clears set-ID bits, as
    # the kernel did with a SETATTR before HANDLE_KILLPRIV_V2
    _dispatch(req, "fallocate", (ino, mode, off, length, fi.fh, fuse_req_ctx(req).uid != 0))


cdef void _ll_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void* arg, fuse_file_info* fi,
                    unsigned int flags, const void* in_buf, size_t in_bufsz, size_t out_bufsz) noexcept with gil:
    if cmd not in _ioctl_cmds:  # isatty's TCGETS on every stdio open, and the like: no worker for them
        fuse_reply_err(req, _errno.ENOTTY)
        return
    try:
        data = (<const char*> in_buf)[:in_bufsz] if in_bufsz else b""
        args = (ino, cmd, data, out_bufsz, fi.fh)
    except BaseException:  # noqa: BLE001  (out of memory: still answer)
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "ioctl", args)


cdef void _before_destroy() noexcept with gil:
    """The session is about to be freed, its readers ended (or given up on after
    DRAIN_TIMEOUT): a request one of them is still answering is answered EIO now."""
    try:
        with _pending_lock:
            left = list(_pending.values())
        for r in left:
            log.warning("FUSE %s request still unanswered at unmount: answered EIO", (<_Request>r).op)
            (<_Request>r).reply_err(_errno.EIO)
    except BaseException:  # noqa: BLE001  (never let an exception escape into libfuse)
        log.exception("answering FUSE requests left at unmount")


traxll_before_destroy = _before_destroy


cdef double _drain_seconds() noexcept with gil:
    """DRAIN_TIMEOUT as it is now (tests shorten it)."""
    try:
        return float(DRAIN_TIMEOUT)
    except BaseException:  # noqa: BLE001
        return 10.0


traxll_drain_seconds = _drain_seconds


def install(handlers: dict | None = None, *, ioctl_cmds: frozenset = frozenset()) -> None:
    """Register the handlers the next FUSE session gets (call before ``pyfuse3.init()``);
    ``install()`` with nothing removes them all.

    ``handlers``: op name -> callable, run on the reader thread that read the request; it
    returns the result the reply carries, or raises an exception with an ``errno`` attribute to
    answer with that error. It may wait (for the device, the log, a lock): another reader
    thread reads the next request meanwhile.

    The ops, their arguments and results:

    * ``lookup(parent, name, pid, uid, gid)``, ``getattr(ino, pid, uid, gid)`` and
      ``setattr(ino, changes, pid, uid, gid)`` (``changes``: ``FileSystem.setattr``'s keywords:
      mode, uid, gid, size, atime_ns, mtime_ns, ctime_ns, kill_suidgid; "now" already read) -> entry tuple ``(ino, generation, entry_timeout, attr_timeout, mode, nlink, uid, gid, rdev, size,
      blocks, atime_ns, mtime_ns, ctime_ns)``;
    * ``create(parent, name, mode, flags, pid, uid, gid)`` -> ``(entry, (fh, direct_io,
      keep_cache, nonseekable, noflush))``; ``open(ino, flags, kill_suidgid, pid, uid, gid)`` ->
      ``(fh, direct_io, keep_cache, nonseekable, noflush)``, and ``opendir(ino, pid, uid, gid)``
      the same (``noflush``: the kernel sends no FLUSH when a descriptor of the open closes);
    * ``readdirplus(fh, off, size)`` -> list of ``(name, entry tuple, cookie)`` that fit in
      ``size`` bytes (:func:`direntplus_size` each; the kernel takes a lookup reference of
      every one but "." and "..");
    * ``forget(pairs)`` (no answer; ``pairs``: list of ``(ino, nlookup)``);
    * ``mkdir(parent, name, mode, pid, uid, gid)``, ``symlink(parent, name, target, pid, uid,
      gid)``, ``link(ino, new_parent, new_name, pid, uid, gid)`` and ``mknod(parent, name, mode,
      rdev, pid, uid, gid)`` -> entry tuple;
    * ``setxattr(ino, name, value, flags)``, ``removexattr(ino, name)`` and ``fsyncdir(fh,
      datasync)`` -> ``None``;
    * ``readlink(ino)`` -> the target (bytes); ``statfs()`` -> ``(block_size, blocks,
      blocks_free, files, files_free, name_max)``; ``listxattr(ino)`` -> the names (the size
      check against the caller's buffer is done here);
    * ``rename(parent, name, new_parent, new_name, flags, pid, uid, gid)`` -> ``None``;
    * ``unlink(parent, name, pid, uid, gid)``, ``rmdir`` (the same), ``flush(fh)``, ``release(fh)``,
      ``releasedir(fh)``,
      ``fsync(fh, datasync)`` -> ``None``; ``write(fh, off, data, kill_suidgid, ino)`` -> bytes
      written;
    * ``read(fh, off, size)`` -> at most ``size`` bytes (any object with the buffer interface);
    * ``getxattr(ino, name)`` -> the value (the size check against the caller's buffer is done here);
    * ``lseek(ino, off, whence, fh)`` -> new offset, for ``SEEK_DATA`` / ``SEEK_HOLE`` (the kernel
      handles the other whences itself);
    * ``fallocate(ino, mode, off, length, fh, kill_suidgid)`` -> ``None`` (the kernel passes on ``KEEP_SIZE``,
      ``PUNCH_HOLE`` and ``ZERO_RANGE``; ENOSYS once makes it refuse every later call itself);
    * ``ioctl(ino, cmd, in_bytes, out_size, fh)`` -> out bytes, for the restricted ioctls the
      kernel passes on; only the commands in ``ioctl_cmds`` reach it, any other is ENOTTY at once.
    """
    if _late:
        raise RuntimeError("pyfuse3 was imported before traxfs.ext.fuse_lowlevel, so its calls are bound "
                           "to libfuse directly and lseek cannot be served: import traxfs before pyfuse3")
    handlers = dict(handlers or {})
    unknown = set(handlers) - set(_OPS)
    if unknown:
        raise ValueError(f"no such FUSE operation here: {sorted(unknown)}")
    global _ioctl_cmds
    _handlers.clear(); _handlers.update(handlers)
    _ioctl_cmds = frozenset(ioctl_cmds) if "ioctl" in handlers else frozenset()
    served = set(handlers)
    memset(&traxll_extra, 0, sizeof(traxll_extra))
    if "lseek" in served:
        traxll_extra.lseek = _ll_lseek
    if "fallocate" in served:
        traxll_extra.fallocate = _ll_fallocate
    if "ioctl" in served:
        traxll_extra.ioctl = _ll_ioctl
    if "lookup" in served:
        traxll_extra.lookup = _ll_lookup
    if "getattr" in served:
        traxll_extra.getattr = _ll_getattr
    if "forget" in served:
        traxll_extra.forget = _ll_forget
    if "forget" in served:
        traxll_extra.forget_multi = _ll_forget_multi
    if "create" in served:
        traxll_extra.create = _ll_create
    if "open" in served:
        traxll_extra.open = _ll_open
    if "read" in served:
        traxll_extra.read = _ll_read
    if "write" in served:
        traxll_extra.write = _ll_write
    if "flush" in served:
        traxll_extra.flush = _ll_flush
    if "release" in served:
        traxll_extra.release = _ll_release
    if "fsync" in served:
        traxll_extra.fsync = _ll_fsync
    if "getxattr" in served:
        traxll_extra.getxattr = _ll_getxattr
    if "unlink" in served:
        traxll_extra.unlink = _ll_unlink
    if "setattr" in served:
        traxll_extra.setattr = _ll_setattr
    if "opendir" in served:
        traxll_extra.opendir = _ll_opendir
    if "releasedir" in served:
        traxll_extra.releasedir = _ll_releasedir
    if "readdirplus" in served:
        traxll_extra.readdirplus = _ll_readdirplus
    if "symlink" in served:
        traxll_extra.symlink = _ll_symlink
    if "link" in served:
        traxll_extra.link = _ll_link
    if "mknod" in served:
        traxll_extra.mknod = _ll_mknod
    if "readlink" in served:
        traxll_extra.readlink = _ll_readlink
    if "statfs" in served:
        traxll_extra.statfs = _ll_statfs
    if "listxattr" in served:
        traxll_extra.listxattr = _ll_listxattr
    if "setxattr" in served:
        traxll_extra.setxattr = _ll_setxattr
    if "removexattr" in served:
        traxll_extra.removexattr = _ll_removexattr
    if "fsyncdir" in served:
        traxll_extra.fsyncdir = _ll_fsyncdir
    if "mkdir" in served:
        traxll_extra.mkdir = _ll_mkdir
    if "rmdir" in served:
        traxll_extra.rmdir = _ll_rmdir
    if "rename" in served:
        traxll_extra.rename = _ll_rename


def installed() -> frozenset:
    """The slots the last session made through ``fuse_session_new`` got from this module
    (empty if no session was made through it: pyfuse3 bypassed the interposition)."""
    if traxll_sessions == 0:
        return frozenset()
    return frozenset(name for name, bit in _OPS.items() if traxll_filled & bit)


def reader() -> dict:
    """The session's reader threads: ``running`` (they read the device; False: pyfuse3 does, as
    for a session without our slots), ``threads`` alive now and at most (``peak``), how many
    were ever started (``started``), requests they answered themselves (``direct``) and those
    they queued for pyfuse3 (``queued``), counted since the session started; ``max_idle``: the
    idle readers kept (a reader that finds that many others idle ends)."""
    cdef unsigned long direct = 0, queued = 0, started = 0
    cdef int running = 0, threads = 0, peak = 0
    traxll_reader_counts(&direct, &queued, &running, &threads, &peak, &started)
    return {"running": bool(running), "threads": threads, "peak": peak, "started": started, "direct": direct,
            "queued": queued, "max_idle": TRAXLL_MAX_IDLE}


def killpriv_v2() -> bool:
    """Whether the kernel was told HANDLE_KILLPRIV_V2 in the last session's INIT answer: it
    then asks no ``security.capability`` before a write of a file found once without one, and
    the server clears set-ID bits where a request says so."""
    return bool(traxll_killpriv_v2)


def invalidate_attributes(uint64_t ino) -> None:
    """Tell the kernel its cached attributes of ``ino`` are stale: for a change it did not make
    itself and does not re-read after (the ctime of a ``chattr``; the blocks of preallocation
    given back at close), which it would otherwise show until the attribute timeout. Pages
    are not touched, so this waits for nothing; nothing is done once the session stops."""
    with nogil:
        traxll_drop_written(ino, -1, 0)


def sessions() -> int:
    """How many FUSE sessions this process made through this module's ``fuse_session_new``."""
    return traxll_sessions


cdef extern from "<malloc.h>":
    int mallopt(int param, int value)
    int M_ARENA_MAX


def limit_malloc_arenas(int arenas) -> bool:
    """Let glibc's malloc keep at most ``arenas`` arenas in this process (``M_ARENA_MAX``);
    False if it refused. By default every thread that finds the arenas in use makes one more, up
    to eight per CPU, and each keeps what was freed into it (the buffers of large writes, above
    all: the dynamic mmap threshold moves them from mmap into the arenas): a daemon whose reader
    and worker threads come and go grew by 70 MiB instead of 35 under a full-volume queue test
    on a busy machine. The handlers allocate under the GIL, so one arena costs no contention
    worth having more for. Only arenas made after the call are bounded."""
    return mallopt(M_ARENA_MAX, arenas) == 1

# cython: language_level=3
"""FUSE low-level handlers next to pyfuse3's: the operations pyfuse3 does not carry (``lseek``,
``fallocate``, ``ioctl``) and the hot ones it carries too slowly (lookup, getattr, forget,
create, write, flush, release, fsync, getxattr, unlink), added without forking pyfuse3.

pyfuse3 fills a ``struct fuse_lowlevel_ops`` and hands it to ``fuse_session_new()``, which
copies it into the session. This module defines ``fuse_session_new`` itself and, as it is
imported, promotes itself into the process's global symbol scope (``dlopen`` with
``RTLD_NOLOAD | RTLD_GLOBAL``). pyfuse3's extension, loaded later, binds its call to ours; ours
copies the table it was given, puts our handlers in the slots we registered (over pyfuse3's for
the hot ones), and calls libfuse's own ``fuse_session_new`` (``dlvsym(RTLD_NEXT, …,
"FUSE_3.0")``). It also defines ``fuse_session_destroy``, to answer requests still in flight
before the session is freed. Nothing changes for a process that never registers a handler: the
table passes through as it came.

Why the hot requests bypass pyfuse3: pyfuse3 turns every request into a trio task whose
coroutine awaits the filesystem and answers (~140 µs of Python per request on this machine,
``BENCHMARKS.md``), and a create through the mount is six requests. Here a request costs one
call into Python on the loop's thread: an ``inline`` callable answers at once what needs no I/O
(a cached lookup, getattr, a flush with nothing to do, forget), anything else goes on the
worker pool's queue (``submit``) and the worker thread answers the kernel itself (libfuse's
reply functions are thread-safe), with no trip back through the loop.

Import order matters and is checked loudly: the ``traxfs`` package imports this module first,
before anything under it can import pyfuse3 (Python opens extensions ``RTLD_NOW``, so a pyfuse3
loaded earlier is bound to libfuse for good). :func:`install` refuses when pyfuse3 was loaded
first, and :func:`installed` tells, after ``pyfuse3.init()``, which slots the session really got.

Each request is answered exactly once: with the callable's result, with the errno of what it
raised (an exception with an ``errno`` attribute: ``FsError``, ``FUSEError``, ``OSError``),
with EIO and a log line for anything else, or with EIO at unmount if its worker has not
answered by then. The kernel refuses a reply only once the connection is aborted (a request it
has sent waits for its answer even when the caller is killed): the session is over then, so
what the result took (a lookup reference, an open handle) goes with it; the refusal is logged.
"""

import errno as _errno
import logging
import sys
import threading
from collections.abc import Callable
from functools import partial

from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memset

cdef extern from *:
    """
    #define FUSE_USE_VERSION 312
    #ifndef _GNU_SOURCE
    #define _GNU_SOURCE
    #endif
    #include <dlfcn.h>
    #include <stdio.h>
    #include <string.h>
    #include <sys/stat.h>
    #include <fuse_lowlevel.h>

    /* The handlers this module adds: filled by the Cython side before a session is made. Each
       non-NULL slot goes into the session's table, over pyfuse3's if it had one. */
    static struct fuse_lowlevel_ops traxll_extra;
    /* Which slots the last session got from us (bit per TRAXLL_* op), and how many sessions
       were made through us: zero after pyfuse3.init() means pyfuse3 bypassed this module. */
    enum { TRAXLL_LSEEK = 1, TRAXLL_FALLOCATE = 2, TRAXLL_IOCTL = 4, TRAXLL_LOOKUP = 8, TRAXLL_GETATTR = 16,
           TRAXLL_FORGET = 32, TRAXLL_CREATE = 64, TRAXLL_WRITE = 128, TRAXLL_FLUSH = 256,
           TRAXLL_RELEASE = 512, TRAXLL_FSYNC = 1024, TRAXLL_GETXATTR = 2048, TRAXLL_UNLINK = 4096 };
    static unsigned traxll_filled;
    static unsigned long traxll_sessions;
    static void (*traxll_before_destroy)(void);

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

    __attribute__((visibility("default")))
    void fuse_session_destroy(struct fuse_session *se) {
        static traxll_destroy_fn real;
        if (real == NULL && (real = (traxll_destroy_fn) traxll_real("fuse_session_destroy")) == NULL)
            return;
        if (traxll_before_destroy != NULL)
            traxll_before_destroy();
        real(se);
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

    static void traxll_set_open(struct fuse_file_info *fi, uint64_t fh, int direct_io, int keep_cache,
                                int nonseekable) {
        fi->fh = fh;
        fi->direct_io = direct_io ? 1 : 0;
        fi->keep_cache = keep_cache ? 1 : 0;
        fi->nonseekable = nonseekable ? 1 : 0;
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
        void (*unlink)(fuse_req_t, fuse_ino_t, const char*) noexcept
        void (*create)(fuse_req_t, fuse_ino_t, const char*, mode_t, fuse_file_info*) noexcept
        void (*write)(fuse_req_t, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) noexcept
        void (*flush)(fuse_req_t, fuse_ino_t, fuse_file_info*) noexcept
        void (*release)(fuse_req_t, fuse_ino_t, fuse_file_info*) noexcept
        void (*fsync)(fuse_req_t, fuse_ino_t, int, fuse_file_info*) noexcept
        void (*getxattr)(fuse_req_t, fuse_ino_t, const char*, size_t) noexcept
        void (*lseek)(fuse_req_t, fuse_ino_t, off_t, int, fuse_file_info*) noexcept
        void (*fallocate)(fuse_req_t, fuse_ino_t, int, off_t, off_t, fuse_file_info*) noexcept
        void (*ioctl)(fuse_req_t, fuse_ino_t, unsigned int, void*, fuse_file_info*, unsigned int, const void*,
                      size_t, size_t) noexcept
    fuse_lowlevel_ops traxll_extra
    unsigned TRAXLL_LSEEK, TRAXLL_FALLOCATE, TRAXLL_IOCTL, TRAXLL_LOOKUP, TRAXLL_GETATTR, TRAXLL_FORGET
    unsigned TRAXLL_CREATE, TRAXLL_WRITE, TRAXLL_FLUSH, TRAXLL_RELEASE, TRAXLL_FSYNC, TRAXLL_GETXATTR
    unsigned TRAXLL_UNLINK
    unsigned traxll_filled
    unsigned long traxll_sessions
    void (*traxll_before_destroy)() noexcept
    int traxll_promote()
    void traxll_fill_attr(stat* st, uint64_t ino, unsigned mode, unsigned long nlink, unsigned uid,
                          unsigned gid, uint64_t rdev, int64_t size, int64_t blocks, int64_t atime_ns,
                          int64_t mtime_ns, int64_t ctime_ns)
    void traxll_set_open(fuse_file_info* fi, uint64_t fh, int direct_io, int keep_cache, int nonseekable)
    const fuse_ctx* fuse_req_ctx(fuse_req_t req)
    int fuse_reply_err(fuse_req_t req, int err) nogil
    void fuse_reply_none(fuse_req_t req) nogil
    int fuse_reply_entry(fuse_req_t req, const fuse_entry_param* e) nogil
    int fuse_reply_create(fuse_req_t req, const fuse_entry_param* e, const fuse_file_info* fi) nogil
    int fuse_reply_attr(fuse_req_t req, const stat* attr, double attr_timeout) nogil
    int fuse_reply_write(fuse_req_t req, size_t count) nogil
    int fuse_reply_buf(fuse_req_t req, const char* buf, size_t size) nogil
    int fuse_reply_xattr(fuse_req_t req, size_t count) nogil
    int fuse_reply_lseek(fuse_req_t req, off_t off) nogil
    int fuse_reply_ioctl(fuse_req_t req, int result, const void *buf, size_t size) nogil

log = logging.getLogger("traxfs.fuse")

DRAIN_TIMEOUT = 10.0  # at unmount: seconds to wait for workers still answering before EIO


class _Later:
    """What an ``inline`` callable returns when the request needs a worker."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "LATER"


LATER = _Later()

_OPS = {"lseek": TRAXLL_LSEEK, "fallocate": TRAXLL_FALLOCATE, "ioctl": TRAXLL_IOCTL, "lookup": TRAXLL_LOOKUP,
        "getattr": TRAXLL_GETATTR, "forget": TRAXLL_FORGET, "create": TRAXLL_CREATE, "write": TRAXLL_WRITE,
        "flush": TRAXLL_FLUSH, "release": TRAXLL_RELEASE, "fsync": TRAXLL_FSYNC, "getxattr": TRAXLL_GETXATTR,
        "unlink": TRAXLL_UNLINK}
_INLINE_ONLY = frozenset({"forget"})  # answered on the loop's thread, never by a worker
_handlers: dict = {}  # op name -> the registered Python callable (run by a worker)
_inline: dict = {}  # op name -> the callable tried first on the loop's thread (result or LATER)
_submit = None  # runs a job (a callable of no arguments) in a worker thread
_pending: dict = {}  # id -> _Request handed to a worker and not yet answered
_idle = threading.Condition()  # notified when _pending empties
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


cdef class _Request:
    """One kernel request: answered once, by whoever gets there first."""
    cdef fuse_req_t req
    cdef str op
    cdef bint answered
    cdef bint pending  # handed to a worker: in _pending until answered
    cdef fuse_file_info fi  # create: the kernel's open flags, filled with the handle
    cdef size_t size  # getxattr: the caller's buffer (0: it asks for the size)

    cdef bint _claim(self):
        """Take the right to answer (the GIL makes check-and-set atomic)."""
        if self.answered:
            return False
        self.answered = True
        if self.pending:
            with _idle:
                _pending.pop(id(self), None)
                if not _pending:
                    _idle.notify_all()
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
        cdef int ret = 0
        cdef str op = self.op
        if op == "write":
            n = result
            if self._claim():
                ret = fuse_reply_write(self.req, n)
        elif op in ("flush", "release", "fsync", "unlink", "fallocate"):
            if self._claim():
                ret = fuse_reply_err(self.req, 0)
        elif op == "lookup":
            _fill_entry(&e, result)
            if self._claim():
                ret = fuse_reply_entry(self.req, &e)
        elif op == "getattr":
            _fill_entry(&e, result)
            if self._claim():
                ret = fuse_reply_attr(self.req, &e.attr, e.attr_timeout)
        elif op == "create":
            entry, opened = result
            _fill_entry(&e, entry)
            traxll_set_open(&self.fi, opened[0], opened[1], opened[2], opened[3])
            if self._claim():
                ret = fuse_reply_create(self.req, &e, &self.fi)
        elif op == "getxattr":
            value = bytes(result)
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


def _serve(_Request r, fn, tuple args):
    """Worker thread: run the filesystem call and answer the kernel."""
    try:
        r.reply_result(fn(*args))
    except BaseException as e:  # noqa: BLE001  (every outcome must answer the request)
        r.fail(e)


cdef void _dispatch(fuse_req_t req, str op, tuple args, fuse_file_info* fi=NULL, size_t size=0) noexcept:
    """On the loop's thread, GIL held: answer at once if the inline callable can, else hand the
    request to a worker."""
    cdef _Request r = None
    try:
        r = _Request.__new__(_Request)
        r.req, r.op, r.size = req, op, size
        if fi != NULL:
            r.fi = fi[0]
        calls[op] += 1
        now = _inline.get(op)
        if now is not None:
            result = now(*args)
            if result is not LATER:
                r.reply_result(result)
                return
        r.pending = True
        _pending[id(r)] = r
        _submit(partial(_serve, r, _handlers[op], args))
    except BaseException as e:  # noqa: BLE001
        if r is None:
            fuse_reply_err(req, _errno.EIO)
        else:
            r.fail(e)


cdef inline tuple _caller(fuse_req_t req):
    cdef const fuse_ctx* c = fuse_req_ctx(req)
    return (c.pid, c.uid, c.gid)


# ----- the handlers libfuse calls (loop's thread; each takes the GIL) -----------------------------
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


cdef void _ll_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) noexcept with gil:
    try:
        args = (ino,) + _caller(req)
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "getattr", args)


cdef void _forget(list pairs) noexcept:
    try:
        calls["forget"] += 1
        _inline["forget"](pairs)
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
        args = (fi.fh, off, buf[:size])  # the request's buffer is libfuse's: copied before the hand-off
    except BaseException:  # noqa: BLE001
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "write", args)


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


cdef void _ll_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, fuse_file_info* fi) noexcept with gil:
    _dispatch(req, "lseek", (ino, off, whence, fi.fh))


cdef void _ll_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t length,
                        fuse_file_info* fi) noexcept with gil:
    _dispatch(req, "fallocate", (ino, mode, off, length, fi.fh))


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
    """The session is about to be freed: give workers a moment, then answer the rest (EIO)."""
    try:
        with _idle:
            _idle.wait_for(lambda: not _pending, timeout=DRAIN_TIMEOUT)
            left = list(_pending.values())
        for r in left:
            log.warning("FUSE %s request still unanswered at unmount: answered EIO", (<_Request>r).op)
            (<_Request>r).reply_err(_errno.EIO)
    except BaseException:  # noqa: BLE001  (never let an exception escape into libfuse)
        log.exception("answering FUSE requests left at unmount")


traxll_before_destroy = _before_destroy


def install(handlers: dict | None = None, *, inline: dict | None = None,
            submit: Callable[[Callable[[], None]], None] | None = None, ioctl_cmds: frozenset = frozenset()) -> None:
    """Register the handlers the next FUSE session gets (call before ``pyfuse3.init()``);
    ``install()`` with nothing removes them all.

    ``handlers``: op name -> callable run in a worker thread (``submit(job)`` runs ``job()`` in
    one); it returns the result the reply carries, or raises an exception with an ``errno``
    attribute to answer with that error. ``inline``: op name -> callable tried first on the
    loop's thread with the same arguments: its result is answered at once, :data:`LATER` hands
    the request to ``handlers``.

    The ops, their arguments and results:

    * ``lookup(parent, name, pid, uid, gid)`` and ``getattr(ino, pid, uid, gid)`` -> entry
      tuple ``(ino, generation, entry_timeout, attr_timeout, mode, nlink, uid, gid, rdev, size,
      blocks, atime_ns, mtime_ns, ctime_ns)``;
    * ``create(parent, name, mode, flags, pid, uid, gid)`` -> ``(entry, (fh, direct_io,
      keep_cache, nonseekable))``;
    * ``forget(pairs)`` (inline only; ``pairs``: list of ``(ino, nlookup)``);
    * ``unlink(parent, name, pid, uid, gid)``, ``flush(fh)``, ``release(fh)``,
      ``fsync(fh, datasync)`` -> ``None``; ``write(fh, off, data)`` -> bytes written;
    * ``getxattr(ino, name)`` -> the value (the size check against the caller's buffer is done here);
    * ``lseek(ino, off, whence, fh)`` -> new offset, for ``SEEK_DATA`` / ``SEEK_HOLE`` (the kernel
      handles the other whences itself);
    * ``fallocate(ino, mode, off, length, fh)`` -> ``None`` (the kernel passes on ``KEEP_SIZE``,
      ``PUNCH_HOLE`` and ``ZERO_RANGE``; ENOSYS once makes it refuse every later call itself);
    * ``ioctl(ino, cmd, in_bytes, out_size, fh)`` -> out bytes, for the restricted ioctls the
      kernel passes on; only the commands in ``ioctl_cmds`` reach it, any other is ENOTTY at once.
    """
    if _late:
        raise RuntimeError("pyfuse3 was imported before traxfs.ext.fuse_lowlevel, so its calls are bound "
                           "to libfuse directly and lseek cannot be served: import traxfs before pyfuse3")
    handlers, inline = dict(handlers or {}), dict(inline or {})
    unknown = (set(handlers) | set(inline)) - set(_OPS)
    if unknown:
        raise ValueError(f"no such FUSE operation here: {sorted(unknown)}")
    missing = {op for op in inline if op not in handlers and op not in _INLINE_ONLY} | \
              {op for op in handlers if op in _INLINE_ONLY}
    if missing:
        raise ValueError(f"each op needs a worker handler, forget only an inline one: {sorted(missing)}")
    if (handlers or inline) and submit is None:
        raise ValueError("handlers need submit (what runs a job in a worker thread)")
    global _submit, _ioctl_cmds
    _handlers.clear(); _handlers.update(handlers)
    _inline.clear(); _inline.update(inline)
    _submit = submit
    _ioctl_cmds = frozenset(ioctl_cmds) if "ioctl" in handlers else frozenset()
    served = set(handlers) | set(inline)
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


def installed() -> frozenset:
    """The slots the last session made through ``fuse_session_new`` got from this module
    (empty if no session was made through it: pyfuse3 bypassed the interposition)."""
    if traxll_sessions == 0:
        return frozenset()
    return frozenset(name for name, bit in _OPS.items() if traxll_filled & bit)


def sessions() -> int:
    """How many FUSE sessions this process made through this module's ``fuse_session_new``."""
    return traxll_sessions

# cython: language_level=3
"""FUSE low-level operations pyfuse3 does not carry (``lseek``, ``fallocate``, ``ioctl``), added
without forking pyfuse3.

pyfuse3 fills a ``struct fuse_lowlevel_ops`` and hands it to ``fuse_session_new()``, which
copies it into the session. This module defines ``fuse_session_new`` itself and, as it is
imported, promotes itself into the process's global symbol scope (``dlopen`` with
``RTLD_NOLOAD | RTLD_GLOBAL``). pyfuse3's extension, loaded later, binds its call to ours; ours
copies the table it was given, fills the slots pyfuse3 leaves empty with our handlers, and
calls libfuse's own ``fuse_session_new`` (``dlvsym(RTLD_NEXT, …, "FUSE_3.0")``). It also
defines ``fuse_session_destroy``, to answer requests still in flight before the session is
freed. Nothing changes for a process that never registers a handler: the table passes through
as it came.

Import order matters and is checked loudly: the ``traxfs`` package imports this module first,
before anything under it can import pyfuse3 (Python opens extensions ``RTLD_NOW``, so a pyfuse3
loaded earlier is bound to libfuse for good). :func:`install` refuses when pyfuse3 was loaded
first, and :func:`installed` tells, after ``pyfuse3.init()``, which slots the session really got.

A handler runs on pyfuse3's trio thread inside ``fuse_session_process_buf``: it takes the GIL
and starts a worker thread that runs the registered Python callable and answers the kernel
(libfuse's reply functions are thread-safe). Each request is answered exactly once: with the
callable's result, with the errno of what it raised (an exception with an ``errno`` attribute:
``FsError``, ``FUSEError``, ``OSError``), with EIO and a log line for anything else, or with EIO
at unmount if its worker has not answered by then.
"""

import errno as _errno
import logging
import sys
import threading
from collections.abc import Callable

from libc.stdint cimport uint64_t

cdef extern from *:
    """
    #define FUSE_USE_VERSION 312
    #ifndef _GNU_SOURCE
    #define _GNU_SOURCE
    #endif
    #include <dlfcn.h>
    #include <stdio.h>
    #include <string.h>
    #include <fuse_lowlevel.h>

    /* The handlers this module adds: filled by the Cython side before a session is made. */
    static struct fuse_lowlevel_ops traxll_extra;
    /* Which slots the last session got from us (bit per TRAXLL_* op), and how many sessions
       were made through us: zero after pyfuse3.init() means pyfuse3 bypassed this module. */
    enum { TRAXLL_LSEEK = 1, TRAXLL_FALLOCATE = 2, TRAXLL_IOCTL = 4 };
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
        if (ops.lseek == NULL && traxll_extra.lseek != NULL) {
            ops.lseek = traxll_extra.lseek;
            traxll_filled |= TRAXLL_LSEEK;
        }
        if (ops.fallocate == NULL && traxll_extra.fallocate != NULL) {
            ops.fallocate = traxll_extra.fallocate;
            traxll_filled |= TRAXLL_FALLOCATE;
        }
        if (ops.ioctl == NULL && traxll_extra.ioctl != NULL) {
            ops.ioctl = traxll_extra.ioctl;
            traxll_filled |= TRAXLL_IOCTL;
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
    """
    ctypedef struct fuse_req:
        pass
    ctypedef fuse_req* fuse_req_t
    ctypedef uint64_t fuse_ino_t
    ctypedef long off_t
    struct fuse_file_info:
        uint64_t fh
    struct fuse_lowlevel_ops:
        void (*lseek)(fuse_req_t, fuse_ino_t, off_t, int, fuse_file_info*) noexcept
        void (*fallocate)(fuse_req_t, fuse_ino_t, int, off_t, off_t, fuse_file_info*) noexcept
        void (*ioctl)(fuse_req_t, fuse_ino_t, unsigned int, void*, fuse_file_info*, unsigned int, const void*,
                      size_t, size_t) noexcept
    fuse_lowlevel_ops traxll_extra
    unsigned TRAXLL_LSEEK
    unsigned TRAXLL_FALLOCATE
    unsigned TRAXLL_IOCTL
    unsigned traxll_filled
    unsigned long traxll_sessions
    void (*traxll_before_destroy)() noexcept
    int traxll_promote()
    int fuse_reply_err(fuse_req_t req, int err) nogil
    int fuse_reply_lseek(fuse_req_t req, off_t off) nogil
    int fuse_reply_ioctl(fuse_req_t req, int result, const void *buf, size_t size) nogil

log = logging.getLogger("traxfs.fuse")

DRAIN_TIMEOUT = 10.0  # at unmount: seconds to wait for workers still answering before EIO

_OPS = {"lseek": TRAXLL_LSEEK, "fallocate": TRAXLL_FALLOCATE, "ioctl": TRAXLL_IOCTL}
_handlers: dict = {}  # op name -> the registered Python callable
_pending: dict = {}  # id -> _Request not yet answered
_idle = threading.Condition()  # notified when _pending empties
calls = dict.fromkeys(_OPS, 0)  # requests each added handler received (tests check the route)
_ioctl_cmds: frozenset = frozenset()  # the ioctl commands the registered handler serves

# pyfuse3 loaded before us is bound to libfuse already: remember it, install() refuses
_late = "pyfuse3" in sys.modules
if traxll_promote() != 0:
    raise ImportError("traxfs.ext.fuse_lowlevel could not make its fuse_session_new visible to pyfuse3 "
                      "(dlopen RTLD_GLOBAL failed)")


cdef class _Request:
    """One kernel request in flight: answered once, by whoever gets there first."""
    cdef fuse_req_t req
    cdef str op
    cdef bint answered

    cdef bint _claim(self):
        """Take the right to answer (the GIL makes check-and-set atomic)."""
        if self.answered:
            return False
        self.answered = True
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
        cdef off_t off
        if self.op == "lseek":
            off = result  # raises before claiming if the callable returned nonsense
            if self._claim():
                fuse_reply_lseek(self.req, off)
        elif self.op == "fallocate":
            if self._claim():
                fuse_reply_err(self.req, 0)
        elif self.op == "ioctl":
            out = bytes(result)  # raises before claiming if the callable returned nonsense
            if self._claim():
                fuse_reply_ioctl(self.req, 0, <const char*> out, len(out))
        else:
            raise AssertionError(f"no reply for {self.op}")

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


cdef void _dispatch(fuse_req_t req, str op, tuple args) noexcept:
    """On the trio thread, GIL held: hand the request to a worker thread."""
    cdef _Request r = None
    try:
        r = _Request.__new__(_Request)
        r.req, r.op = req, op
        _pending[id(r)] = r
        calls[op] += 1
        threading.Thread(target=_serve, args=(r, _handlers[op], args), name=f"fuse-{op}", daemon=True).start()
    except BaseException as e:  # noqa: BLE001
        if r is None:
            fuse_reply_err(req, _errno.EIO)
        else:
            r.fail(e)


cdef void _ll_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, fuse_file_info* fi) noexcept with gil:
    try:
        args = (ino, off, whence, fi.fh)
    except BaseException:  # noqa: BLE001  (out of memory: still answer)
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "lseek", args)


cdef void _ll_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t length,
                        fuse_file_info* fi) noexcept with gil:
    try:
        args = (ino, mode, off, length, fi.fh)
    except BaseException:  # noqa: BLE001  (out of memory: still answer)
        fuse_reply_err(req, _errno.EIO)
        return
    _dispatch(req, "fallocate", args)


cdef void _ll_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void* arg, fuse_file_info* fi,
                    unsigned int flags, const void* in_buf, size_t in_bufsz, size_t out_bufsz) noexcept with gil:
    if cmd not in _ioctl_cmds:  # isatty's TCGETS on every stdio open, and the like: no thread for them
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


def install(*, lseek: Callable[[int, int, int, int], int] | None = None,
            fallocate: Callable[[int, int, int, int, int], None] | None = None,
            ioctl: Callable[[int, int, bytes, int, int], bytes] | None = None,
            ioctl_cmds: frozenset = frozenset()) -> None:
    """Register the handlers the next FUSE session gets (call before ``pyfuse3.init()``).

    ``lseek(ino, off, whence, fh) -> new offset`` serves ``SEEK_DATA`` / ``SEEK_HOLE`` (the
    kernel handles the other whences itself). ``fallocate(ino, mode, off, length, fh)`` serves
    fallocate(2) (the kernel passes on modes ``KEEP_SIZE``, ``PUNCH_HOLE`` and ``ZERO_RANGE``;
    answering ENOSYS once makes it refuse every later call with EOPNOTSUPP itself).
    ``ioctl(ino, cmd, in_bytes, out_size, fh) -> out_bytes`` serves the restricted ioctls the
    kernel passes on (``FS_IOC_GETFLAGS``/``SETFLAGS`` for chattr: ``in_bytes`` is what the caller
    passed in, the result is copied back, at most ``out_size`` bytes); only the commands in
    ``ioctl_cmds`` reach it, any other is answered ENOTTY at once. Each runs in
    a worker thread; raise an exception with an ``errno`` attribute to answer with that error.
    ``None`` removes a handler."""
    if _late:
        raise RuntimeError("pyfuse3 was imported before traxfs.ext.fuse_lowlevel, so its calls are bound "
                           "to libfuse directly and lseek cannot be served: import traxfs before pyfuse3")
    for name, fn in (("lseek", lseek), ("fallocate", fallocate), ("ioctl", ioctl)):
        if fn is None:
            _handlers.pop(name, None)
        else:
            _handlers[name] = fn
    if lseek is None:
        traxll_extra.lseek = NULL
    else:
        traxll_extra.lseek = _ll_lseek
    if fallocate is None:
        traxll_extra.fallocate = NULL
    else:
        traxll_extra.fallocate = _ll_fallocate
    global _ioctl_cmds
    _ioctl_cmds = frozenset(ioctl_cmds) if ioctl is not None else frozenset()
    if ioctl is None:
        traxll_extra.ioctl = NULL
    else:
        traxll_extra.ioctl = _ll_ioctl


def installed() -> frozenset:
    """The slots the last session made through ``fuse_session_new`` got from this module
    (empty if no session was made through it: pyfuse3 bypassed the interposition)."""
    if traxll_sessions == 0:
        return frozenset()
    return frozenset(name for name, bit in _OPS.items() if traxll_filled & bit)


def sessions() -> int:
    """How many FUSE sessions this process made through this module's ``fuse_session_new``."""
    return traxll_sessions

"""No-wait reads: run a read-only operation only if it can finish without waiting.

The FUSE loop serves a request inline, in its own thread, when the answer is already in memory
(a ``stat`` of a cached inode, a name in resident B+tree pages): handing it to a worker thread
costs more than the lookup itself (``trio.to_thread``: ~270 µs here, the lookup ~50 µs). Inside
``with no_wait():`` every place that would wait raises :class:`WouldBlock` instead — a page
that is not resident or still loading, a page or structure latch another thread holds, a lock
the caller names through :func:`acquire` — and the caller retries the operation in a worker
thread, where waiting is harmless. Only side-effect-free operations may run this way: one cut
short has changed nothing.
"""

from __future__ import annotations

import threading


class WouldBlock(Exception):
    """A no-wait operation reached a point where it would have to wait."""


_state = threading.local()


class no_wait:  # noqa: N801  (used like a function: ``with no_wait():``)
    """Mark this thread's reads as no-wait for the block (nests)."""

    __slots__ = ()

    def __enter__(self) -> None:
        _state.depth = getattr(_state, "depth", 0) + 1

    def __exit__(self, *exc: object) -> None:
        _state.depth -= 1


def active() -> bool:
    """Is this thread inside ``no_wait()``?"""
    return getattr(_state, "depth", 0) > 0


def acquire(lock) -> None:
    """Acquire ``lock``: blocking normally; inside ``no_wait()``, only if it is free now. (Hot:
    every page and structure latch goes through here, so the free case costs one C call.)"""
    if lock.acquire(False):
        return
    if getattr(_state, "depth", 0) > 0:
        raise WouldBlock("a latch is held by another thread")
    lock.acquire()

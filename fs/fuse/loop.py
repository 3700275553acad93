"""The trio main loop every traxfs FUSE server runs (the filesystem, an exposed volume, the
pass-through baseline): serve pyfuse3 requests, report readiness once the mount is live, and
unmount on SIGTERM / SIGINT when running in the main thread."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable

import pyfuse3
import trio

log = logging.getLogger("traxfs.fuse")


async def serve_loop(probe: str, ready: Callable[[], None] | None, on_signals: bool,
                     min_tasks: int = 8, max_tasks: int = 64) -> None:
    """Run ``pyfuse3.main`` until the session ends (unmount or ``pyfuse3.terminate``).
    ``probe`` is a path inside the mount: stat'ing it returns only once the kernel's INIT has
    been answered, so ``ready()`` is called (in a worker thread) when the mount is really live."""
    async with trio.open_nursery() as nursery:
        if on_signals:
            nursery.start_soon(_stop_on_signal)
        nursery.start_soon(_probe_in_thread, probe, ready)
        await pyfuse3.main(min_tasks=min_tasks, max_tasks=max_tasks)
        nursery.cancel_scope.cancel()


async def _probe_in_thread(probe: str, ready: Callable[[], None] | None) -> None:
    """The probe's thread is abandoned when the loop ends: a SIGTERM may end ``pyfuse3.main``
    before a thread started late (a loaded machine) sends its stat, which then waits for an
    answer nobody will give until the session's device is closed — after this loop returns.
    Waiting for it here hung the server (and its caller) for good."""
    await trio.to_thread.run_sync(_probe, probe, ready, abandon_on_cancel=True)


def _probe(path: str, ready: Callable[[], None] | None) -> None:
    os.stat(path)
    if ready is not None:
        ready()


async def _stop_on_signal() -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for sig in signals:
            log.info("signal %d: unmounting", sig)
            pyfuse3.terminate()
            return

"""The worker threads that run the FUSE server's filesystem calls, off the trio thread.

``trio.to_thread.run_sync`` costs ~130 µs a call on this machine (its thread cache names the
OS thread for every job, takes a capacity limiter and hands over through a lock); each create
through the mount pays it three times (create, write, release). This pool does the one
necessary thing: a job goes on a ``queue.SimpleQueue`` to a waiting thread, and its outcome
comes back with one ``run_sync_soon`` that reschedules the waiting task (~80 µs measured side
by side, ``BENCHMARKS.md``).

Threads are started on demand, while every started one is busy, up to ``limit`` (a call may
wait for the log, so several must run at once), and stay for the next job until
:meth:`WorkerPool.close`. Like ``trio.to_thread.run_sync`` without ``abandon_on_cancel``, a
call that has begun cannot be cancelled: the task waits for its outcome.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import outcome
import trio


class WorkerPool:
    def __init__(self, limit: int = 64, name: str = "traxfs-worker") -> None:
        if limit < 1:
            raise ValueError(f"a worker pool needs at least one thread, not {limit}")
        self.limit, self.name = limit, name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._busy = 0  # jobs queued or running

    async def run(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` in a worker thread; its result, or its exception raised here."""
        task = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()

        def deliver(result: outcome.Outcome) -> None:
            try:
                token.run_sync_soon(trio.lowlevel.reschedule, task, result)
            except trio.RunFinishedError:  # the loop is gone: nobody waits for this any more
                pass

        self._submit(fn, deliver)
        return await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)

    def _submit(self, fn: Callable[[], Any], deliver: Callable[[outcome.Outcome], None]) -> None:
        with self._lock:
            self._busy += 1
            spawn = self._busy > self._threads and self._threads < self.limit
            if spawn:
                self._threads += 1
        self._jobs.put((fn, deliver))
        if spawn:
            threading.Thread(target=self._work, name=self.name, daemon=True).start()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, deliver = job
            result = outcome.capture(fn)
            with self._lock:
                self._busy -= 1
            deliver(result)

    def close(self) -> None:
        """Let every thread end once the jobs queued before are done."""
        with self._lock:
            n, self._threads = self._threads, 0
        for _ in range(n):
            self._jobs.put(None)

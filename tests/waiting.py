"""Waiting for what another thread, process or the kernel does in its own time: poll with a
deadline, never a fixed sleep (a loaded machine outlasts any sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(cond: Callable[[], object], what: str | Callable[[], str], timeout: float = 30.0,
             every: float = 0.02) -> None:
    """Until ``cond()`` is true; after ``timeout`` seconds fail naming ``what`` (a string, or a
    callable giving one: the state when it failed)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(every)

"""Simulated host time shared by the simulated disks of one logical volume.

With two CPU cores and no real disks, p disks can only run in parallel in *simulated* time: each
device issues its part of a request at the shared ``now``, its disk model says when that part
completes, and the volume's request completes at the latest of those (``settle``). Wall time is
unrelated unless pacing is asked for (demonstrations): then ``settle`` sleeps so that wall time
follows simulated time scaled by ``pace``.
"""

from __future__ import annotations

import os
import threading
import time


class SimClock:
    """Host time in simulated milliseconds.

    ``now`` is when the host issues its next request; devices ``note`` completions and the
    issuer calls ``settle`` to wait (in simulated time) for all of them.
    """

    def __init__(self, pace: float | None = None):
        """``pace`` = wall seconds per simulated second (0: no pacing; default: $TRAX_SIM_PACE)."""
        if pace is None:
            pace = float(os.environ.get("TRAX_SIM_PACE", "0") or 0)
        if pace < 0:
            raise ValueError(f"clock pace must be non-negative (got {pace})")
        self.pace = pace
        self.now = 0.0
        self._latest = 0.0
        self._lock = threading.Lock()  # devices of one volume may be driven from several threads
        self._wall0 = time.monotonic()  # wall time at simulated time zero (pacing)

    def note(self, end: float) -> None:
        """Record that a device completes work at simulated time ``end``."""
        with self._lock:
            self._latest = max(self._latest, end)

    def settle(self) -> float:
        """Advance ``now`` to the latest noted completion (never backwards) and return it."""
        with self._lock:
            self.now = max(self.now, self._latest)
            now = self.now
        if self.pace > 0:
            ahead = self._wall0 + now * self.pace / 1000.0 - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        return now

    def reset(self) -> None:
        """Back to time zero (a new experiment)."""
        with self._lock:
            self.now = self._latest = 0.0
            self._wall0 = time.monotonic()
